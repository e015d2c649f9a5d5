"""A sentence that names its record states only that record's figures: in every prose file a reader is given
(README.md, docs/*.md, CHANGELOG.md) and in the package's and benchmarks' docstrings and comments, each number of a
sentence that names a committed file under ``results/`` is a number of that file, recomputed from it: a number
written in it, or (in a JSON record) the length of one of its lists or objects; "15 min 46 s" is read as 946
seconds. A figure nudged by a point, or copied from another record, fails. Code spans, dates, commits and issue
numbers are not figures; the blocks generated from records (the study and quickstart blocks of docs/results.md)
are checked byte for byte by their own tests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.prose import SOURCES, source_prose
from tests.helpers.results_prose import GENERATED  # the blocks a test checks against their records

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")), "CHANGELOG.md"]
RECORD = re.compile(r"(results/[\w./\-]+\.(?:txt|json|jsonl|csv|md))")
NUMBER = re.compile(r"(?<![\w.\-/])[+−-]?\d+(?:[.,]\d+)*%?(?!\w)")
DURATION = re.compile(r"\b(\d+) min (\d+) s\b")
NOT_FIGURES = re.compile(r"`[^`]*`|\b\d{4}-\d{2}-\d{2}\b|\bissues? \d+\b|\b[0-9a-f]{7,40}\b|\bPython 3\.\d+\b")


def _value(text: str) -> float | None:
    try:
        return float(text.replace(",", "").replace("−", "-").rstrip("%"))
    except ValueError:
        return None


def _lengths(value) -> set[float]:
    """The length of every list and object in a JSON value (a count a sentence may give: "4 of its 6 cells")."""
    found: set[float] = set()
    if isinstance(value, (list, dict)):
        found.add(float(len(value)))
        for item in value.values() if isinstance(value, dict) else value:
            found |= _lengths(item)
    return found


def record_numbers(path: Path) -> set[float]:
    """Every number a sentence may take from the record at ``path``."""
    text = path.read_text(encoding="utf-8", errors="replace")
    found = {v for v in (_value(m.group()) for m in NUMBER.finditer(text)) if v is not None}
    if path.suffix == ".json":
        found |= _lengths(json.loads(text))
    return found


def sentence_figures(sentence: str) -> list[tuple[str, float]]:
    """(as written, value) of each figure of a sentence: durations as seconds, code, dates, commits and the record's
    own path left out."""
    text = RECORD.sub(" ", NOT_FIGURES.sub(" ", sentence))
    figures = [(m.group(), 60.0 * int(m.group(1)) + int(m.group(2))) for m in DURATION.finditer(text)]
    text = DURATION.sub(" ", text)
    return figures + [(m.group(), v) for m in NUMBER.finditer(text) if (v := _value(m.group())) is not None]


#: A block generated from committed records, which a test checks byte for byte against what they generate.


def sentences(text: str) -> list[str]:
    text = re.sub(r"```.*?```|<!--.*?-->", " ", GENERATED.sub(" ", text), flags=re.S)
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        # each list item and table row on its own: a bullet is never read with the next one
        for item in re.split(r"\n(?=\s*(?:[-*] |\d+\. |\|))", paragraph):
            found += re.split(r"(?<=[.;:])\s+(?=[A-Z(*])", " ".join(item.split()))
    return found


def unbacked(text: str) -> list[str]:
    """The sentences of ``text`` naming a committed record with a figure that record does not hold."""
    problems = []
    for sentence in sentences(text):
        records = [ROOT / r.rstrip(".") for r in RECORD.findall(sentence) if (ROOT / r.rstrip(".")).is_file()]
        if not records:
            continue
        held = set().union(*(record_numbers(r) for r in records))
        missing = [written for written, value in sentence_figures(sentence) if value not in held]
        if missing:
            problems.append(f"{missing} not in {[str(r.relative_to(ROOT)) for r in records]}: {sentence[:200]}")
    return problems


@pytest.mark.parametrize("page", PAGES + [s for s in SOURCES if "results/" in (ROOT / s).read_text(encoding="utf-8")])
def test_a_sentence_naming_its_record_states_only_that_records_figures(page):
    path = ROOT / page
    text = source_prose(path) if path.suffix == ".py" else path.read_text(encoding="utf-8")
    assert not unbacked(text), "\n".join(unbacked(text))


def named_records(text: str) -> list[str]:
    """The committed records a text names in its prose (a path in a code span names a kind of file, not a record)."""
    return [r.rstrip(".") for r in RECORD.findall(re.sub(r"``[^`]*``|`[^`]*`", " ", text))]


@pytest.mark.parametrize("page", PAGES + [s for s in SOURCES if "results/" in (ROOT / s).read_text(encoding="utf-8")])
def test_a_record_a_sentence_names_exists(page):
    """A sentence that names a record that was never committed (or was moved) cannot be checked, so it fails."""
    path = ROOT / page
    text = source_prose(path) if path.suffix == ".py" else path.read_text(encoding="utf-8")
    assert not [r for r in named_records(text) if not (ROOT / r).is_file()]


def test_a_made_up_record_is_named_and_a_path_in_code_is_not():
    made_up = "results/main_job/run_2026-12-01_0000000.json"
    assert named_records(f"As {made_up} shows, it took 5 s; `results/x/summary.json` is a kind of file.") == [made_up]
    assert not (ROOT / made_up).exists()


def test_a_figure_nudged_or_taken_from_another_record_fails_and_the_record_itself_passes():
    """Overclaims of the kinds an audit found: a figure moved by a point, a figure of another record, a count
    changed; and the same sentences as the records state them pass (durations as seconds, list lengths as counts)."""
    release = "results/benchmarks/release_scale_2026-12-05_083881f.txt"
    study = "results/overoptimisation_decide/closure.json"
    honest = [
        f"A million rows took 104.9 s at a peak of 3.02 GB ({release}).",
        f"It was closed with 4 of its 6 pilot cells committed ({study}).",
        "The run took 15 min 46 s (results/main_job/run_2026-12-04_1a08b47.json).",
    ]
    assert not unbacked("\n\n".join(honest))
    for sentence in (
        f"A million rows took 103.9 s at a peak of 3.02 GB ({release}).",  # nudged
        f"A million rows took 104.9 s at a peak of 2.02 GB ({release}).",
        f"It was closed with 5 of its 6 pilot cells committed ({study}).",  # a count changed
        "The run took 14 min 46 s (results/main_job/run_2026-12-04_1a08b47.json).",
        f"A million rows took 204.1 s ({release}).",  # the figure of an older record
    ):
        assert unbacked(sentence), sentence


def test_a_bullet_or_a_table_row_is_read_on_its_own():
    """CHANGELOG bullets were read together with the next one, so a figure of one bullet was checked against the
    record the next one named (and two overclaims were caught only by accident)."""
    record = "results/main_job/run_2026-12-04_1a08b47.json"
    text = f"- The weights were mode 0600 before\n- The run took 946 s ({record}).\n| 5 | a row |\n"
    assert sentences(text) == ["- The weights were mode 0600 before", f"- The run took 946 s ({record}).",
                               "| 5 | a row |"]  # fmt: skip
    assert not unbacked(text) and unbacked(f"- The run took 947 s ({record}).")
