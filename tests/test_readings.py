"""Result sentences come from decisions: every prose file a reader is given (README.md, docs/*.md and the current
version's CHANGELOG entries) says only what the studies' records back.

- Every number in a study's hand-written reading (docs/results.md) and in the README's results section is in the
  study's ``summary.json`` or design, and the figures of one sentence (or clause) come from one record: the claim or
  the arm that sentence names, not any figure of the summary (0.48 written where the claim's figure is 0.56 fails).
- A p-value is the Holm-adjusted one, or is called raw.
- Decision words (shows, reaches, falls, turns down, over-optimises, significant, beats, outperforms, better, peaks
  and their forms) appear, in any prose file, only in a sentence that names a decided claim with its verdict: a
  figure of a claim that holds or is reversed, and the word "holds" or "reversed". Text in quotes (a claim's name,
  a printed reading such as "better than SFT") and code are not statements.
- "Reversed" appears only beside a reversed claim's figure (or in a count of verdicts).
- A model's estimate (the rows-needed crossing) is called an estimate.
- The README's verdicts are a block generated from every study's summary (``python -m squarechipo.reproduce study
  verdicts``), checked byte for byte, over exactly the studies with a block in docs/results.md.
- By construction rather than by words: a statement that quotes a claim's own figure (its paired value or interval
  bounds, naming the methods it compares there or in the statement before) states that claim's verdict and no other,
  whatever verb it compares with. A statement with no figure is left to the decision words.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
#: Words that state a finding: only for a decided claim.
DECISION_WORDS = re.compile(
    r"\b(shows?|shown|showing|reach(es|ed|ing)?|fall(s|en|ing)?|fell|turn(s|ed|ing)? down"
    r"|over-?optimi[sz](es|ed|ing|e)|significant(ly)?|beats?|beating|outperform(s|ed|ing)?|better|peak(s|ed|ing)?"
    r"|finds?|found|attain(s|ed)?|markedly)\b",
    re.IGNORECASE,
)
#: What marks a sentence as one about the studies' results.
RESULT_MARKER = re.compile(
    r"\b(stud(y|ies)|claims?|seeds?|gold gain|expected win|clean gain|over-?optimi[sz]\w*|Holm|p[- ]values?)\b"
    r"|\br\*(?!\w)|\bp\s*[=<≤]?\s*\d|\bp\s*[=<≤]\s*\.\d",  # r* ends in a symbol: no \b after it
    re.IGNORECASE,
)
#: A p-value as written, in any of its forms: "p 0.0922", "p = 0.031", "P=.031", "p < 0.05", "p-value 0.03",
#: "p-value of 0.031", "p value: 0.031".
P_VALUE = re.compile(r"\bp(?:[- ]?values?)?(?:\s+of)?\s*[:=<≤]?\s*(\d*\.\d+)", re.IGNORECASE)
#: Figures a sentence may use besides its record and the design: the 95% of an interval, the 80% of power.
CONVENTIONS = [95.0, 80.0, 0.8, 0.05]
#: A number as a reader sees it: a sign, digits, decimals, an optional percent sign; not part of a word or a name
#: (SmolLM2-135M, 2024 in "et al. 2024", χ², r*).
NUMBER = re.compile(r"(?<![\w.\-/])[+−-]?\d+(?:\.\d+)?%?(?!\w)")
CITATION_YEAR = re.compile(r"et al\.? \d{4}")


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


STUDIES = sorted(readings())


@functools.cache
def summary(study: str) -> dict:
    return json.loads((ROOT / "results" / study / "summary.json").read_text(encoding="utf-8"))


def prose_files() -> list[str]:
    """The README, every page of docs/ and the CHANGELOG, relative to the checkout."""
    return ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))), "CHANGELOG.md"]


def prose() -> dict[str, str]:
    """Every prose file a reader is given: the README, each page of docs/, the current version's CHANGELOG entries."""
    pages = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    pages |= {f"docs/{p.name}": p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))}
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    first = changelog.index("\n## ")
    pages["CHANGELOG.md"] = changelog[first : changelog.find("\n## ", first + 1)]
    return pages


