"""Label mechanisms: randomized response, Huber corruption, CTL and LTC."""

from __future__ import annotations

import math

import numpy as np
import pytest

from squarechipo.privacy.mechanisms.binary import check_labels, ctl, huber_corruption, ltc, randomized_response
from squarechipo.privacy.mechanisms.calibration import flip_probability
from squarechipo.privacy.mechanisms.measurements import LabelPipeline
from tests.helpers.stats import Z_TOLERANCE, binomial_se

N = 1_000_000


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 5.0])
def test_rr_flip_rate_within_4_standard_errors(epsilon):
    rng = np.random.default_rng(20261122)
    labels = rng.random(N) < 0.3
    out = randomized_response(labels, epsilon, rng)
    q = 1 / (1 + math.exp(epsilon))
    rate = np.mean(out != labels)
    assert abs(rate - q) <= Z_TOLERANCE * binomial_se(q, N), (rate, q)


def _wrong_rate(run, epsilon, alpha, seed):
    rng = np.random.default_rng(seed)
    truth = rng.random(N) < 0.5
    return np.mean(run(truth, epsilon, alpha, rng) != truth)


@pytest.mark.parametrize("epsilon,alpha", [(0.5, 0.1), (1.0, 0.2), (2.0, 0.05), (0.1, 0.4)])
def test_ctl_and_ltc_wrong_label_rates_match_closed_forms(epsilon, alpha):
    q = 1 / (1 + math.exp(epsilon))
    ctl_expected = alpha + q - 2 * alpha * q
    ltc_expected = alpha + q - alpha * q
    ctl_rate = _wrong_rate(ctl, epsilon, alpha, seed=1)
    ltc_rate = _wrong_rate(ltc, epsilon, alpha, seed=2)
    assert abs(ctl_rate - ctl_expected) <= Z_TOLERANCE * binomial_se(ctl_expected, N)
    assert abs(ltc_rate - ltc_expected) <= Z_TOLERANCE * binomial_se(ltc_expected, N)
    # LTC is worse by αq; the difference of two independent estimates has SE sqrt(se1² + se2²).
    se_diff = math.hypot(binomial_se(ctl_expected, N), binomial_se(ltc_expected, N))
    assert abs((ltc_rate - ctl_rate) - alpha * q) <= Z_TOLERANCE * se_diff
    # The pipeline object gives the same closed forms.
    assert LabelPipeline(epsilon, alpha, order="ctl").expected_flip_rate() == pytest.approx(ctl_expected)
    assert LabelPipeline(epsilon, alpha, order="ltc").expected_flip_rate() == pytest.approx(ltc_expected)


@pytest.mark.parametrize("order", ["ctl", "ltc"])
def test_random_adversary_rate_matches_pipeline_closed_form(order):
    pipeline = LabelPipeline(epsilon=1.0, corruption_rate=0.3, adversary="random", order=order)
    rng = np.random.default_rng(7)
    truth = rng.random(N) < 0.5
    rate = np.mean(pipeline.apply(truth, rng) != truth)
    expected = pipeline.expected_flip_rate()
    assert abs(rate - expected) <= Z_TOLERANCE * binomial_se(expected, N)


def test_targeted_adversary_only_touches_target_rows():
    rng = np.random.default_rng(3)
    n = 200_000
    truth = rng.random(n) < 0.5
    target = np.arange(n) % 4 == 0
    out = huber_corruption(truth, 0.3, rng, adversary="targeted", target=target)
    assert np.array_equal(out[~target], truth[~target])
    rate = np.mean(out[target] != truth[target])
    assert abs(rate - 0.3) <= Z_TOLERANCE * binomial_se(0.3, int(target.sum()))


def test_fixed_adversary_writes_its_label():
    rng = np.random.default_rng(4)
    n = 200_000
    truth = rng.random(n) < 0.5
    fixed = np.ones(n, dtype=np.int8)
    out = huber_corruption(truth.astype(np.int8), 0.25, rng, adversary="fixed", fixed_labels=fixed)
    assert out.dtype == np.int8
    changed = out != truth
    assert np.all(out[changed] == 1)  # only ever moved towards the fixed label
    expected = 0.25 * np.mean(truth == 0)
    assert abs(changed.mean() - expected) <= Z_TOLERANCE * binomial_se(expected, n)


def test_ltc_flip_adversary_is_wrong_with_respect_to_truth():
    """LTC: a contaminated row is wrong whatever RR did to it (Zhou et al. 2025 (Square-χPO), App. E: mask set to
    1)."""
    rng = np.random.default_rng(5)
    truth = np.zeros(100_000, dtype=bool)
    out = ltc(truth, 0.5, 0.5, rng)
    q = flip_probability(0.5)
    expected = 0.5 + q - 0.5 * q
    assert abs(out.mean() - expected) <= Z_TOLERANCE * binomial_se(expected, truth.size)


