"""Results only from records: hand-written prose carries no result, and each generated block is what its command wrote.

Outside the blocks generated from records, a statement that names two methods, arms or policies with a figure or a
comparison is refused, whatever its verb (tests/helpers/results_prose.py says how names, figures and comparisons are
found). Every page a reader is given, each docstring, comment and plot caption of the package and the benchmarks is
read; table rows, list items (CHANGELOG bullets), image captions and sentences are read one at a time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.results_prose import hand_written_results, refused, source_statements, statements

ROOT = Path(__file__).resolve().parents[1]


def _pages() -> dict[str, str]:
    from tests.test_readings import prose

    return prose()


@pytest.mark.parametrize("page", sorted(_pages()))
def test_no_hand_written_statement_carries_a_result(page):
    found = hand_written_results(_pages()[page])
    assert not found, "move each into a generated block, or say what was run instead:\n" + "\n".join(map(str, found))


def test_no_docstring_comment_or_plot_caption_carries_a_result():
    from tests.helpers.prose import SOURCES

    found = [(path, s, why) for path in SOURCES for s in source_statements(ROOT / path) if (why := refused(s))]
    assert not found, found


#: Overclaims in wordings and places the earlier checks missed (the audit of issue 100), each alone: every one names
#: two methods, arms or policies with a figure or a comparison, in a verb no list holds.
OVERCLAIMS = [
    "Square-χPO edges out DPO at 512 private rows.",
    "Square-χPO clearly beats rDPO under CTL.",
    "At ε = 4 the policy keeps far more of the clean gain than at ε = 1.",
    "The main job is always better than SFT.",
    "DPO's KL ran to 87.5 nats while Square-χPO held at 2.6.",
    "Square-χPO ended five points ahead of DPO.",
    "χPO trailed DPO by 1.37 r* at epoch 16.",
    "DPO at β 0.025 finished 0.38 r* under DPO at β 0.05.",
    "Square-χPO and DPO: +5.78 and −0.4 points over the clean arm.",
    "With c(ε), Square-χPO is on par with clean labels at 256 rows (101%).",
    "Square-χPO's interval [+3.41, +8.14] against DPO excludes zero.",
    "rDPO overtakes χPO under LTC.",
    "The KL gap between DPO and χPO is significant.",
    "Square-χPO vs DPO under CTL: [−8.14, −3.41].",
    "The aligned policy beat SFT by a third of a point.",
    "Square-χPO ≥ DPO under CTL, at Holm p 0.04.",
    "DPO won by two points over Square-χPO in every seed.",
    "| Square-χPO vs DPO at 128 rows | holds |",
    "Square-χPO gained five points over DPO.",
    "Relative to SFT, the aligned policy gained a third of a point.",
    'Ten fresh releases: nine of ten read "better than SFT".',
    "On the new sizes 10 of 10 releases read better.",
]
#: Honest statements in the same vocabulary: a design, a paper's own result, one arm, a question, a quoted claim.
HONEST = [
    "Square-χPO with c(ε) and DPO at ε = 1 (CTL, α = 0.1) on 128, 256 and 512 private rows, 6 paired seeds.",
    "Zhou et al. 2025 (Square-χPO) reports CTL χPO 64.2, Square-χPO 67.0 (Table 1).",
    "DPO at β 0.025 trained 32 epochs on 32 rows a seed.",
    "The study asks whether Square-χPO ends with a higher gold expected win than DPO on private labels.",
    'The claims include "Square-χPO ≥ DPO at 512 private rows (ε = 1)".',
    "The main job trains the SFT policy on 128 rows, then aligns it with Square-χPO at ε = 4.",
    "Each cell of DPO and Square-χPO trains on the same release of its seed.",
]


@pytest.mark.parametrize("sentence", OVERCLAIMS)
def test_each_overclaim_is_refused_in_every_place_prose_lives(sentence, tmp_path):
    """A sentence, a table row, a CHANGELOG bullet right after another, an image caption, a comment, a docstring and
    a plot's title: the same overclaim is refused in each."""
    placed = {
        "sentence": f"Some context comes first. {sentence} More follows.",
        "table row": f"| a | b |\n|---|---|\n| ours | {sentence} |",
        "bullet": f"- **A change** that ran as planned\n- {sentence}\n- another change",
        "image caption": f"![{sentence}](plot.png)",
    }
    for where, text in placed.items():
        assert hand_written_results(text), (where, sentence)
    source = tmp_path / "probe.py"
    code = f'"""{sentence}"""\n\n# {sentence}\naxis.set_title({sentence!r})\nplt.xlabel({sentence!r})\n'
    source.write_text(code, encoding="utf-8")
    assert sum(bool(refused(s)) for s in source_statements(source)) == 4, code


