import math

import pytest

from squarechipo.privacy.mechanisms.calibration import (
    check_corruption_rate,
    debias_factor,
    debias_factor_from_flip_rate,
    flip_probability,
)


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 30.0])
def test_debias_factor_matches_paper_formula(epsilon):
    expected = (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    assert debias_factor(epsilon) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_flip_probability_and_debias_factor_agree(epsilon):
    q = flip_probability(epsilon)
    assert q == pytest.approx(1 / (1 + math.exp(epsilon)), rel=1e-12)
    assert debias_factor(epsilon) == pytest.approx(1 / (1 - 2 * q), rel=1e-12)
    assert debias_factor_from_flip_rate(q) == pytest.approx(debias_factor(epsilon), rel=1e-12)


def test_no_privacy_is_one_and_zero():
    assert debias_factor(math.inf) == 1.0
    assert debias_factor(None) == 1.0
    assert flip_probability(math.inf) == 0.0


def test_extreme_epsilons_are_finite():
    assert debias_factor(1e-6) == pytest.approx(2e6, rel=1e-6)  # the smallest ε accepted (below: refused)
    assert debias_factor(1e6) == 1.0
    assert flip_probability(1e6) == 0.0


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan"), -math.inf])
def test_bad_epsilon_raises_naming_the_field(bad):
    with pytest.raises(ValueError, match="epsilon"):
        debias_factor(bad)
    with pytest.raises(ValueError, match="epsilon"):
        flip_probability(bad)


@pytest.mark.parametrize("bad", ["1.0", True])
def test_non_numeric_epsilon_raises(bad):
    with pytest.raises(ValueError, match="epsilon"):
        debias_factor(bad)


@pytest.mark.parametrize("bad", [-0.01, 0.51, float("nan"), 1.0])
def test_corruption_rate_outside_range_raises(bad):
    with pytest.raises(ValueError, match=r"corruption_rate must lie in \[0, 0.5\]"):
        check_corruption_rate(bad)


def test_an_epsilon_too_small_to_carry_a_label_is_refused_and_a_small_one_warns(caplog):
    from squarechipo.privacy.mechanisms.calibration import MIN_EPSILON, check_epsilon

    for tiny in (1e-300, 1e-12):
        with pytest.raises(ValueError, match=r"label_epsilon=1e-\d+ is below 1e-06: .* coin flips"):
            check_epsilon(tiny, field="label_epsilon")
    assert check_epsilon(MIN_EPSILON) == MIN_EPSILON
    from squarechipo.privacy.mechanisms import calibration

    calibration._warn_large_factor.cache_clear()  # once per ε and process: another test may have warned already
    with caplog.at_level("WARNING", logger="squarechipo"):
        assert debias_factor(0.05) == pytest.approx(1 / math.tanh(0.025))
    assert any("c(ε) = 40" in record.getMessage() for record in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="squarechipo"):
        debias_factor(0.05)  # a loss calls it at every step: the warning is not repeated
    assert not caplog.records
    with caplog.at_level("WARNING", logger="squarechipo"):
        debias_factor(1.0)
    assert not caplog.records


_CHECKS = {  # check → (what it accepts at the edge, what it refuses at the edge)
    "check_corruption_rate": (0.5, math.nextafter(0.5, 1.0)),
    "check_flip_rate": (math.nextafter(0.5, 0.0), 0.5),
}


@pytest.mark.parametrize("name", sorted(_CHECKS))
@pytest.mark.parametrize("bad", ["0.1", None, [0.1], -1e-9, float("nan"), math.inf, "edge"])
def test_a_refused_rate_names_its_field_and_bound_and_the_fix_it_names_is_accepted(name, bad):
    """The rates' one-line errors: the field as the caller named it, the interval with its closed or open end, and
    an example value that the same check accepts; a number given as text is refused, not converted."""
    import re

    from squarechipo.privacy.mechanisms import calibration

    check = getattr(calibration, name)
    accepted, refused = _CHECKS[name]
    assert check(accepted, field="rate_x") == accepted
    with pytest.raises(ValueError) as error:
        check(refused if bad == "edge" else bad, field="rate_x")
    message = str(error.value)
    bound = r"\[0, 0\.5\]" if name == "check_corruption_rate" else r"\[0, 0\.5\)"
    assert re.match(rf"rate_x must (be a number in|lie in) {bound} \(got ", message), message
    if isinstance(bad, float) or bad == "edge":  # a number out of range: the reason and the fix
        example = re.search(r"Pass e\.g\. rate_x=(\d+(?:\.\d+)?)", message)
        assert example and check(float(example.group(1))) == float(example.group(1)), message
        reason = "majority label" if name == "check_corruption_rate" else "no signal"
        assert reason in message


@pytest.mark.parametrize("bad", [None, "1", math.inf, -2.0, float("nan"), 1e-9])
def test_a_refused_epsilon_names_its_field_and_a_budget_the_same_check_accepts(bad):
    """check_epsilon's errors name the field and suggest a budget it accepts; below the smallest budget the stated
    flip probability and c(ε) are those of randomized response at that ε (to the digits shown)."""
    import re

    from squarechipo.privacy.mechanisms.calibration import check_epsilon

    with pytest.raises(ValueError) as error:
        check_epsilon(bad, field="eps_x", finite=True)
    message = str(error.value)
    assert re.match(r"eps_x[ =]", message), message
    if bad is math.inf:
        assert "must be finite" in message and "without privacy" in message
        return
    suggested = re.search(r"eps_x=(\d+(?:\.\d+)?)", message)
    assert suggested and check_epsilon(float(suggested.group(1)), finite=True) == float(suggested.group(1)), message
    if bad == 1e-9:
        flip, factor = (float(x) for x in re.search(r"1/2 − ([0-9.e-]+),.*c\(ε\) ≈ ([0-9.e+]+)\.", message).groups())
        assert flip == pytest.approx(0.5 - 1 / (1 + math.exp(bad)), rel=1e-2)
        assert factor == pytest.approx(1 / math.tanh(bad / 2), rel=1e-2)


def test_the_checks_name_their_default_fields_and_the_type_they_were_given():
    from squarechipo.privacy.mechanisms.calibration import check_epsilon, check_flip_rate

    with pytest.raises(ValueError, match=r"^epsilon must be > 0"):
        check_epsilon(0)
    with pytest.raises(ValueError, match=r"^flip_rate must lie in \[0, 0\.5\)"):
        check_flip_rate(0.5)
    with pytest.raises(ValueError, match=r"^epsilon must be a number \(got '1' of type str\)"):
        check_epsilon("1")