def units(text: str) -> list[str]:
    """The statements of a text: its sentences, split again at semicolons, with code, generated study blocks, quoted
    text (a claim's name, a printed reading) and table rows' cell borders taken out."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"(?m)^#+ .*$", " ", text)  # headings name a topic (often a question), they state nothing
    text = re.sub(r"<!-- (?:study|verdicts):[^>]*begin.*?<!-- (?:study|verdicts):[^>]*end -->", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text.replace("\n", " "))
    text = re.sub(r"\"[^\"]*\"|“[^”]*”", " ", text).replace("|", ". ")
    text = re.sub(r"\b(et al|e\.g|i\.e|vs|Alg|App|Eq|Sec|Fig)\.", r"\1", text)  # abbreviations end no sentence
    found = [u.strip() for u in re.split(r"(?<=[.;!?])\s+(?=\S)|;\s+", text) if u.strip()]
    return [u for u in found if not u.endswith("?")]  # a question asks, it states no finding


def _records(value, found: list[list[float]], top: bool = True) -> list[float]:
    """Every dict below the summary's root as one record: the numbers of its subtree (a claim; an arm at an epoch
    with its gain, win and KL). Returns the numbers of ``value``'s subtree."""
    if isinstance(value, dict):
        numbers = _numbers({k: v for k, v in value.items() if not isinstance(v, (dict, list))}, [])
        for item in value.values():
            if isinstance(item, (dict, list)):
                numbers += _records(item, found, top=False)
        if not top:
            found.append(numbers)
        return numbers
    if isinstance(value, list):
        return [n for item in value for n in _records(item, found, top=False)]
    return _numbers(value, [])


@functools.cache
def records(study: str) -> list[list[float]]:
    found: list[list[float]] = []
    _records(summary(study), found)
    return found


@functools.cache
def design_values(study: str) -> list[float]:
    """The numbers of a study's design: its YAML file, or the built-in design (the first study's)."""
    design = ROOT / "recipes" / "studies" / f"{study}.yaml"
    if design.is_file():
        return _numbers(yaml.safe_load(design.read_text(encoding="utf-8")), [])
    from dataclasses import asdict

    from squarechipo.reproduce.study.design import StudyDesign

    return _numbers(json.loads(json.dumps(asdict(StudyDesign()), default=str)), [])


def clauses(unit: str) -> list[str]:
    """A statement cut before each figure that starts a new item of a list ("92% at ε = 4, 65% at ε = 2 and 32% at
    ε = 1"), never inside an interval's brackets: each item then names its own record."""
    parts, start, depth = [], 0, 0
    for index, char in enumerate(unit):
        depth += {"[": 1, "]": -1}.get(char, 0)
        for separator in (", ", " and "):
            if depth == 0 and unit.startswith(separator, index):
                if re.match(r"[+−-]?\d", unit[index + len(separator) :]):
                    parts.append(unit[start:index])
                    start = index + len(separator)
    return [*parts, unit[start:]]


def mixed_records(unit: str, studies: list[str], extra: list[float] = ()) -> list[str]:
    """The figures of ``unit`` that no single record backs together: in each of its clauses, every figure not in a
    design (or ``extra``) must come from one record of one of ``studies``. Empty when each clause's figures do."""
    fixed = [v for study in studies for v in design_values(study)] + CONVENTIONS + list(extra)
    candidates = [r for study in studies for r in records(study)]
    found = []
    for clause in clauses(unit):
        rest = [t for t in NUMBER.findall(CITATION_YEAR.sub("", clause)) if unbacked(t, fixed)]
        if rest:
            found += min((unbacked(" ".join(rest), record) for record in candidates), key=len, default=rest)
    return found