@pytest.mark.parametrize("sentence", HONEST)
def test_honest_statements_pass(sentence):
    assert not hand_written_results(sentence), sentence


def test_only_the_blocks_a_test_checks_exempt_what_they_hold():
    """Markers anyone can type do not hide a sentence: a made-up block, a known name without its generator, and a
    hand-kept section are read like any prose; a block a command writes is not."""
    claim = "Square-χPO clearly beats DPO."
    for marked in (
        f"<!-- mine:begin (generated by me) -->\n{claim}\n<!-- mine:end -->",
        f"<!-- lab:begin -->\n{claim}\n<!-- lab:end -->",
        f"<!-- timings:begin -->\n{claim}",
    ):
        assert hand_written_results(marked), marked
    block = f"<!-- verdicts:begin (generated by squarechipo study verdicts) -->\n{claim}\n<!-- verdicts:end -->"
    assert not hand_written_results(block)


def test_each_list_item_and_table_row_is_read_alone():
    """A CHANGELOG bullet was read together with the next one; a table row with its header. Each is one statement."""
    text = "- Square-χPO trains on private rows\n- DPO trains on clean rows\n\n| x | y |\n|---|---|\n| 1 | 2 |"
    assert statements(text) == ["Square-χPO trains on private rows", "DPO trains on clean rows", "| 1 | 2 |"]


def test_the_reproduction_pages_table_is_the_table1_md_the_command_wrote():
    """docs/reproduction.md quotes the cpu table as a block: the committed table1.md, its headings one level down."""
    page = (ROOT / "docs" / "reproduction.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- table1:begin[^>]*-->\n(.*?)\n<!-- table1:end -->", page, flags=re.S).group(1)
    written = (ROOT / "docs" / "table1_cpu" / "table1.md").read_text(encoding="utf-8")
    assert block == written.split("\n", 1)[1].strip("\n").replace("\n## ", "\n### ")


@pytest.mark.parametrize(
    "value, digits, scale, signed, expected",
    [(0.315, 0, 100, False, "32"), (0.325, 0, 100, False, "33"), (11.848, 1, 1, False, "11.8"),
     (0.125, 2, 1, True, "+0.13"), (-0.125, 2, 1, True, "−0.13"), (-0.0004, 2, 1, True, "+0.00"),
     (-0.0004, 2, 1, False, "0.00"), (2.5, 0, 1, False, "3")],
)  # fmt: skip
def test_one_rounding_rule_rounds_half_away_from_zero_on_the_written_value(value, digits, scale, signed, expected):
    """The rule every generated block prints with (squarechipo.stats.figure): 0.315 as a percentage is 31.5, so 32
    (the float product 31.499… printed 31 twice on the results page); no −0.00."""
    from squarechipo.stats import figure

    assert figure(value, digits, scale=scale, signed=signed) == expected


def test_every_generator_of_a_results_block_rounds_with_the_one_rule():
    """No generator of a block formats a figure with a format spec of its own (":.2f", ":+.1f", ":.0f")."""
    generators = ["squarechipo/evaluation/reliability.py", "squarechipo/reproduce/study/verdicts.py",
                  "squarechipo/reproduce/study/report.py", "squarechipo/reproduce/study/headline.py",
                  "squarechipo/reproduce/study/training.py"]  # fmt: skip
    own = []
    for path in generators:
        for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
            if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
                spec = "".join(v.value for v in node.format_spec.values if isinstance(v, ast.Constant))
                if re.fullmatch(r"[+]?\.\d+f", spec):
                    own.append(f"{path}:{node.lineno} {spec}")
    assert not own, own


