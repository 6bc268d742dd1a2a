"""A cost model fitted to measured step times (:mod:`samplers.tokens.fit`): it recovers
known coefficients, checks itself on batches it was not fitted to, is the non-negative
least-squares optimum, and as the sampler's cost keeps every batch's fitted time within
the step; the checkpoint records it; bad input is refused, naming the argument.

The synthetic step times are computed here from known coefficients; nothing is timed.
"""

from __future__ import annotations

import doctest
import json
import random
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import samplers.tokens.fit
from samplers import DistributedTokenBatchSampler, FittedCost, HeldOutCheck, TokenCost, fit_cost
from samplers.tokens.fit import QUADRATIC_LIMIT, FittedTokenCost

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "studies" / "data" / "token-timing.json"
KINDS = ["padded", "sum"]
#: The known model: 20 ms per step, 2 µs per token, 0.3 ns per token² (q = 6667).
OVERHEAD, PER_TOKEN, PER_ATTENTION = 0.02, 2e-6, 3e-10


def features(kind: str, lengths: list[int]) -> tuple[int, int]:
    """(tokens, attention) of a batch, by hand."""
    if kind == "padded":
        return len(lengths) * max(lengths), len(lengths) * max(lengths) ** 2
    return sum(lengths), sum(d * d for d in lengths)