def raw_p_values(unit: str, studies: list[str]) -> list[str]:
    """p-values written as if adjusted that are a claim's raw p and not its Holm-adjusted one."""
    if re.search(r"\b(raw|unadjusted|before Holm)\b", unit):
        return []
    claims = [c for study in studies for c in summary(study)["claims"]]
    found = []
    for written in P_VALUE.findall(unit):
        decimals = len(written.split(".")[1])
        raw = any(round(c.get("p_value", math.nan), decimals) == float(written) for c in claims)
        holm = any(round(c.get("p_holm", math.nan), decimals) == float(written) for c in claims)
        if raw and not holm:
            found.append(written)
    return found


def _decided(studies: list[str], verdict: str) -> list[list[float]]:
    return [
        [c[k] for k in ("mean", "low", "high", "low_holm", "high_holm") if k in c]
        for study in studies
        for c in summary(study)["claims"]
        if c["verdict"] == verdict
    ]


def names_decided_claim(unit: str, studies: list[str], verdicts=("holds", "reversed")) -> bool:
    """The unit states a verdict (holds, reversed) and quotes a figure of a claim with that verdict."""
    for verdict in verdicts:
        said = re.search(rf"\b{'holds?' if verdict == 'holds' else 'reversed'}\b", unit, re.IGNORECASE)
        figures = [t for t in NUMBER.findall(unit) if "." in t]
        if said and any(not unbacked(t, values) for t in figures for values in _decided(studies, verdict)):
            return True
    return False


def undecided_findings(text: str, studies: list[str]) -> list[str]:
    """Statements about results with a decision word that name no decided claim with its verdict."""
    return [
        u
        for u in units(text)
        if RESULT_MARKER.search(u) and DECISION_WORDS.search(u) and not names_decided_claim(u, studies)
    ]


def misplaced_reversals(text: str, studies: list[str]) -> list[str]:
    """Statements saying "reversed" beside no reversed claim's figure (a count of verdicts is not one)."""
    return [
        u
        for u in units(text)
        if re.search(r"\breversed\b", u, re.IGNORECASE)
        and not re.search(r"\d+ (?:is|are|were) reversed", u)
        and not names_decided_claim(u, studies, verdicts=("reversed",))
    ]


def unnamed_estimates(unit: str, studies: list[str]) -> list[str]:
    """Figures of a model's estimate (the rows-needed crossing, its interval) in a unit that does not call it one."""
    if re.search(r"estimat", unit, re.IGNORECASE):
        return []
    estimates = [
        [e[k] for k in ("rows", "low", "high", "rows_line_in_n") if isinstance(e.get(k), (int, float))]
        for study in studies
        for e in summary(study).get("rows_needed") or []
    ]
    fixed = [v for study in studies for v in design_values(study)]
    return [
        t
        for t in NUMBER.findall(unit)
        if unbacked(t, fixed) and any(not unbacked(t, [v for v in values if math.isfinite(v)]) for values in estimates)
    ]


#: A verdict as prose states it, by kind (squarechipo.reproduce.study.verdicts.KINDS).
VERDICT_WORDS = {
    "holds": r"\bholds?\b",
    "reversed": r"\breversed\b",
    "not decided": r"\b(?:not|un)\s*-?decided\b|\bno claim (?:is|was) decided\b|\bnone of\b.*?\b(?:is|was) decided\b",
    "not tested": r"\bnot tested\b",
}
_CLAIM_FIGURES = ("mean", "low", "high", "low_holm", "high_holm")  # p-values: raw_p_values


#: What a claim compares: the methods and label orders its name gives.
ARMS = ("Square-χPO", "χPO", "rDPO", "DPO", "CTL", "LTC")


def _sides(text: str) -> set[str]:
    return {arm for arm in ARMS if re.search(rf"(?<![\w-]){re.escape(arm)}(?![\w-])", text)}


