"""The privacy-cost headline (squarechipo.reproduce.study.headline) on hand-made records: which clean arm a share is
taken against, the fewest seeds an estimate needs, what the tables print for open intervals and missing records,
and what the plots draw. The study tests check the figures against Fieller's interval; these check the rules around
them (the mutation run of the module uses both)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from squarechipo.reproduce.study.design import Arm, load_design
from squarechipo.reproduce.study.headline import (
    _finish_share_plot,
    _rows_table,
    _share_errorbars,
    headline,
    headline_lines,
    rows_to_clean_gain,
)

ROOT = Path(__file__).resolve().parents[1]
NOISE = [0.02, -0.03, 0.01, 0.04, -0.02]
SHARES = {
    "clean_epsinf_square_chipo": 1.0,
    "clean_epsinf_dpo": 0.9,
    "ctl_eps1_square_chipo": 0.5,
    "ctl_eps1_square_chipo_n256": 0.8,
    "ctl_eps1_square_chipo_n512": 1.1,
    "ctl_eps1_dpo": 0.25,
    "ctl_eps1_dpo_n256": 0.5,
    "ctl_eps1_dpo_n512": 0.75,
}


@pytest.fixture(scope="module")
def design():
    return load_design(str(ROOT / "recipes" / "studies" / "rows_needed.yaml"))


def _records(arms=SHARES, seeds=range(5)):
    return [
        {"arm": arm, "seed": seed, "summary": {"gold_gain": {"mean": (SHARES[arm] + NOISE[seed] * (1 + i)) * 2.0}}}
        for i, arm in enumerate(arms)
        for seed in seeds
    ]


def test_two_seeds_are_enough_for_a_share_a_crossing_and_a_methods_own_clean_reference(design):
    """The fewest seeds Fieller's interval takes: two, for the private arm, its own clean arm and the crossing."""
    records = _records(seeds=range(2))
    shares = {h["arm"]: h for h in headline(records, design)}
    assert len(shares) == 6 and all(h["n"] == 2 for h in shares.values())
    assert shares["ctl_eps1_dpo"]["reference"] == "clean_epsinf_dpo" and not shares["ctl_eps1_dpo"]["stand_in"]
    assert {r["method"]: r["seeds"] for r in rows_to_clean_gain(records, design)} == {"Square-χPO": 2, "DPO": 2}
    one = _records(seeds=range(1))
    assert headline(one, design) == [] and rows_to_clean_gain(one, design) == []


def test_a_share_is_taken_only_against_a_clean_arm_and_says_so_when_there_is_none(design):
    """With no clean arm's records, no private arm stands in as a reference: nothing is estimable, and the report
    says so in one line."""
    private = [a for a in SHARES if not a.startswith("clean")]
    records = _records(arms=private)
    summary = {"headline": headline(records, design), "rows_needed": rows_to_clean_gain(records, design)}
    assert summary == {"headline": [], "rows_needed": []}
    assert headline_lines(summary, design) == [
        "Share of the clean gain kept: not yet estimable (no private arm has two seeds paired with a clean arm).",
        "",
    ]


def test_a_method_whose_rows_are_incomplete_does_not_stop_the_next_ones_crossing(design):
    records = [r for r in _records() if not r["arm"].startswith("ctl_eps1_square_chipo_n")]
    rows = rows_to_clean_gain(records, design)
    assert [r["method"] for r in rows] == ["DPO"]


def test_the_share_table_has_a_rows_column_from_two_row_counts_and_prints_an_open_interval_as_unbounded(design):
    arms = [a for a in SHARES if not a.endswith("_n512")]
    records = _records(arms=arms)
    # A clean gain that does not stay away from 0 across seeds: Fieller's set is unbounded.
    for record in records:
        if record["arm"] == "clean_epsinf_dpo":
            record["summary"]["gold_gain"]["mean"] = [0.3, -0.25, 0.02, 0.2, -0.1][record["seed"]]
    summary = {"headline": headline(records, design), "rows_needed": []}
    text = "\n".join(headline_lines(summary, design))
    assert "| method | ε (CTL, α = 0.1) | private rows | share of the clean gold gain kept |" in text
    dpo = [line for line in text.splitlines() if line.startswith("| DPO | 1 | 128 |")]
    assert len(dpo) == 1 and "| unbounded |" in dpo[0]