def synthetic(
    kind: str, count: int, *, noise: float = 0.0, seed: int = 0
) -> tuple[list[list[int]], list[float]]:
    """``count`` batches of varied sizes and lengths (so that the overhead, the tokens and
    the attention can be told apart) and their step times under the known model, each
    times ``1 + noise x`` a standard normal draw."""
    rng = random.Random(seed)
    batches, seconds = [], []
    for _ in range(count):
        longest = rng.choice([32, 128, 512, 1024, 2048, 4096])
        size = rng.randint(1, max(1, 65536 // longest))
        batch = [longest] + [rng.randint(1, longest) for _ in range(size - 1)]
        tokens, attention = features(kind, batch)
        exact = OVERHEAD + PER_TOKEN * tokens + PER_ATTENTION * attention
        batches.append(batch)
        seconds.append(exact * (1 + noise * rng.gauss(0, 1)))
    return batches, seconds


def test_the_docstring_examples_run() -> None:
    result = doctest.testmod(samplers.tokens.fit, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_predict_is_the_model_by_hand() -> None:
    padded = FittedCost("padded", overhead=0.5, per_token=0.25, per_attention=0.125)
    assert padded.predict([3, 5, 2]) == 0.5 + 0.25 * 15 + 0.125 * 75  # 3 rows of 5
    summed = FittedCost("sum", overhead=0.5, per_token=0.25, per_attention=0.125)
    assert summed.predict(torch.tensor([3, 5, 2])) == 0.5 + 0.25 * 10 + 0.125 * 38


@pytest.mark.parametrize("kind", KINDS)
def test_exact_times_give_back_the_known_coefficients(kind: str) -> None:
    batches, seconds = synthetic(kind, 120)
    fitted = fit_cost(batches, seconds, kind)
    assert fitted.kind == kind
    for found, known in [
        (fitted.overhead, OVERHEAD),
        (fitted.per_token, PER_TOKEN),
        (fitted.per_attention, PER_ATTENTION),
    ]:
        assert found == pytest.approx(known, rel=1e-6)
    assert fitted.quadratic == round(PER_TOKEN / PER_ATTENTION) == 6667
    assert fitted.cost == FittedTokenCost(kind, quadratic=6667)
    assert fitted.label == f"{kind}, quadratic=6667, fitted"
    check = fitted.check
    assert check is not None and check.r2 is not None
    assert check.r2 > 1 - 1e-9 and check.max_relative_error < 1e-9


@pytest.mark.parametrize("kind", KINDS)
def test_noisy_times_give_the_coefficients_within_a_few_percent(kind: str) -> None:
    """3% noise on each time, 400 batches: each coefficient within 10% (the attention's
    within 15%), and the held-out check sees the noise."""
    batches, seconds = synthetic(kind, 400, noise=0.03, seed=1)
    fitted = fit_cost(batches, seconds, kind)
    assert fitted.overhead == pytest.approx(OVERHEAD, rel=0.1)
    assert fitted.per_token == pytest.approx(PER_TOKEN, rel=0.1)
    assert fitted.per_attention == pytest.approx(PER_ATTENTION, rel=0.15)
    check = fitted.check
    assert check is not None and check.r2 is not None
    assert 0.9 < check.r2 < 1 - 1e-6
    assert 0.03 < check.max_relative_error < 0.2


@pytest.mark.parametrize("kind", KINDS)
def test_times_without_attention_fit_the_linear_cost(kind: str) -> None:
    batches, _ = synthetic(kind, 40)
    seconds = [0.01 + 1e-6 * features(kind, batch)[0] for batch in batches]
    fitted = fit_cost(batches, seconds, kind)
    assert fitted.per_attention == 0 and fitted.quadratic is None
    assert fitted.per_token == pytest.approx(1e-6, rel=1e-9)
    assert fitted.cost == FittedTokenCost(kind) and fitted.cost.linear
    assert fitted.label == f"{kind}, fitted"


def test_the_held_out_check_is_computed_on_batches_not_fitted() -> None:
    """The held-out batches' times are doubled: a fit that used them would be off; this
    one is exact, and its check sees exactly the doubling."""
    batches, seconds = synthetic("padded", 60)
    split = fit_cost(batches, seconds, holdout=0.3, seed=7).check
    assert split is not None
    held = set(split.held_out)
    assert len(held) == split.batches == 18 and split.fitted_on == 42
    assert held <= set(range(60))
    doubled = [2 * t if i in held else t for i, t in enumerate(seconds)]
    fitted = fit_cost(batches, doubled, holdout=0.3, seed=7)
    check = fitted.check
    assert check is not None and check.held_out == split.held_out
    assert fitted.per_token == pytest.approx(PER_TOKEN, rel=1e-6)
    assert fitted.per_attention == pytest.approx(PER_ATTENTION, rel=1e-6)
    assert check.max_relative_error == pytest.approx(0.5, rel=1e-6)  # predicted = half
    assert check.mean_relative_error == pytest.approx(0.5, rel=1e-6)
    measured = [doubled[i] for i in check.held_out]
    predicted = [fitted.predict(batches[i]) for i in check.held_out]
    mean = sum(measured) / len(measured)
    r2 = 1 - sum((p - m) ** 2 for p, m in zip(predicted, measured, strict=True)) / sum(
        (m - mean) ** 2 for m in measured
    )
    assert check.r2 == pytest.approx(r2, rel=1e-9)
    other = fit_cost(batches, seconds, holdout=0.3, seed=8).check
    assert other is not None and other.held_out != split.held_out  # the seed chooses


def test_one_held_out_batch_has_no_r2() -> None:
    batches, seconds = synthetic("sum", 4)
    check = fit_cost(batches, seconds, "sum").check
    assert isinstance(check, HeldOutCheck) and (check.batches, check.fitted_on) == (1, 3)
    assert check.r2 is None and check.max_relative_error < 1e-9


@st.composite
def measurements(draw: st.DrawFn) -> tuple[str, list[list[int]], list[float]]:
    """Batches and arbitrary positive times (no model behind them)."""
    count = draw(st.integers(4, 30))
    batches = draw(
        st.lists(
            st.lists(st.integers(0, 3000), min_size=1, max_size=12),
            min_size=count,
            max_size=count,
        )
    )
    seconds = draw(
        st.lists(
            st.floats(1e-4, 10.0, allow_nan=False, allow_infinity=False),
            min_size=count,
            max_size=count,
        )
    )
    return draw(st.sampled_from(KINDS)), batches, seconds


def squared_error(kind: str, batches: list[list[int]], seconds: list[float], c: Any) -> float:
    total = Fraction(0)
    for batch, measured in zip(batches, seconds, strict=True):
        tokens, attention = features(kind, batch)
        predicted = Fraction(c[0]) + Fraction(c[1]) * tokens + Fraction(c[2]) * attention
        total += (predicted - Fraction(measured)) ** 2
    return float(total)


@given(measurements(), st.integers(0, 10**6))
def test_the_fit_is_the_nonnegative_least_squares_optimum(setup, seed: int) -> None:
    """No non-negative coefficients near the fit (each scaled, zeroed or raised from 0)
    fit the fitted batches better; the batches held out are the rest."""
    kind, batches, seconds = setup
    try:
        fitted = fit_cost(batches, seconds, kind, seed=seed)
    except ValueError as error:  # times that do not grow with the tokens
        assert "do not grow with the batches' tokens" in str(error)
        return
    check = fitted.check
    assert check is not None
    fitted_on = [i for i in range(len(batches)) if i not in set(check.held_out)]
    assert len(fitted_on) == check.fitted_on >= 3 and check.batches >= 1
    chosen = [batches[i] for i in fitted_on]
    times = [seconds[i] for i in fitted_on]
    best = [fitted.overhead, fitted.per_token, fitted.per_attention]
    assert min(best) >= 0
    error = squared_error(kind, chosen, times, best)
    total = sum(t * t for t in times)
    # The largest value of each column, to raise a coefficient from 0 by a relevant step.
    columns = [1, *(max(features(kind, b)[j] for b in chosen) or 1 for j in (0, 1))]
    rng = random.Random(seed)
    for _ in range(30):
        candidate = list(best)
        for j in range(3):
            step = rng.choice([0.0, 0.5, 0.9, 0.99, 1.01, 1.1, 2.0])
            candidate[j] = best[j] * step if best[j] else rng.random() * total**0.5 / columns[j]
        assert error <= squared_error(kind, chosen, times, candidate) + 1e-9 * total


@st.composite
def models(draw: st.DrawFn) -> FittedCost:
    kind = draw(st.sampled_from(KINDS))
    overhead = draw(st.sampled_from([0.0, 1e-3, 0.05]))
    per_token = draw(st.sampled_from([0.0, 1e-9, 3e-7, 2e-6, 1e-5]))
    smallest = 1e-12 if per_token == 0 else 0.0
    per_attention = draw(st.sampled_from([smallest, 1e-15, 1e-12, 3e-10, 1e-8, 1e-5]))
    return FittedCost(kind, overhead, per_token, per_attention)


@given(models(), st.lists(st.integers(0, 5000), min_size=1, max_size=20))
def test_the_cost_never_prices_a_batch_below_its_fitted_time(fitted, lengths) -> None:
    """``unit_seconds x`` the batch's cost (exact, in ``1 / q`` units) is at least the
    fitted time beyond the overhead, and ``q`` is ``a / b`` rounded, within its limits."""
    q = fitted.quadratic
    cost = fitted.cost
    assert cost.label == fitted.label and cost.label.endswith(", fitted")
    units = cost.costs(torch.tensor(lengths), torch.zeros(len(lengths), dtype=torch.long), 1)
    priced = Fraction(fitted.unit_seconds) * int(units[0]) / cost.scale
    tokens, attention = features(fitted.kind, lengths)
    exact = Fraction(fitted.per_token) * tokens + Fraction(fitted.per_attention) * attention
    assert priced >= exact
    if q is None:
        assert fitted.per_attention == 0
    else:
        ratio = Fraction(fitted.per_token) / Fraction(fitted.per_attention)
        assert q == max(1, min(round(ratio), QUADRATIC_LIMIT))
        assert fitted.unit_seconds >= fitted.per_token
        if ratio >= 1:  # rounding q raises the price by at most half of per_attention
            bound = Fraction(fitted.per_token) + Fraction(fitted.per_attention) / 2
            assert Fraction(fitted.unit_seconds) <= bound * (1 + Fraction(1, 10**15))


@given(
    models(),
    st.lists(st.integers(1, 3000), min_size=1, max_size=150),
    st.floats(1.5, 4000.0),
    st.integers(1, 3),
)
def test_a_fitted_budget_keeps_every_batch_within_the_step(fitted, lengths, room, world):
    """Under ``cost=fitted.cost`` and ``max_tokens=fitted.max_tokens(seconds)``, every
    batch of two samples or more has a fitted time of at most ``seconds``."""
    seconds = fitted.overhead + room * fitted.unit_seconds * 16
    budget = fitted.max_tokens(seconds)
    assert budget >= 1
    for rank in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # samples that cost more than the step alone
            sampler = DistributedTokenBatchSampler(lengths, budget, world, rank, cost=fitted.cost)
            batches = list(sampler)
        for batch in batches:
            if len(batch) > 1:
                assert fitted.predict([lengths[i] for i in batch]) <= seconds, batch


def test_a_fit_from_measurements_drives_the_sampler() -> None:
    batches, seconds = synthetic("padded", 200, noise=0.02, seed=3)
    fitted = fit_cost(batches, seconds)
    step = 0.25
    lengths = [(i * 7919) % 4000 + 1 for i in range(3000)]
    sampler = DistributedTokenBatchSampler(lengths, fitted.max_tokens(step), 4, 1, cost=fitted.cost)
    found = list(sampler)
    assert len(found) > 10
    times = [fitted.predict([lengths[i] for i in batch]) for batch in found]
    assert max(times) <= step
    assert sum(times) / len(times) > 0.5 * step  # the budget is used, not wasted


def test_the_state_records_the_fitted_model_and_refuses_another() -> None:
    fitted = FittedCost("padded", overhead=0.01, per_token=2e-6, per_attention=1e-9)
    lengths = [(i * 31) % 500 + 1 for i in range(800)]
    budget = fitted.max_tokens(0.05)

    def make(cost: Any, rank: int = 0) -> DistributedTokenBatchSampler:
        return DistributedTokenBatchSampler(lengths, budget, 2, rank, cost=cost)

    first = make(fitted.cost)
    iterator = iter(first)
    taken = [next(iterator) for _ in range(3)]
    rest = list(iterator)
    assert len(taken) == 3 and rest
    first = make(fitted.cost)
    iterator = iter(first)
    assert [next(iterator) for _ in range(3)] == taken
    state = first.state_dict()
    assert state["cost"] == "padded, quadratic=2000, fitted" == fitted.label
    assert not [key for key, value in state.items() if isinstance(value, float)]
    others = [
        TokenCost("padded", quadratic=2000),  # the same integer model, not fitted
        FittedTokenCost("padded", quadratic=1999),
        FittedTokenCost("sum", quadratic=2000),
        FittedTokenCost("padded"),
        FittedCost("padded", 0.01, 2e-6, 2e-9).cost,  # another fit
    ]
    for other in others:
        with pytest.raises(ValueError, match="'cost'"):
            make(other).load_state_dict(state)
    # The label spells out the integer model: rebuilt, it resumes where the state stopped.
    rebuilt = make(FittedTokenCost("padded", quadratic=2000))
    rebuilt.load_state_dict(state)
    assert list(rebuilt) == rest
    refit = make(FittedCost("padded", 0.02, 2e-6, 1e-9).cost)  # the same q, another overhead
    refit.load_state_dict(state)
    assert list(refit) == rest


def test_the_recorded_cpu_step_times_fit_the_padded_model() -> None:
    """The token-costs finding's recorded CPU timings (python -m studies.token_timing
    --record) of padded batches: the model predicts the held-out steps."""
    record = json.loads(RECORDED.read_text())
    batches, seconds = [], []
    for run in record["runs"]:
        if not run["packed"]:
            for step_batches, step_seconds in zip(run["batches"], run["seconds"], strict=True):
                for batch, time in zip(step_batches, step_seconds, strict=True):
                    if batch:
                        batches.append(batch)
                        seconds.append(time)
    assert len(batches) >= 100
    check = fit_cost(batches, seconds).check
    assert check is not None and check.r2 is not None
    assert check.r2 > 0.95 and check.max_relative_error < 0.3


# --- errors ---------------------------------------------------------------------------------

GOOD_BATCHES = [[1, 2], [3], [4, 4, 4], [5, 1], [6]]
GOOD_SECONDS = [0.1, 0.2, 0.3, 0.4, 0.5]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"seconds": GOOD_SECONDS[:4]}, ValueError, r"len\(batches\)=5 and len\(seconds\)=4"),
        (
            {"batches": GOOD_BATCHES[:3], "seconds": GOOD_SECONDS[:3]},
            ValueError,
            r"at least 3 batches to fit .* len\(batches\)=3 with holdout=0.25 holds out 1 "
            "and leaves 2",
        ),
        ({"holdout": 0.5}, ValueError, r"len\(batches\)=5 with holdout=0.5 holds out 3"),
        ({"holdout": 0}, ValueError, r"holdout must be a fraction in \(0, 1\), got 0"),
        ({"holdout": 1.0}, ValueError, r"holdout must be a fraction in \(0, 1\), got 1.0"),
        ({"holdout": float("nan")}, ValueError, r"holdout .* got nan"),
        ({"holdout": True}, TypeError, "holdout must be a fraction in .* got bool"),
        ({"kind": "padding"}, ValueError, "kind must be one of 'padded', 'sum', got 'padding'"),
        ({"seed": 1.5}, TypeError, "seed must be an integer, got float 1.5"),
        ({"seconds": [0.1, 0.2, 0.0, 0.4, 0.5]}, ValueError, r"seconds\[2\] .* above 0, got 0.0"),
        ({"seconds": [0.1, -1, 0.3, 0.4, 0.5]}, ValueError, r"seconds\[1\] .* got -1"),
        ({"seconds": [0.1, 0.2, 0.3, float("inf"), 0.5]}, ValueError, r"seconds\[3\] .* inf"),
        ({"seconds": [0.1, 0.2, 0.3, 0.4, float("nan")]}, ValueError, r"seconds\[4\] .* nan"),
        ({"seconds": [0.1, "0.2", 0.3, 0.4, 0.5]}, TypeError, r"seconds\[1\] .* got str"),
        ({"batches": [[1], [], [2], [3], [4]]}, ValueError, r"batches\[1\] is an empty batch"),
        (
            {"batches": [[1], [2], [3, -4], [3], [4]]},
            ValueError,
            r"batches\[2\] must be at least 0, got batches\[2\]\[1\] = -4",
        ),
        ({"batches": [[1], [2], [3], [2.5], [4]]}, TypeError, r"batches\[3\]\[0\] .* float 2.5"),
        ({"batches": [[1], [2], [3], [4], 5]}, TypeError, r"batches\[4\] .* sequence .* int"),
        (
            {"seconds": [0.3] * 5},
            ValueError,
            "do not grow with the batches' tokens .* overhead=0.3",
        ),
    ],
)
def test_fit_cost_refuses_bad_input_naming_it(arguments, error, message) -> None:
    given = {"batches": GOOD_BATCHES, "seconds": GOOD_SECONDS, **arguments}
    with pytest.raises(error, match=message):
        fit_cost(**given)