def quoted_claims(unit: str, studies: list[str], named: set[str] | None = None) -> list[dict]:
    """The claims ``unit`` quotes: it names every method (and label order) the claim compares and one of the claim's
    own figures (paired value, interval bounds) at its written precision, written to two decimals or more (a design
    value or a convention is no quote). ``named``: the methods named, if not only ``unit``'s."""
    fixed = [v for study in studies for v in design_values(study)] + CONVENTIONS
    figures = [
        t
        for t in NUMBER.findall(CITATION_YEAR.sub("", unit))
        if not t.endswith("%") and len(t.partition(".")[2]) >= 2 and unbacked(t, fixed)
    ]  # fmt: skip  (claims' differences are written to 0.01 in points or r*; a share in per cent is none)
    found = []
    for study in studies:
        for claim in summary(study)["claims"]:
            values = [claim[k] for k in _CLAIM_FIGURES if isinstance(claim.get(k), float) and math.isfinite(claim[k])]
            if any(not unbacked(t, values) for t in figures) and _sides(claim["claim"]) <= (named or _sides(unit)):
                found.append(claim)
    return found


def _claim_name(claim: str) -> str:
    """A claim's name without its parentheses ("Square-χPO ≥ DPO under CTL (ε = 0.5)": "Square-χPO ≥ DPO under
    CTL")."""
    return re.sub(r"\s*\([^)]*\)", "", claim)


def misread_verdicts(unit: str, studies: list[str], before: str = "") -> list[str]:
    """A statement that quotes a claim's figure must state that claim's verdict, and no verdict no quoted claim has:
    in whatever words it compares, a figure of a claim carries the claim's decision with it. The methods a claim
    compares may be named in the statement ``before`` it ("DPO moved ...; it ended 0.38 r* below ..."). A statement
    that names a claim in its pre-registered words and states a verdict states that claim's."""
    from squarechipo.reproduce.study.verdicts import kind

    said = {k for k, pattern in VERDICT_WORDS.items() if re.search(pattern, unit, re.IGNORECASE)}
    quoted = quoted_claims(unit, studies, named=_sides(unit) | _sides(before))
    if said:  # a verdict stated beside a claim named in its pre-registered words is that claim's
        quoted += [c for study in studies for c in summary(study)["claims"] if _claim_name(c["claim"]) in unit]
    if not quoted:
        return []
    kinds = {kind(c["verdict"]) for c in quoted}
    problems = [f"states {k!r}, which no quoted claim has" for k in sorted(said - kinds)]
    if not said & kinds:
        problems.append(
            f"quotes {', '.join(c['claim'] for c in quoted)} without its verdict ({', '.join(sorted(kinds))})"
        )
    return problems


def misread_statements(text: str) -> list[tuple[str, list[str]]]:
    """(statement, problems) for each statement of ``text`` that quotes a claim without its verdict."""
    found, before = [], ""
    for unit in units(text):
        if problems := misread_verdicts(unit, STUDIES, before):
            found.append((unit, problems))
        before = unit
    return found


#: docs/lab.md reports the simulation lab's own claims (closed-form instances, not the studies'): its figures are
#: the lab's records', read by tests/test_sim.py.
@pytest.mark.parametrize("page", sorted(set(prose()) - {"docs/lab.md"}))
def test_a_sentence_that_quotes_a_claims_figure_states_its_verdict(page):
    """By construction rather than by a word list: whatever words compare two methods, a sentence that gives a
    claim's paired figure (naming the methods it compares) states the verdict the claim's record gives, and no other.
    "Square-χPO edged out DPO by 0.38 r*" fails whatever its verb, as does "holds" beside an undecided claim."""
    assert not misread_statements(prose()[page])


def test_no_docstring_or_comment_quotes_a_claims_figure_without_its_verdict():
    """The same rule in the package's and the benchmarks' docstrings and comments."""
    from tests.helpers.prose import SOURCES, source_prose

    bad = [(path, found) for path in SOURCES if (found := misread_statements(source_prose(ROOT / path)))]
    assert not bad, bad