def test_the_labs_figures_are_what_its_command_reports_from_the_committed_records(tmp_path):
    """docs/lab.md's block is what `python -m squarechipo.sim --out results/sim --readme docs/lab.md` writes from
    the committed CSVs (on copies, byte for byte): a finished grid is only reported, nothing is run again."""
    import shutil

    from squarechipo.sim.cli import main

    shutil.copytree(ROOT / "results" / "sim" / "default", tmp_path / "sim" / "default")
    page = tmp_path / "lab.md"
    page.write_text((ROOT / "docs" / "lab.md").read_text(encoding="utf-8"), encoding="utf-8")
    before = {p.name: p.read_bytes() for p in (tmp_path / "sim" / "default").glob("*.csv")}
    assert main(["--out", str(tmp_path / "sim"), "--readme", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == (ROOT / "docs" / "lab.md").read_text(encoding="utf-8")
    assert {p.name: p.read_bytes() for p in (tmp_path / "sim" / "default").glob("*.csv")} == before  # nothing ran


def test_no_hand_written_statement_quotes_a_claims_figure():
    """A claim's paired figure (its mean or interval bounds, naming the methods it compares) appears only in a block
    generated from the records, whatever verdict is written beside it."""
    from tests.helpers.results_prose import GENERATED
    from tests.test_readings import STUDIES, quoted_claims, units

    found = [
        (page, unit, [c["claim"] for c in claims])
        for page, text in _pages().items()
        for unit in units(GENERATED.sub(" ", text))
        if (claims := quoted_claims(unit, STUDIES))
    ]
    assert not found, found
    assert quoted_claims("Square-χPO ≥ DPO at 512 rows: +5.78 points, which holds.", STUDIES)  # the check sees one


def test_the_lab_block_command_refuses_before_it_runs_anything(tmp_path, capsys):
    """--readme with a smaller grid, or a page without the block, is refused before any grid point runs."""
    from squarechipo.sim.cli import main

    page = tmp_path / "lab.md"
    page.write_text("# no block\n", encoding="utf-8")
    for argv, said in (
        (["--smoke", "--readme", str(page)], "default grid"),
        (["--readme", str(page)], "no lab block"),
    ):
        with pytest.raises(SystemExit):
            main([*argv, "--out", str(tmp_path / "sim")])
        assert said in capsys.readouterr().err
    assert not (tmp_path / "sim").exists() and page.read_text(encoding="utf-8") == "# no block\n"


#: Where each generated block may stand: the pages whose test writes it again from the records and compares.
BLOCK_PAGES = {
    "study": {"docs/results.md"},
    "verdicts": {"README.md", "docs/study.md"},
    "main-job": {"README.md", "docs/results.md", "CHANGELOG.md"},
    "main-job-runs": {"docs/results.md", "docs/testing.md"},
    "main-job-time": {"README.md"},
    "main-job-releases": {"docs/testing.md"},
    "lab": {"docs/lab.md"},
    "table1": {"docs/reproduction.md"},
}


def test_each_generated_block_stands_once_where_its_test_writes_it():
    """A block's markers typed on another page, or a second block of one name on a page (the command rewrites the
    first only), would exempt text no test regenerates."""
    from tests.helpers.results_prose import GENERATED_BLOCKS

    assert set(BLOCK_PAGES) == set(GENERATED_BLOCKS)
    found = []
    for page in _pages():
        text = (ROOT / page).read_text(encoding="utf-8")  # the whole CHANGELOG, older versions too
        found += [(name + part, page) for name, part in re.findall(r"<!-- ([\w-]+)(:[\w-]+)?:begin", text)]
    assert len(found) == len(set(found)), sorted(found)
    misplaced = [(name, page) for name, page in found if page not in BLOCK_PAGES.get(name.split(":")[0], {page})]
    assert not misplaced, misplaced