def test_outputs_keep_dtype_and_never_touch_inputs():
    labels = np.array([0, 1, 1, 0] * 1000, dtype=np.int64)
    before = labels.copy()
    out = randomized_response(labels, 0.5, np.random.default_rng(0))
    assert out.dtype == np.int64 and np.array_equal(labels, before)
    assert set(np.unique(out)) <= {0, 1}


def test_explicit_generator_only_no_global_state():
    labels = np.zeros(10_000, dtype=bool)
    np.random.seed(0)
    a = ctl(labels, 1.0, 0.1, np.random.default_rng(42))
    np.random.seed(999)
    b = ctl(labels, 1.0, 0.1, np.random.default_rng(42))
    assert np.array_equal(a, b)
    c = ctl(labels, 1.0, 0.1, np.random.default_rng(43))
    assert not np.array_equal(a, c)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        randomized_response(labels, 1.0, 42)


def test_no_privacy_no_corruption_is_identity():
    labels = np.random.default_rng(0).random(1000) < 0.5
    assert np.array_equal(randomized_response(labels, None, np.random.default_rng(1)), labels)
    assert np.array_equal(huber_corruption(labels, 0.0, np.random.default_rng(1)), labels)


def test_bad_inputs_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="labels must contain only 0 and 1"):
        randomized_response(np.array([0, 2]), 1.0, rng)
    with pytest.raises(ValueError, match="labels must be a 0/1 array"):
        randomized_response(np.array([0.0, 1.0]), 1.0, rng)
    with pytest.raises(ValueError, match="corruption_rate"):
        huber_corruption(np.array([0, 1]), 0.6, rng)
    with pytest.raises(ValueError, match="adversary"):
        huber_corruption(np.array([0, 1]), 0.1, rng, adversary="evil")
    with pytest.raises(ValueError, match="target"):
        huber_corruption(np.array([0, 1]), 0.1, rng, adversary="targeted")
    with pytest.raises(ValueError, match="order"):
        LabelPipeline(epsilon=1.0, order="both")
    with pytest.raises(ValueError, match="epsilon"):
        LabelPipeline(epsilon=-1.0)
    with pytest.raises(ValueError, match="fixed_preference"):
        LabelPipeline(corruption_rate=0.1, adversary="fixed")


@pytest.mark.parametrize("order", ["ctl", "ltc"])
def test_each_order_of_the_pipeline_gives_its_own_wrong_label_rate_in_the_release_and_the_ledger(order):
    """The order a pipeline runs is the one it states: with the flip adversary (α = 0.3, ε = 1) CTL's wrong-label rate
    is α + q − 2αq = 0.408 and LTC's α + q − αq = 0.488, 10 standard errors apart at 4,000 rows. A pipeline that ran
    the other order while its ledger named this one is caught here, through the release path."""
    import datasets

    from squarechipo.privacy import get_ledger, release_dataset

    pipeline = LabelPipeline(epsilon=1.0, corruption_rate=0.3, adversary="flip", order=order)
    other = LabelPipeline(epsilon=1.0, corruption_rate=0.3, adversary="flip", order="ltc" if order == "ctl" else "ctl")
    n = 4_000
    se = binomial_se(0.45, n)
    assert abs(pipeline.expected_flip_rate() - other.expected_flip_rate()) > 10 * se
    applied = pipeline.apply(np.zeros(N, dtype=bool), np.random.default_rng(7))
    assert abs(applied.mean() - pipeline.expected_flip_rate()) <= Z_TOLERANCE * binomial_se(0.45, N)
    rows = datasets.Dataset.from_dict(
        {
            "prompt": [f"row {i}: {i * 7919 % 100003} {i * 104729 % 999983}" for i in range(n)],
            "chosen": [f"keep {i} in a fund number {i * 31 % 997}" for i in range(n)],
            "rejected": [f"spend {i} on ticket {i * 53 % 991}" for i in range(n)],
        }
    )
    released = release_dataset(rows, pipeline, seed=11)
    wrong = np.mean(np.array(released["chosen"]) != np.array(rows["chosen"]))
    assert abs(wrong - pipeline.expected_flip_rate()) <= Z_TOLERANCE * se
    assert get_ledger(released).releases[0].order == order


def _empirical(release, labels: np.ndarray, num_labels: int, draws: int, seed: int) -> np.ndarray:
    """P(output | label) estimated from ``draws`` releases of each label (rows: labels, columns: outputs)."""
    out = np.zeros((len(labels), num_labels))
    for row, label in enumerate(labels):
        released = release(np.full(draws, label), np.random.default_rng(seed + row))
        out[row] = np.bincount(released, minlength=num_labels) / draws
    return out