def _reading_units() -> list[tuple[str, str, list[str]]]:
    """(where, statement, studies it may draw on): each study reading's statements, then the README's results."""
    found = [(f"docs/results.md ({study})", u, [study]) for study, text in readings().items() for u in units(text)]
    return found + [("README.md (Results)", u, STUDIES) for u in units(readme_results())]


def test_the_figures_of_a_statement_come_from_the_record_it_names():
    bad = [
        (where, unit, mixed) for where, unit, studies in _reading_units() if (mixed := mixed_records(unit, studies))
    ]
    assert not bad, "figures from more than one record (or none):\n" + "\n".join(map(str, bad))


def test_estimates_are_called_estimates():
    bad = [(w, u) for w, u, studies in _reading_units() if unnamed_estimates(u, studies)]
    assert not bad, bad


@pytest.mark.parametrize("page", sorted(prose()))
def test_decision_words_stand_only_beside_a_decided_claim(page):
    assert not undecided_findings(prose()[page], STUDIES)


@pytest.mark.parametrize("page", sorted(prose()))
def test_p_values_are_holm_adjusted_or_called_raw_and_reversed_means_reversed(page):
    assert not [u for u in units(prose()[page]) if raw_p_values(u, STUDIES)]
    assert not misplaced_reversals(prose()[page], STUDIES)


#: The overclaims a reviewer wrote into the prose, each of which passed the earlier test: (file, where to put it,
#: the sentence). Each must fail here.
OVERCLAIMS = [
    ("docs/results.md", "overoptimisation_beta", "DPO at β 0.025 over-optimised: its gold gain dropped by 0.48 r*."),
    ("docs/results.md", "overoptimisation_beta",
     "At epoch 32 DPO at β 0.025 was significantly below DPO at β 0.05 (0.38 r*, p 0.031)."),
    ("README.md", None, "The β study shows DPO turning down at β 0.025."),
    ("docs/results.md", "rows_needed",
     "Square-χPO ≥ DPO at 512 private rows holds (+5.78 points), and it reaches the clean gain at 435 rows."),
    ("docs/study.md", None, "The over-optimisation study shows that Square-χPO over-optimises less than DPO."),
    ("docs/results.md", "overoptimisation_beta",
     "Square-χPO ended 0.48 r* [−1.28, +0.16] below DPO at β 0.025 (not decided, MDE 1.41)."),
]  # fmt: skip


def _caught(page: str, study: str | None, sentence: str) -> bool:
    """Whether any check refuses ``sentence`` written into ``page`` (into ``study``'s reading)."""
    studies = [study] if study else STUDIES
    scoped = page == "README.md" or study is not None  # the README's results and the readings hold figures too
    figure_checks = [mixed_records(u, studies) or unnamed_estimates(u, studies) for u in units(sentence)]
    return bool(
        misread_statements(sentence)
        or undecided_findings(sentence, STUDIES)
        or any(raw_p_values(u, STUDIES) for u in units(sentence))
        or misplaced_reversals(sentence, STUDIES)
        or (scoped and any(figure_checks))
    )


#: Overclaims in words no list holds, each quoting a claim's figure: the verdict check refuses them whatever the verb.
#: A sentence with no figure that names no decided claim is left to the decision words above.
OVERCLAIMS += [
    ("docs/results.md", "overoptimisation_beta", "At epoch 32 DPO at β 0.025 trailed DPO at β 0.05 by 0.38 r*."),
    ("README.md", None, "Square-χPO edged past χPO under LTC (+1.92 points)."),
    ("CHANGELOG.md", None, "Square-χPO and DPO were level under CTL at ε = 0.5 (−0.02 points), a tie."),
    ("docs/study.md", None, "χPO landed 1.37 r* under DPO at epoch 16, which holds."),
    ("docs/training.md", None, "DPO slipped by 0.48 r* at β 0.025 (holds)."),
    ("README.md", None, "With 512 private rows Square-χPO is far ahead of DPO: [+3.41, +8.14]; it is not decided."),
    ("docs/study.md", None, "Square-χPO ≥ DPO under CTL holds, with 7 seeds."),
    ("CHANGELOG.md", None, "The rows-needed study finds Square-χPO ahead of DPO at 128 private rows."),
    ("README.md", None, "In the study Square-χPO attains a higher expected win than rDPO under LTC."),
    ("docs/results.md", None, "DPO over-optimises (not decided before; it holds now)."),
    # The overclaim in the clause after a semicolon: each clause is read, not the first alone.
    ("docs/study.md", None, "The study ran its seeds as planned; Square-χPO ≥ DPO under CTL holds, with 7 seeds."),
    ("README.md", None, "Seeds were paired; with 512 private rows Square-χPO is far ahead of DPO: [+3.41, +8.14]."),
]  # fmt: skip


