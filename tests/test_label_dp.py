"""Label-DP mechanisms for K labels (Ghazi et al. 2021 (label DP) RRWithPrior, K-RR, Chua et al. 2024 (local label DP)
subset): exact DP, k*, unbiased analyzers."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch

from squarechipo.losses import plackett_luce_top1_loss
from squarechipo.privacy.mechanisms import label_dp as ld
from tests.helpers.rows import release_rows


@pytest.mark.parametrize("num_labels", [2, 3, 5, 8])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_rr_with_prior_is_epsilon_dp_exactly(num_labels, epsilon):
    rng = np.random.default_rng(num_labels * 100 + int(epsilon * 10))
    for prior in rng.dirichlet(np.full(num_labels, 0.5), size=40):
        dists = np.stack([ld.rr_with_prior_distribution(y, prior, epsilon) for y in range(num_labels)])
        np.testing.assert_allclose(dists.sum(axis=1), 1.0, atol=1e-12)
        for y, other in itertools.permutations(range(num_labels), 2):
            support = dists[y] > 0
            assert (support == (dists[other] > 0)).all()  # same support: no output rules a label out
            assert (dists[y][support] / dists[other][support]).max() <= math.exp(epsilon) * (1 + 1e-12)


@pytest.mark.parametrize("num_labels", [2, 4, 7])
def test_top_k_matches_brute_force_over_all_subsets(num_labels):
    """Ghazi et al. 2021 (label DP): RR restricted to a set S is correct w.p. mass(S)·e^ε/(e^ε + |S| − 1); k* must
    attain the max over all S."""
    rng = np.random.default_rng(num_labels)
    for epsilon in (0.2, 1.0, 2.5):
        priors = rng.dirichlet(np.full(num_labels, 0.7), size=50)
        k_star, order = ld.optimal_top_k(priors, epsilon)
        for p, k, o in zip(priors, k_star, order):
            best = max(
                p[list(s)].sum() * math.exp(epsilon) / (math.exp(epsilon) + len(s) - 1)
                for r in range(1, num_labels + 1)
                for s in itertools.combinations(range(num_labels), r)
            )
            assert p[o[:k]].sum() * math.exp(epsilon) / (math.exp(epsilon) + k - 1) == pytest.approx(best, rel=1e-12)


def test_rr_with_prior_sampler_matches_its_distribution():
    prior = np.array([0.5, 0.3, 0.15, 0.05])
    epsilon, n = 1.0, 200_000
    for y in range(4):
        released, from_prior = ld.rr_with_prior(
            np.full(n, y), np.tile(prior, (n, 1)), epsilon, np.random.default_rng(y)
        )
        assert not from_prior.any()
        expected = ld.rr_with_prior_distribution(y, prior, epsilon)
        freq = np.bincount(released, minlength=4) / n
        se = np.sqrt(np.maximum(expected * (1 - expected), 1e-12) / n)
        assert (np.abs(freq - expected) <= 4.5 * se + 1e-12).all(), (y, freq, expected)


def test_binary_rr_with_prior_is_rr_or_the_public_argmax():
    epsilon = 1.0  # threshold e/(1+e) ≈ 0.731
    confident = np.array([[0.9, 0.1], [0.05, 0.95]])
    released, from_prior = ld.rr_with_prior(np.array([1, 0]), confident, epsilon, np.random.default_rng(0))
    assert from_prior.all() and released.tolist() == [0, 1]  # the prior's argmax, whatever the label
    unsure = np.tile([0.6, 0.4], (100_000, 1))
    released, from_prior = ld.rr_with_prior(np.ones(100_000, dtype=int), unsure, epsilon, np.random.default_rng(1))
    keep = math.e / (1 + math.e)
    assert not from_prior.any()
    assert abs(released.mean() - keep) < 4.5 * math.sqrt(keep * (1 - keep) / 100_000)


@pytest.mark.parametrize("mechanism", ["k_rr", "subset"])
@pytest.mark.parametrize("num_labels,epsilon", [(2, 1.0), (6, 0.5), (16, 2.0)])
def test_analyzers_are_unbiased_and_their_variance_is_exact(mechanism, num_labels, epsilon):
    n = 200_000
    rng = np.random.default_rng(num_labels)
    labels = rng.integers(num_labels, size=n)
    if mechanism == "k_rr":
        weights = ld.k_rr_weights(ld.k_rr(labels, num_labels, epsilon, rng), num_labels, epsilon)
    else:
        weights = ld.subset_weights(ld.subset_mechanism(labels, num_labels, epsilon, rng), epsilon)
    error = weights - np.eye(num_labels)[labels]
    mean, se = error.mean(axis=0), error.std(axis=0, ddof=1) / math.sqrt(n)
    assert (np.abs(mean) <= 4.5 * se).all(), (mean, se)
    # Power: a mechanism mis-calibrated by half a unit in its denominator (subset: others included w.p.
    # 1/(e^ε + 0.5); K-RR: kept w.p. e^ε/(e^ε + K − 1.5)) biases the analyzer by more than 6.5 SE on some label,
    # so the 4.5-SE check above fails on it with probability above 0.93.
    e = math.exp(epsilon)
    if mechanism == "subset":
        bias = 2 * (e + 1) / (e - 1) * (1 / (e + 0.5) - 1 / (e + 1))  # on every other label
    else:
        keep = e / (e + num_labels - 1.5)
        bias = ((e + num_labels - 1) * keep - 1) / (e - 1) - 1  # on the true label
    assert abs(bias) > 6.5 * se.max(), (bias, se.max())
    total = (error**2).sum(axis=1)
    exact = ld.analyzer_variance(mechanism, num_labels, epsilon)
    assert abs(total.mean() - exact) <= 4.5 * total.std(ddof=1) / math.sqrt(n), (total.mean(), exact)


def test_subset_mechanism_is_epsilon_dp_on_every_output():
    """The library's subset mechanism spends exactly ε: over all 2^K outputs S and every pair of labels, the largest
    ratio P(S | y) / P(S | y') is e^ε (at most e^ε is the DP claim; equality is the calibration its unbiased analyzer
    needs). P(S | y) is the product of the mechanism's own inclusion probabilities, and its draws follow that product
    law: a χ² goodness-of-fit over the 2^K subsets at α = 1e-4."""
    from scipy.stats import chisquare

    epsilon, num_labels = 0.7, 4
    subsets = np.array(list(itertools.product([False, True], repeat=num_labels)))  # (16, K)
    inclusion = ld.subset_inclusion_probabilities(np.arange(num_labels), num_labels, epsilon)  # row y: P(k ∈ S | y)
    law = np.where(subsets[None], inclusion[:, None], 1 - inclusion[:, None]).prod(axis=2)  # (y, S)
    np.testing.assert_allclose(law.sum(axis=1), 1.0, rtol=1e-12)
    ratios = law[:, None, :] / law[None, :, :]
    assert ratios.max() == pytest.approx(math.exp(epsilon), rel=1e-12)

    draws = ld.subset_mechanism(np.full(200_000, 2), num_labels, epsilon, np.random.default_rng(0))
    codes = draws @ (1 << np.arange(num_labels - 1, -1, -1))  # the row of `subsets` each draw is
    observed = np.bincount(codes, minlength=len(subsets))
    assert chisquare(observed, law[2] * len(draws)).pvalue > 1e-4


def test_debiased_plackett_luce_is_unbiased_for_the_clean_loss():
    scores = torch.tensor([[1.0, -0.5, 0.2, 0.0]], dtype=torch.float64).repeat(100_000, 1)
    labels = np.full(100_000, 2)
    weights = ld.subset_weights(ld.subset_mechanism(labels, 4, 1.0, np.random.default_rng(0)), 1.0)
    losses = plackett_luce_top1_loss(scores, torch.as_tensor(weights))
    clean = plackett_luce_top1_loss(scores[:1], torch.eye(4, dtype=torch.float64)[[2]]).item()
    assert abs(losses.mean().item() - clean) <= 4.5 * losses.std().item() / math.sqrt(len(losses))
    with pytest.raises(ValueError, match="n, K"):
        plackett_luce_top1_loss(scores[:, :3], torch.as_tensor(weights))


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="prior"):
        ld.rr_with_prior(np.array([0]), np.array([[0.7, 0.7]]), 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="finite"):
        ld.k_rr(np.array([0]), 3, math.inf, np.random.default_rng(0))
    with pytest.raises(ValueError, match="labels must lie"):
        ld.subset_mechanism(np.array([5]), 3, 1.0, np.random.default_rng(0))


def test_release_with_prior_on_preferences_and_the_ledger_composes_in_parallel(finance_splits):
    import datasets

    from squarechipo.data.columns import FROM_PRIOR_COLUMN
    from squarechipo.privacy import LabelPipeline
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.mechanisms.measurements import RRWithPrior
    from squarechipo.privacy.release.rows import canonical_pairs, combine_parts

    raw = finance_splits["finance_preference"]["train"].select(range(200))
    part1 = release_rows(raw.select(range(100)), LabelPipeline(epsilon=1.0), seed=0, part="lp2st/part1")
    part2_raw = raw.select(range(100, 200))
    pairs = canonical_pairs(part2_raw)
    truth_first = [c == u for c, u in zip(part2_raw["chosen"], pairs["chosen"])]
    # A confident prior on half the rows (k* = 1 there), an unsure one elsewhere.
    prior = np.where(np.arange(100) < 50, 0.99, 0.55)
    part2 = release_rows(part2_raw, RRWithPrior(1.0, prior), part="lp2st/part2", seed=1)
    from_prior = np.array(part2[FROM_PRIOR_COLUMN])
    assert from_prior.tolist() == (np.arange(100) < 50).tolist()  # follows from the prior alone
    # Rows from the prior hold the prior's argmax u as chosen, whatever the truth.
    assert all(c == u for c, u, f in zip(part2["chosen"], pairs["chosen"], from_prior) if f)
    assert sum(truth_first) not in (0, 100)  # the canonical order is not the label
    combined = combine_parts(part1, part2)
    ledger = get_ledger(combined)
    assert len(combined) == 200 and ledger.total_epsilon == 1.0  # each label once: ε, not 2ε
    assert ledger.debias_factor == pytest.approx((math.e + 1) / (math.e - 1))
    assert [r.mechanism for r in ledger.releases] == ["randomized_response", "rr_with_prior"]
    sequential = release_rows(part1, LabelPipeline(epsilon=1.0), seed=2, compose=True)
    assert get_ledger(sequential).total_epsilon == 2.0  # the same rows released twice: 2ε
    with pytest.raises(ValueError, match="already privatized"):
        release_rows(part1, RRWithPrior(1.0, np.full(100, 0.5)))
    with pytest.raises(ValueError, match="distinct part"):
        combine_parts(part1, part1)
    assert isinstance(combined, datasets.Dataset)


def test_kary_rows_release_and_convert():
    import datasets

    from squarechipo.data.kary import kary_to_pairs, validate_kary
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.mechanisms.measurements import KaryRR, RRWithPrior, SubsetMechanism

    n, k = 4000, 4
    rng = np.random.default_rng(0)
    best = rng.integers(k, size=n)
    rows = datasets.Dataset.from_dict(
        {
            "prompt": [f"Q{i}" for i in range(n)],
            "responses": [[f"r{i}-{j}" for j in range(k)] for i in range(n)],
            "best": best.tolist(),
        }
    )
    assert validate_kary(rows) == k
    pairs = kary_to_pairs(rows.select(range(3)))
    assert len(pairs) == 3 * (k - 1) and pairs["chosen"][0] == f"r0-{best[0]}"
    for mechanism in (KaryRR(1.0), SubsetMechanism(1.0)):
        released = release_rows(rows, mechanism, seed=1)
        assert "best" not in released.column_names and get_ledger(released).total_epsilon == 1.0
        weights = np.array(released["label_weights"])
        error = weights - np.eye(k)[best]
        assert (np.abs(error.mean(axis=0)) <= 4.5 * error.std(axis=0) / math.sqrt(n)).all()
    prior = np.tile([0.97, 0.01, 0.01, 0.01], (n, 1))
    released = release_rows(rows, RRWithPrior(1.0, prior), seed=2)
    assert all(released["label_from_prior"]) and set(released["released_best"]) == {0}
    with pytest.raises(ValueError, match="same number K"):
        validate_kary(
            datasets.Dataset.from_dict(
                {"prompt": ["a", "b"], "responses": [["x", "y"], ["x", "y", "z"]], "best": [0, 0]}
            )
        )
    with pytest.raises(ValueError, match="best must be"):
        validate_kary(datasets.Dataset.from_dict({"prompt": ["a"], "responses": [["x", "y"]], "best": [2]}))
    with pytest.raises(ValueError, match="already released"):
        release_rows(released, KaryRR(1.0))


def test_kary_ledger_has_its_own_semantics_and_fingerprint():
    """K-RR and subset releases have analyzer weights, not a binary flip rate; the ledger says so and
    records the label-invariant fingerprint of the rows like every other release."""
    import datasets

    from squarechipo.data.fingerprint import preference_fingerprint
    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.mechanisms.measurements import KaryRR, SubsetMechanism

    responses = [[f"r{i}-{j}" for j in range(3)] for i in range(30)]
    rows = datasets.Dataset.from_dict(
        {"prompt": [f"Q{i}" for i in range(30)], "responses": responses, "best": [i % 3 for i in range(30)]}
    )
    # The same rows with each row's responses rotated (and `best` following): the same data, other labels order.
    rotated = datasets.Dataset.from_dict(
        {
            "prompt": rows["prompt"],
            "responses": [r[1:] + r[:1] for r in responses],
            "best": [(i % 3 - 1) % 3 for i in range(30)],
        }
    )
    assert preference_fingerprint(rows) == preference_fingerprint(rotated)
    for mechanism in (KaryRR(1.0), SubsetMechanism(1.0)):
        ledger = get_ledger(release_rows(rows, mechanism, seed=0))
        (release,) = ledger.releases
        assert release.data_fingerprint == preference_fingerprint(rows)
        assert release.flip_rate is None and not ledger.has_flip_rate
        assert "analyzer weights" in release.semantics and "K = 3" in release.semantics
        with pytest.raises(ValueError, match="label_weights"):
            _ = ledger.rr_flip_rate
        with pytest.raises(ValueError, match="label_weights"):
            _ = ledger.debias_factor
        summary = ledger.to_dict()
        assert "debias_factor" not in summary and "analyzer weights" in summary["analyzer"]


def test_trainers_ask_the_ledger_and_refuse_kary_labels(tokenizer, tmp_path):
    """The ledger answers "analyzer weights" for a K-RR release; the pairwise trainers, whose losses debias a
    binary flip rate, refuse such data by name instead of training without debiasing."""
    import datasets

    from squarechipo.privacy.ledger.binding import get_ledger
    from squarechipo.privacy.ledger.debiasing import resolve_privacy
    from squarechipo.privacy.mechanisms.measurements import KaryRR
    from squarechipo.reward import PrivateRewardConfig, PrivateRewardTrainer
    from squarechipo.trainer import SquareChiPOConfig, SquareChiPOTrainer
    from tests.helpers.models import make_tiny_classifier, make_tiny_model

    rows = datasets.Dataset.from_dict(
        {
            "prompt": [f"Q{i}" for i in range(12)],
            "responses": [["a", "b", "c"]] * 12,
            "best": [i % 3 for i in range(12)],
        }
    )
    released = release_rows(rows, KaryRR(1.0), seed=0)
    answer = get_ledger(released).debiasing()
    assert (answer.method, answer.column) == ("analyzer_weights", "label_weights")
    settings = resolve_privacy(get_ledger(released), epsilon=None, flip_rate=None, override=False)
    assert not settings.binary and settings.epsilon == 1.0
    with pytest.raises(ValueError, match="SquareChiPOTrainer cannot debias these labels.*analyzer_weights"):
        SquareChiPOTrainer(
            make_tiny_model(tokenizer),
            args=SquareChiPOConfig(output_dir=str(tmp_path / "po"), report_to=[]),
            train_dataset=released,
            processing_class=tokenizer,
        )
    with pytest.raises(ValueError, match="PrivateRewardTrainer cannot debias these labels"):
        PrivateRewardTrainer(
            make_tiny_classifier(tokenizer),
            args=PrivateRewardConfig(output_dir=str(tmp_path / "rm"), report_to=[]),
            train_dataset=released,
            processing_class=tokenizer,
        )


def test_rr_with_prior_picks_each_other_member_uniformly_when_the_top_set_is_large():
    """With k* = 5, a label that is not kept goes to each of the other four members with probability
    (1 − keep)/4, independently per row: the sampler against the exact distribution, chi-square at p > 1e-4."""
    from scipy import stats

    prior, epsilon, n = np.full(5, 0.2), 0.5, 50_000
    assert ld.optimal_top_k(prior[None], epsilon)[0][0] == 5
    for y in (0, 2, 4):
        released, _ = ld.rr_with_prior(np.full(n, y), np.tile(prior, (n, 1)), epsilon, np.random.default_rng(10 + y))
        expected = ld.rr_with_prior_distribution(y, prior, epsilon)
        assert stats.chisquare(np.bincount(released, minlength=5), n * expected).pvalue > 1e-4


FINITE_ONLY = {
    "optimal_top_k": lambda e: ld.optimal_top_k(np.array([[0.6, 0.4]]), e),
    "rr_with_prior": lambda e: ld.rr_with_prior(np.array([0]), np.array([[0.6, 0.4]]), e, np.random.default_rng(0)),
    "rr_with_prior_distribution": lambda e: ld.rr_with_prior_distribution(0, np.array([0.6, 0.4]), e),
    "k_rr": lambda e: ld.k_rr(np.array([0]), 3, e, np.random.default_rng(0)),
    "k_rr_weights": lambda e: ld.k_rr_weights(np.array([0]), 3, e),
    "subset_inclusion_probabilities": lambda e: ld.subset_inclusion_probabilities(np.array([0]), 3, e),
    "subset_mechanism": lambda e: ld.subset_mechanism(np.array([0]), 3, e, np.random.default_rng(0)),
    "subset_weights": lambda e: ld.subset_weights(np.array([[True, False, False]]), e),
    "analyzer_variance": lambda e: ld.analyzer_variance("k_rr", 3, e),
}


def test_every_k_ary_mechanism_is_in_the_table_of_finite_only_functions():
    assert set(FINITE_ONLY) == set(ld.__all__)


@pytest.mark.parametrize("name", sorted(FINITE_ONLY))
@pytest.mark.parametrize("epsilon", [math.inf, None])
def test_every_k_ary_mechanism_and_analyzer_refuses_an_infinite_budget(name, epsilon):
    """Each needs a noise scale: ε = ∞ (or no ε) would release the labels as they are, or divide by e^ε − 1."""
    FINITE_ONLY[name](1.0)  # a finite budget runs
    with pytest.raises(ValueError, match=r"^epsilon (must be finite for this mechanism|is required)"):
        FINITE_ONLY[name](epsilon)


def test_priors_are_probability_rows_of_at_least_two_labels_and_refusals_say_what_was_given():
    rng = np.random.default_rng(0)
    for prior, shape in ((np.array([0.5, 0.5]), "(2,)"), (np.ones((3, 1)), "(3, 1)")):
        with pytest.raises(
            ValueError, match=rf"^prior must have shape \(n, K\) with K ≥ 2 \(got {re.escape(shape)}\)"
        ):
            ld.rr_with_prior(np.zeros(len(prior), dtype=int), prior, 1.0, rng)
    # A zero entry is a probability; a row off 1 by 1e-3 is not (by 5e-7, it is rounding).
    released, _ = ld.rr_with_prior(np.array([0, 1]), np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]), 1.0, rng)
    assert released[0] == 0
    ld.rr_with_prior(np.array([0]), np.array([[0.5, 0.5 + 5e-7]]), 1.0, rng)
    for bad in ([[0.5, 0.501]], [[1.2, -0.2]]):
        with pytest.raises(
            ValueError, match=r"^prior rows must be probability vectors \(non-negative, summing to 1\)"
        ):
            ld.rr_with_prior(np.array([0]), np.array(bad), 1.0, rng)
    with pytest.raises(ValueError, match=r"^labels has shape \(2,\); expected \(3,\) to match the prior\.$"):
        ld.rr_with_prior(np.array([0, 1]), np.full((3, 4), 0.25), 1.0, rng)
    with pytest.raises(ValueError, match=r"^released must lie in 0\.\.2 \(K = 3\)"):
        ld.k_rr_weights(np.array([0, 3]), 3, 1.0)
    with pytest.raises(ValueError, match=r"^mechanism must be k_rr or subset \(got 'rr'\)\.$"):
        ld.analyzer_variance("rr", 3, 1.0)


def test_tied_priors_are_ordered_by_label_index_on_every_machine():
    """The top-k* set of a row whose priors tie is the tied labels of smallest index, as a stable sort gives: numpy's
    default sort (vectorised on AVX-512 machines) orders ties differently from one machine to another, and the same
    seed must release the same labels everywhere."""
    prior = np.tile([0.5, 0.25, 0.25, 0.0], 16)[None] / 16.0
    _, order = ld.optimal_top_k(prior, 1.0)
    expected = [i for value in (0.5, 0.25, 0.0) for i in range(64) if prior[0, i] == value / 16.0]
    assert order[0].tolist() == expected
