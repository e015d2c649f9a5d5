"""Result sentences come from decisions: the hand-written reading above each study's generated block in
docs/results.md says only what its study's records back.

- Every number in a reading appears in the study's ``summary.json`` or its design (``recipes/studies/*.yaml``) at
  the precision it is written with (a share may be written as a percentage of a ratio, a difference without its
  sign). A figure typed by hand, derived in the head or left from an earlier run has nowhere to come from.
- "shows", "reaches", "falls", "peaked", "holds" and their forms appear only in a sentence that quotes a claim the
  study decided (its verdict holds or is reversed).
- The README's results section counts the studies and their claims by verdict as their summaries do, and quotes
  only figures they hold.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
#: Words that state a finding: only for a decided claim.
DECISION_WORDS = re.compile(r"\b(shows?|shown|reach(es|ed)?|fall(s|en)?|fell|peak(s|ed)?|holds?)\b", re.IGNORECASE)
#: A number as a reader sees it: a sign, digits, decimals, an optional percent sign; not part of a word or a name
#: (SmolLM2-135M, 2024 in "et al. 2024", χ², r*).
NUMBER = re.compile(r"(?<![\w.\-/])[+−-]?\d+(?:\.\d+)?%?(?!\w)")
CITATION_YEAR = re.compile(r"et al\. \d{4}")


def readings() -> dict[str, str]:
    """Study name → the hand-written paragraph just above its generated block (the first study's design is cpu,
    its records in results/study)."""
    text = PAGE.read_text(encoding="utf-8")
    found = {}
    for match in re.finditer(r"<!-- study:(?:(\w+):)?begin", text):
        before = text[: match.start()].rstrip()
        paragraph = before[before.rfind("\n\n") + 2 :]
        found[match.group(1) or "study"] = paragraph
    return found


def _numbers(value, out: list[float]) -> list[float]:
    if isinstance(value, bool):
        return out
    if isinstance(value, (int, float)):
        out.append(float(value))
    elif isinstance(value, str):
        out += [float(x) for x in re.findall(r"\d+(?:\.\d+)?", value)]
    elif isinstance(value, dict):
        for key, item in value.items():
            _numbers(key, out)
            _numbers(item, out)
    elif isinstance(value, list):
        for item in value:
            _numbers(item, out)
    return out


def backing(study: str) -> list[float]:
    """Every number the study's records and design hold."""
    summary = json.loads((ROOT / "results" / study / "summary.json").read_text(encoding="utf-8"))
    design = ROOT / "recipes" / "studies" / f"{study}.yaml"
    values = _numbers(summary, [])
    if design.is_file():
        values = _numbers(yaml.safe_load(design.read_text(encoding="utf-8")), values)
    return values


def unbacked(paragraph: str, values: list[float]) -> list[str]:
    """The numbers of ``paragraph`` that no value backs at their written precision."""
    text = CITATION_YEAR.sub("", paragraph)
    missing = []
    for token in NUMBER.findall(text):
        number = token.replace("−", "-").rstrip("%")
        decimals = len(number.split(".")[1]) if "." in number else 0
        written = abs(float(number))
        scales = (1, 100) if token.endswith("%") else (1,)  # a share may be written as a percentage of a ratio
        if not any(round(abs(v) * scale, decimals) == written for v in values for scale in scales):
            missing.append(token)
    return missing


def undecided_findings(paragraph: str, claims: list[dict]) -> list[str]:
    """Sentences that state a finding without quoting a decided claim."""
    decided = [c["claim"] for c in claims if c["verdict"] in ("holds", "reversed")]
    sentences = re.split(r"(?<=[.;:])\s+(?=[A-Z\"*(])", paragraph.replace("\n", " "))
    return [s for s in sentences if DECISION_WORDS.search(s) and not any(claim in s for claim in decided)]


@pytest.mark.parametrize("study", sorted(readings()))
def test_every_number_of_a_reading_is_in_its_records(study):
    assert not unbacked(readings()[study], backing(study)), readings()[study]


@pytest.mark.parametrize("study", sorted(readings()))
def test_findings_are_stated_only_for_decided_claims(study):
    claims = json.loads((ROOT / "results" / study / "summary.json").read_text(encoding="utf-8"))["claims"]
    assert not undecided_findings(readings()[study], claims)


def test_the_checks_catch_a_typed_figure_and_an_undecided_finding():
    """The two checks on sentences they must refuse and accept."""
    values = [0.4352, 58.2247, 6.0, -1.3716]
    assert unbacked("a share of 43.5% from 6 seeds, 58.2 points, ended 1.37 below", values) == []
    assert unbacked("435 rows, 3.4× the clean rows, 59%", values) == ["435", "3.4", "59%"]
    claims = [{"claim": "A ≥ B at 512 rows", "verdict": "holds"}, {"claim": "C falls", "verdict": "not decided"}]
    assert undecided_findings('"A ≥ B at 512 rows" holds. The line reaches the clean gain.', claims) == [
        "The line reaches the clean gain."
    ]


#: Numbers the README writes as words.
NUMBER_WORDS = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def readme_results() -> str:
    """The README's results section: from its heading to the next."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Results\n")
    return text[start : text.index("\n## ", start + 1)]


def verdict_counts(studies: list[str]) -> dict[str, int]:
    """Claims of these studies by verdict: holds, reversed, not decided, not tested."""
    counts = dict.fromkeys(("holds", "reversed", "not decided", "not tested"), 0)
    for study in studies:
        for claim in json.loads((ROOT / "results" / study / "summary.json").read_text(encoding="utf-8"))["claims"]:
            counts[next(kind for kind in counts if claim["verdict"].startswith(kind))] += 1
    return counts


def test_the_readme_results_count_the_committed_verdicts_and_quote_their_figures():
    """The README's headline counts the studies with a block in docs/results.md and their claims by verdict as
    their summaries do, and every figure it quotes is in one of them: adding a study, or re-running one, without
    updating the headline fails here."""
    section, studies = readme_results(), sorted(readings())
    counts = verdict_counts(studies)
    stated = re.search(r"(\w+) pre-registered studies", section)
    assert stated and NUMBER_WORDS.get(stated.group(1).lower()) == len(studies), stated
    tally = re.search(
        r"Of their (\d+) claims.*?(\d+) holds?, (\d+) (?:is|are) reversed, (\d+) (?:is|are) not decided.*?"
        r"(\d+) (?:was|were) not tested",
        section,
        re.DOTALL,
    )
    assert tally, section
    assert tuple(map(int, tally.groups())) == (sum(counts.values()), *counts.values())
    figures = [float(n) for n in (len(studies), *counts.values(), sum(counts.values()))]
    assert not unbacked(section, [v for study in studies for v in backing(study)] + figures)