@pytest.mark.parametrize("page, study, sentence", OVERCLAIMS)
def test_each_known_overclaim_fails(page, study, sentence):
    assert _caught(page, study, sentence), sentence


def test_the_checks_accept_what_the_records_back():
    """The other side: sentences the records back pass every check."""
    fine = [
        ("overoptimisation_beta", "At epoch 32 it was 0.38 r* below DPO at β 0.05, [−0.10, +0.86] at Holm's level "
         "(p 0.0922 after Holm, not decided, MDE 0.62)."),
        ("rows_needed", "Square-χPO ≥ DPO at 512 private rows holds: +5.78 points [+3.41, +8.14]."),
        ("rows_needed", "One model's estimate of the rows that keep the clean gain is 435."),
        ("overoptimisation_beta", "The raw p was 0.031; after Holm, 0.0922."),
        ("rows_needed", "Square-χPO ended above DPO at 512 private rows by +5.78 points, which holds."),
        ("overoptimisation", "χPO ended 1.37 r* below DPO at epoch 16: the claim is reversed."),
    ]  # fmt: skip
    for study, sentence in fine:
        assert not _caught("docs/results.md", study, sentence), sentence


def readme_results() -> str:
    """The README's results section: from its heading to the next."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Results\n")
    return text[start : text.index("\n## ", start + 1)]


#: The pages besides the README whose blocks ``study verdicts`` writes (the README's command names them all).
GENERATED_PAGES = ["docs/results.md", "docs/study.md", "docs/testing.md", "CHANGELOG.md"]


def test_the_readmes_verdicts_are_generated_from_every_studys_record(tmp_path, capsys):
    """The README's verdicts block is what the documented command writes from the committed summaries (run here on a
    copy, byte for byte); it covers exactly the studies with a block in docs/results.md; the prose around it quotes
    only figures the records hold. Re-running or adding a study without regenerating the block fails here."""
    from squarechipo.cli import main
    from squarechipo.reproduce.study.verdicts import studies

    pages = ["README.md", *GENERATED_PAGES]
    for page in pages:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text(encoding="utf-8"), encoding="utf-8")
    also = [word for page in GENERATED_PAGES for word in ("--page", str(tmp_path / page))]
    readme = str(tmp_path / "README.md")
    assert main(["study", "verdicts", "--results", str(ROOT / "results" / "study"), "--readme", readme, *also]) == 0
    for page in pages:  # every generated block of every page, as the command writes it from the records
        assert (tmp_path / page).read_text(encoding="utf-8") == (ROOT / page).read_text(encoding="utf-8"), page
    marker = "(generated by squarechipo study verdicts) -->"
    marked = {p for p in prose_files() if marker in (ROOT / p).read_text(encoding="utf-8")}
    assert marked == set(pages), "the README's command must name every page with a block it generates"
    command = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert all(f"--page {page}" in command for page in GENERATED_PAGES)
    assert "31 claims" in capsys.readouterr().out
    assert studies(ROOT / "results") == sorted(readings())
    section = readme_results()
    assert not unbacked(re.sub(r"<!-- verdicts:begin.*?verdicts:end -->", " ", section, flags=re.S),
                        [v for study in STUDIES for v in backing(study)])  # fmt: skip


def test_the_verdicts_command_refuses_in_one_line_and_leaves_a_readme_without_a_block_alone(tmp_path, capsys):
    """No study under the folder given, a README without the markers, a README that does not exist: one line each
    (naming the folder or file and the fix), nothing printed as a block, the file unchanged."""
    from squarechipo.cli import main

    readme = tmp_path / "README.md"
    readme.write_text("# a page without the markers\n", encoding="utf-8")
    results = str(ROOT / "results" / "study")
    for argv, said in (
        (["--results", str(tmp_path / "none" / "study")], "no study under"),
        (["--results", results, "--readme", str(readme)], "has no verdicts block: add the lines"),
        (["--results", results, "--readme", str(tmp_path / "missing.md")], "missing.md"),
    ):
        assert main(["study", "verdicts", *argv]) != 0
        out, err = capsys.readouterr()
        assert not out and len(err.strip().splitlines()) == 1 and said in err, err
    assert readme.read_text(encoding="utf-8") == "# a page without the markers\n"
    # A README with its block, stale, and a second page that cannot be written: nothing is half-written.
    stale = "<!-- verdicts:begin (generated by squarechipo study verdicts) -->\nold\n<!-- verdicts:end -->\n"
    readme.write_text(stale, encoding="utf-8")
    for page, said in ((readme.with_name("page.md"), "has no generated block"), (tmp_path / "gone.md", "gone.md")):
        if page.name == "page.md":
            page.write_text("# no block\n", encoding="utf-8")
        assert main(["study", "verdicts", "--results", results, "--readme", str(readme), "--page", str(page)]) != 0
        assert said in capsys.readouterr().err
        assert readme.read_text(encoding="utf-8") == stale


def test_the_verdicts_block_counts_every_kind_and_refuses_a_verdict_it_does_not_know(tmp_path):
    """The block's tally and lines for records built here: one claim of each kind, then a verdict nobody writes."""
    from squarechipo.reproduce.study.verdicts import verdicts_block

    def claim(name, verdict, mean):
        return {"claim": name, "verdict": verdict, "metric": "gold_gain", "n": 3, "mean": mean, "low": mean - 1,
                "high": mean + 1, "low_holm": mean - 2, "high_holm": mean + 2, "p_holm": 0.01}  # fmt: skip

    made = [claim("A ≥ B", "holds", 1.5), claim("C ≥ D", "reversed", -0.25), claim("E", "not decided at MDE 1", 0.1)]
    made.append(claim("F", "not tested: an arm was cut", float("nan")))
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "summary.json").write_text(json.dumps({"claims": made}), encoding="utf-8")
    block = verdicts_block(tmp_path).splitlines()
    assert block[0] == (
        "One pre-registered study, 4 claims, decided with Holm's procedure within each study: 1 holds, "
        "1 is reversed, 1 is not decided at the effect sizes the budgets could detect, 1 was not tested."
    )
    assert block[2:] == [
        "- **holds** (one, 3 paired seeds): A ≥ B: +1.50 r* [+0.50, +2.50] (95% t), [−0.50, +3.50] at Holm's level, "
        "p 0.01 after Holm",
        "- **reversed** (one, 3 paired seeds): C ≥ D: −0.25 r* [−1.25, +0.75] (95% t), [−2.25, +1.75] at Holm's "
        "level, p 0.01 after Holm",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"no study under .*empty has a summary.json: give --results one study's"):
        verdicts_block(tmp_path / "empty")
    made[0]["verdict"] = "probably holds"
    (tmp_path / "one" / "summary.json").write_text(json.dumps({"claims": made}), encoding="utf-8")
    with pytest.raises(ValueError, match="verdict 'probably holds' is none of holds, reversed"):
        verdicts_block(tmp_path)