def test_max_tokens_refuses_a_step_without_room_naming_the_values() -> None:
    fitted = FittedCost("sum", overhead=0.5, per_token=0.125, per_attention=0.0)
    assert fitted.max_tokens(2.0) == 12 and fitted.max_tokens(1.99) == 11
    with pytest.raises(
        ValueError, match=r"seconds=0.25 is not longer than the fitted overhead=0.5"
    ):
        fitted.max_tokens(0.25)
    with pytest.raises(ValueError, match=r"seconds=0.5 is not longer than"):
        fitted.max_tokens(0.5)
    with pytest.raises(ValueError, match=r"seconds=0.5625 leaves 0.0625 .* one token's 0.125"):
        fitted.max_tokens(0.5625)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"seconds must be a finite number above 0, got {bad}"):
            fitted.max_tokens(bad)
    with pytest.raises(TypeError, match="seconds must be a number of seconds, got bool"):
        fitted.max_tokens(True)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"kind": "max"}, ValueError, "kind must be one of 'padded', 'sum', got 'max'"),
        ({"overhead": -0.1}, ValueError, "FittedCost overhead must be .* at least 0, got -0.1"),
        ({"per_token": float("nan")}, ValueError, "FittedCost per_token .* got nan"),
        ({"per_attention": "1e-9"}, TypeError, "FittedCost per_attention .* got str"),
        (
            {"per_token": 0.0, "per_attention": 0},
            ValueError,
            "needs per_token or per_attention above 0 .* per_token=0.0, per_attention=0.0",
        ),
        ({"check": {"r2": 1.0}}, TypeError, "check must be a HeldOutCheck or None, got dict"),
    ],
)
def test_fitted_cost_refuses_bad_coefficients(fields, error, message) -> None:
    given = {"kind": "padded", "overhead": 0.0, "per_token": 1e-6, "per_attention": 1e-9}
    with pytest.raises(error, match=message):
        FittedCost(**{**given, **fields})


def test_a_fitted_token_cost_is_linear_or_quadratic() -> None:
    with pytest.raises(ValueError, match="FittedTokenCost is linear or quadratic, got per_sample"):
        FittedTokenCost("sum", per_sample=lambda t: t, name="f")
    assert FittedTokenCost("sum", quadratic=5).label == "sum, quadratic=5, fitted"


def test_extreme_ratios_keep_q_within_its_limits() -> None:
    attention_heavy = FittedCost("padded", 0.0, per_token=1e-9, per_attention=4e-9)
    assert attention_heavy.quadratic == 1 and attention_heavy.unit_seconds == 4e-9
    only_attention = FittedCost("padded", 0.0, per_token=0.0, per_attention=4e-9)
    assert only_attention.quadratic == 1 and only_attention.unit_seconds == 4e-9
    negligible = FittedCost("sum", 0.0, per_token=1.0, per_attention=1e-300)
    assert negligible.quadratic == QUADRATIC_LIMIT and negligible.unit_seconds == 1.0