def test_rows_needed_cells_print_an_open_interval_and_old_summaries_without_a_sensitivity():
    """A summary written before the sensitivity figures existed still prints the rows after it."""
    row = {"method": "DPO", "epsilon": "1", "clean_rows": 128, "rows": 300.0, "low": 150.0, "high": math.inf,
           "largest_rows": 512, "c_squared_rows": 599.0, "flip_rate_rows": 934.0}  # fmt: skip
    later = {**row, "method": "Square-χPO", "high": 400.0, "rows_line_in_n": 350.0, "bootstrap_no_crossing": 0.25}
    headline_rows = [{"method": "Square-χPO", "rows": 256, "low": 0.8, "high": 1.2}]
    lines = _rows_table({"rows_needed": [row, later], "headline": headline_rows})
    assert "| DPO | 1 | 128 | 300 unbounded | 599 | 934 |" in lines
    assert (
        "- Square-χPO, ε = 1: a line against n (not log2 n) gives 350 rows; in 25% of 2000 resamples of the seeds the "
        "log2 line does not cross by 512 rows; the share's interval contains 100% at 256 private rows."
    ) in lines


def test_two_methods_standing_in_are_each_named_in_one_sentence(design):
    """When two methods' own clean arms have no records, the note names each stand-in, one sentence after another."""
    arms = (*design.main_arms, Arm("chipo", "CTL", 1.0), Arm("chipo", "clean", None, tier=2))
    two = replace(design, main_arms=arms)
    records = [r for r in _records() if r["arm"] != "clean_epsinf_dpo"]
    records += [{**r, "arm": "ctl_eps1_chipo"} for r in records if r["arm"] == "ctl_eps1_dpo"]
    first = headline_lines({"headline": headline(records, two), "rows_needed": []}, two)[0]
    assert first.endswith(
        ": DPO's clean reference is clean_epsinf_square_chipo (its own clean arm has no records: cut for the budget)."
        " χPO's clean reference is clean_epsinf_square_chipo (its own clean arm has no records: cut for the budget)."
    )


def test_the_share_plot_draws_each_fieller_interval_and_leaves_an_open_side_out(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots()
    rows = [{"ratio": 0.5, "low": 0.25, "high": 0.75}, {"ratio": 0.9, "low": 0.4, "high": math.inf}]
    container = _share_errorbars(axis, [128, 256], rows, "DPO")
    line, _, (bars,) = container
    assert line.get_ydata().tolist() == [50.0, 90.0] and container.get_label() == "DPO"
    segments = bars.get_segments()
    assert np.allclose(segments[0], [[128, 25.0], [128, 75.0]])
    open_side = np.asarray(segments[1])[:, 1]  # the open side is not drawn: the bar holds its lower end alone
    assert 40.0 in open_side.tolist() and not (open_side > 90.0).any()
    _finish_share_plot(figure, axis, "private rows", tmp_path / "share.png", right=2048)
    assert axis.get_xscale() == "log" and axis.xaxis.get_transform().base == 2 and axis.get_xlim()[1] == 2048
    assert axis.get_ylabel() == "share of the clean gold gain kept (%)" and axis.get_xlabel() == "private rows"
    levels = sorted(tuple(h.get_ydata()) for h in axis.get_lines() if h is not line and len(set(h.get_ydata())) == 1)
    assert levels == [(0, 0), (100, 100)]  # the 0% and 100% lines
    assert (tmp_path / "share.png").read_bytes()[:4] == b"\x89PNG"


def test_a_stand_in_with_two_seeds_serves_and_two_row_counts_give_a_crossing(design):
    """DPO's own clean arm cut: Square-χPO's clean arm stands in from its second seed; a method trained at two numbers
    of private rows has a line through its two shares."""
    records = [r for r in _records(seeds=range(2)) if r["arm"] != "clean_epsinf_dpo"]
    shares = {h["arm"]: h for h in headline(records, design)}
    assert shares["ctl_eps1_dpo"]["reference"] == "clean_epsinf_square_chipo" and shares["ctl_eps1_dpo"]["stand_in"]
    two_counts = replace(design, main_arms=tuple(a for a in design.main_arms if a.rows != 512), claims=None)
    records = [r for r in _records() if not r["arm"].endswith("_n512")]
    assert {r["method"]: r["largest_rows"] for r in rows_to_clean_gain(records, two_counts)} == {
        "Square-χPO": 256,
        "DPO": 256,
    }