@pytest.mark.parametrize(
    "written",
    ["p 0.031", "p = 0.031", "P = 0.031", "p=.031", "p-value of 0.031", "p value: 0.031", "P-value 0.031", "p < .031"],
)
def test_every_way_of_writing_a_p_value_is_read_and_marks_a_result(written):
    """A p-value in any of the forms prose uses is read (and checked against the claims' Holm-adjusted p), and marks
    its sentence as one about results; so does r* (its marker pattern never matched: no word boundary after *)."""
    assert [float(v) for v in P_VALUE.findall(f"the claim ({written})")] == [0.031]
    assert RESULT_MARKER.search(f"ended lower ({written})")
    assert RESULT_MARKER.search("it ended 0.38 r* below it") and not RESULT_MARKER.search("a rate of 0.5")


def test_the_readmes_main_job_summary_is_what_a_committed_run_printed():
    """The README's printed summary of the main job is a committed record's (results/main_job/...): every line of its
    block, in order, is a line that run printed, and the figures of its gold lines are those of the run's gold report
    (its own summary in the record), printed the way the main job prints them."""
    from squarechipo.evaluation.gold_report import format_summary
    from squarechipo.evaluation.report import win_reading

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    named = re.search(r"The main job ends with a summary like this \(`(results/main_job/[\w.-]+\.json)`", text)
    assert named, "the README names the record its printed summary comes from"
    record = json.loads((ROOT / named.group(1)).read_text(encoding="utf-8"))
    after = text[named.end() :]
    block = re.search(r"\n\n((?: {4}.*\n)+)", after).group(1)
    lines = [line[4:] for line in block.splitlines() if line.strip() and line.strip() != "..."]
    printed = iter(record["printed"])
    for line in lines:  # in order: each found after the one before
        assert any(line == said for said in printed), f"not printed by the recorded run, in this order: {line!r}"
    gold = format_summary(record["gold"])
    assert all(f"    {line}" in record["printed"] for line in gold[:4])  # recomputed from the record's figures
    overall = record["judged"]
    assert f"    reading: {win_reading(overall['win_rate_half_ties_ci'], overall['n_valid'])}" in record["printed"]
    assert record["exit_code"] == 0 and named.group(1).endswith(f"_{record['commit']}.json")