def test_rr_with_prior_on_an_unsorted_prior_has_its_exact_distribution_and_privacy_loss():
    """With 4 labels and an unsorted prior the top-k* set is a permutation of the labels: mapping it the wrong way (a
    permutation where its inverse belongs) coincides with the right way only for a sorted prior. Each true label's
    output frequencies over 200,000 draws match the exact distribution, and the exact privacy loss is e^ε at most,
    reached inside the top-k* set."""
    from squarechipo.privacy.mechanisms import label_dp

    prior = np.array([0.08, 0.42, 0.05, 0.45])  # order: 3, 1, 0, 2
    epsilon = 1.0
    k_star, order = label_dp.optimal_top_k(prior[None], epsilon)
    assert int(k_star[0]) == 2 and order[0, :2].tolist() == [3, 1]
    exact = np.stack([label_dp.rr_with_prior_distribution(y, prior, epsilon) for y in range(4)])
    draws = 200_000
    observed = _empirical(
        lambda y, rng: label_dp.rr_with_prior(y, np.tile(prior, (len(y), 1)), epsilon, rng)[0],
        np.arange(4),
        4,
        draws,
        3,
    )
    assert np.all(np.abs(observed - exact) <= Z_TOLERANCE * np.sqrt(exact * (1 - exact) / draws) + 1e-12)
    assert exact[3, 3] == pytest.approx(math.exp(epsilon) / (math.exp(epsilon) + 1))  # a top label is kept
    assert exact[0].tolist() == pytest.approx([0, 0.5, 0, 0.5])  # outside the top: uniform over it
    support = exact > 0
    ratios = exact[:, None, :][..., support.all(axis=0)] / exact[None, :, :][..., support.all(axis=0)]
    assert ratios.max() == pytest.approx(math.exp(epsilon)) and ratios.min() == pytest.approx(math.exp(-epsilon))


@pytest.mark.parametrize("mechanism", ["k_rr", "subset"])
def test_k_ary_mechanisms_have_their_exact_privacy_loss_on_every_output(mechanism):
    """K-RR and the subset mechanism with 3 labels: the empirical P(output | y) over 200,000 draws, for every output,
    gives a privacy loss ratio of e^ε at most (within sampling error), attained where the definition says."""
    from squarechipo.privacy.mechanisms import label_dp

    epsilon, k, draws = 1.0, 3, 200_000
    if mechanism == "k_rr":
        observed = _empirical(lambda y, rng: label_dp.k_rr(y, k, epsilon, rng), np.arange(k), k, draws, 5)
        keep = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
        assert np.diag(observed) == pytest.approx([keep] * k, abs=Z_TOLERANCE * binomial_se(keep, draws))
    else:
        codes = 2 ** np.arange(k)

        def subsets(y, rng):
            return (label_dp.subset_mechanism(y, k, epsilon, rng) * codes).sum(axis=1)

        observed = _empirical(subsets, np.arange(k), 2**k, draws, 5)
    frequent = observed.min(axis=0) > 0.01  # outputs seen often enough to estimate a ratio
    ratios = observed[:, None, frequent] / observed[None, :, frequent]
    assert ratios.max() <= math.exp(epsilon) * 1.06
    assert ratios.max() >= math.exp(epsilon) * 0.94


def test_every_prior_is_the_same_whichever_response_is_stored_as_chosen(tokenizer):
    """A prior that reads the stored chosen/rejected order depends on the raw label and voids ε: LP-2ST's prior and
    RRWithPrior's input are computed in the canonical, label-free order, so swapping chosen and rejected in every row
    changes nothing."""
    import datasets

    from squarechipo.trainer.lp2st import policy_prior
    from tests.helpers.models import make_tiny_model
    from tests.helpers.rows import distinct_pairs

    rows = distinct_pairs(12, offset=900)
    swapped = datasets.Dataset.from_dict(
        {"prompt": rows["prompt"], "chosen": rows["rejected"], "rejected": rows["chosen"]}
    )
    policy, reference = make_tiny_model(tokenizer, seed=1), make_tiny_model(tokenizer, seed=2)
    kwargs = dict(method="square_chipo", beta=0.1, clip=10.0, max_length=64, batch_size=4)
    prior = policy_prior(policy, reference, tokenizer, rows, **kwargs)
    assert np.ptp(prior) > 1e-3  # the two models differ, so the prior is not flat
    assert np.array_equal(prior, policy_prior(policy, reference, tokenizer, swapped, **kwargs))


