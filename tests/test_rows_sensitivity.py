"""The rows-needed crossing beside its sensitivity to the model (squarechipo.reproduce.study.headline._sensitivity):
a line against n instead of log2 n, and the share of seed resamples in which the pre-registered line does not cross
by the largest row count."""

from __future__ import annotations

import math

import numpy as np

from squarechipo.reproduce.study.headline import _sensitivity


def _gains(shares: dict[int, float], seeds: int = 6, noise: float = 0.01) -> tuple[dict, dict, list[int]]:
    rng = np.random.default_rng(1)
    clean = {s: 1.0 + noise * rng.standard_normal() for s in range(seeds)}
    gains = {
        n: {s: share * clean[s] + noise * rng.standard_normal() for s in range(seeds)} for n, share in shares.items()
    }
    return clean, gains, list(range(seeds))


def test_a_share_that_grows_through_the_clean_gain_crosses_under_both_models_and_in_every_resample():
    found = _sensitivity(*_gains({128: 0.5, 256: 1.0, 512: 1.5}))
    # The line in n through (128, 0.5), (256, 1.0), (512, 1.5) meets 1 at 299 rows.
    assert 250 < found["rows_line_in_n"] < 350
    assert found["bootstrap_no_crossing"] == 0.0


def test_a_flat_share_never_crosses():
    found = _sensitivity(*_gains({128: 0.4, 256: 0.4, 512: 0.4}, noise=0.05))
    assert math.isinf(found["rows_line_in_n"]) or found["rows_line_in_n"] > 512
    assert found["bootstrap_no_crossing"] > 0.9