def test_the_main_jobs_reliability_counts_every_record_whatever_it_read(tmp_path):
    """The README's count of the main job's readings is generated from every release and clone recorded: one that
    read "not distinguishable" is counted (a sentence by hand once quoted only the ten that all read "better"), and
    the rate carries its exact binomial interval."""
    from squarechipo.evaluation.reliability import reliability_block

    def gain(low: float) -> dict:
        return {"mean": low + 0.2, "low": low, "high": low + 0.4, "n": 128}

    for i, low in ((1, 0.1), (2, -0.1)):
        folder = tmp_path / "main_job_releases_v3" / f"release_{i}"
        folder.mkdir(parents=True)
        (folder / "gold.json").write_text(json.dumps({"gold_gain": gain(low)}))
    (tmp_path / "main_job").mkdir()
    (tmp_path / "main_job" / "run_x.json").write_text(json.dumps({"gold": {"gold_gain": gain(0.05)}}))
    block = reliability_block(tmp_path).splitlines()
    assert block[0] == (
        'Every recorded run of the main job, each on a release of its own: 2 of 3 read "better than SFT" (67%, 95% '
        'Clopper–Pearson [9%, 99%]), the others "not distinguishable from SFT". The job as it runs now: 1 of 2 (50%, '
        "95% Clopper–Pearson [1%, 99%])."
    )
    assert block[2:] == [
        "- `results/main_job_releases_v3/`, fresh releases of the job as it runs now (float32 with AVX2 kernels "
        "forced): 1 of 2",
        "- `results/main_job/run_*.json`, fresh clones of the whole job, each drawing its own release: 1 of 1",
    ]
    with pytest.raises(ValueError, match="no record of the main job under"):
        reliability_block(tmp_path / "empty")