def test_a_mechanism_that_does_nothing_draws_nothing_so_each_order_reduces_to_the_other_mechanism():
    """At ε = ∞ (or None) CTL and LTC are Huber corruption alone, and at α = 0 randomized response alone, on the same
    stream: the mechanism that does nothing draws nothing, so a clean or an uncorrupted arm sees the noise of the
    other arm's seed."""
    truth = np.random.default_rng(0).random(5000) < 0.5
    for epsilon in (None, math.inf):
        for order in (ctl, ltc):
            for adversary in ({"adversary": "flip"}, {"adversary": "random"}):
                alone = huber_corruption(truth, 0.2, np.random.default_rng(9), **adversary)
                assert np.array_equal(order(truth, epsilon, 0.2, np.random.default_rng(9), **adversary), alone)
    for order in (ctl, ltc):
        alone = randomized_response(truth, 1.0, np.random.default_rng(9))
        assert np.array_equal(order(truth, 1.0, 0.0, np.random.default_rng(9)), alone)


def test_the_random_adversary_tosses_a_fair_coin_for_each_row():
    truth = np.zeros(20_000, dtype=bool)
    out = huber_corruption(truth, 0.5, np.random.default_rng(2), adversary="random")
    # Half the rows are contaminated and half of those get a 1: 1/4 of the rows, each on its own coin.
    assert abs(out.mean() - 0.25) <= Z_TOLERANCE * binomial_se(0.25, truth.size)
    contaminated_ones = huber_corruption(np.zeros(4000, dtype=bool), 0.5, np.random.default_rng(3), adversary="random")
    assert 0 < contaminated_ones.sum() < contaminated_ones.size


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int64])
def test_targeted_and_fixed_adversaries_write_labels_of_the_input_dtype(dtype):
    """A targeted row gets the wrong label with respect to the truth and keeps the input's dtype; so does a fixed
    label, whatever dtype it was given in."""
    truth = (np.arange(4000) % 3 == 0).astype(dtype)
    target = np.arange(4000) % 2 == 0
    out = huber_corruption(truth, 0.5, np.random.default_rng(4), adversary="targeted", target=target)
    assert out.dtype == truth.dtype and set(np.unique(out).tolist()) <= {0, 1}
    changed = out != truth
    assert not changed[~target].any() and 0 < changed[target].sum() < target.sum()
    assert np.array_equal(out[changed], 1 - truth[changed].astype(np.int64))
    fixed = huber_corruption(truth, 0.5, np.random.default_rng(4), adversary="fixed", fixed_labels=[1] * 4000)
    assert fixed.dtype == truth.dtype and np.all(fixed[fixed != truth] == 1) and (fixed != truth).any()


def test_refusals_name_the_field_the_values_allowed_and_the_fix():
    rng = np.random.default_rng(0)
    labels = np.array([0, 1, 1, 0])
    with pytest.raises(ValueError, match=r"^labels must be integer class indices \(got dtype float64\)\.$"):
        check_labels(np.array([0.0, 2.0]), num_labels=3)
    with pytest.raises(ValueError, match=r"^answers must lie in 0\.\.2 \(K = 3\)\.$"):
        check_labels(np.array([0, 3]), num_labels=3, field="answers")
    with pytest.raises(
        TypeError,
        match=r"^rng must be a numpy\.random\.Generator \(got int\); use numpy\.random\."
        r"default_rng\(\) for OS entropy or default_rng\(seed\) for simulation\.$",
    ):
        randomized_response(labels, 1.0, 42)
    with pytest.raises(ValueError, match=r"^adversary='targeted' needs target: a boolean row mask"):
        huber_corruption(labels, 0.1, rng, adversary="targeted")
    for target in (np.array([1, 0, 1, 0]), np.array([True, False])):  # integers, or the wrong shape
        with pytest.raises(ValueError, match=r"^target must be a boolean mask with one entry per label \(got dtype"):
            huber_corruption(labels, 0.1, rng, adversary="targeted", target=target)
    with pytest.raises(
        ValueError,
        match=r"^adversary='fixed' needs fixed_labels: the label the adversary always "
        r"writes \(e\.g\. the index of the longer or of the first response\)\.$",
    ):
        huber_corruption(labels, 0.1, rng, adversary="fixed")
    with pytest.raises(ValueError, match=r"^fixed_labels must contain only 0 and 1"):
        huber_corruption(labels, 0.1, rng, adversary="fixed", fixed_labels=[0, 2, 1, 0])
    with pytest.raises(ValueError, match=r"^fixed_labels has shape \(2,\); expected \(4,\)\.$"):
        huber_corruption(labels, 0.1, rng, adversary="fixed", fixed_labels=[0, 1])
    with pytest.raises(ValueError, match=r"^true_labels must contain only 0 and 1"):
        huber_corruption(labels, 0.1, rng, true_labels=[0, 2, 1, 0])
    with pytest.raises(ValueError, match=r"^true_labels has shape \(3,\); expected \(4,\)\.$"):
        huber_corruption(labels, 0.1, rng, true_labels=[0, 1, 1])
