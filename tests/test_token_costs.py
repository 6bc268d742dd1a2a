"""Cost models of the token sampler (``cost=``): the budget, equal steps, exactly once and
resume under each, the checkpoint's record of the model, and the errors.

The expected costs are computed here in exact integers from the lengths, not read from the
sampler.
"""

from __future__ import annotations

import pickle
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from samplers import DistributedTokenBatchSampler, TokenCost
from samplers.tokens.order import batch_costs


def cubic(lengths: torch.Tensor) -> torch.Tensor:
    """A named per-sample cost: ``d + d³ // 4096``."""
    return lengths + lengths**3 // 4096


MODELS: dict[str, Any] = {
    "padded, quadratic=16": TokenCost("padded", quadratic=16),
    "sum, quadratic=3": TokenCost("sum", quadratic=3),
    "padded, name=cubic": TokenCost("padded", per_sample=cubic, name="cubic"),
    "sum, name=cubic": TokenCost("sum", per_sample=cubic, name="cubic"),
    "mapping": {"kind": "sum", "quadratic": 40},
}


def exact(model: Any, lengths: list[int], batch: list[int]) -> tuple[int, int]:
    """(the batch's cost, the budget's multiplier): cost <= multiplier * max_tokens fits."""
    if isinstance(model, dict):
        model = TokenCost(**model)
    values = [lengths[i] for i in batch]
    if model.quadratic is not None:
        q = model.quadratic

        def each(d: int) -> int:
            return q * d + d * d

        scale = q
    elif model.per_sample is not None:

        def each(d: int) -> int:
            return d + d**3 // 4096

        scale = 1
    else:

        def each(d: int) -> int:
            return d

        scale = 1
    if model.kind == "padded":
        return len(values) * each(max(values)), scale
    return sum(each(d) for d in values), scale


def shares(lengths: Any, max_tokens: int, world: int, **options: Any) -> list[list[list[int]]]:
    found = []
    for rank in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            sampler = DistributedTokenBatchSampler(lengths, max_tokens, world, rank, **options)
            sampler.set_epoch(options.get("seed", 0) % 3)
            found.append(list(sampler))
    return found


@st.composite
def setups(draw: st.DrawFn) -> dict[str, Any]:
    size = draw(st.integers(0, 250))
    spread = draw(st.sampled_from([1, 8, 64, 500]))
    return {
        "lengths": draw(st.lists(st.integers(0, spread), min_size=size, max_size=size)),
        "max_tokens": draw(st.sampled_from([1, 16, 300, 5000])),
        "world": draw(st.integers(1, 7)),
        "tail": draw(st.sampled_from(["uneven", "pad", "drop"])),
        "cost": draw(st.sampled_from(sorted(MODELS))),
        "window": draw(st.sampled_from([None, 1, 5, 64])),
        "seed": draw(st.integers(0, 50)),
    }


@given(setups())
def test_every_batch_is_within_the_budget_under_each_model(setup) -> None:
    model = MODELS[setup["cost"]]
    lengths, budget = setup["lengths"], setup["max_tokens"]
    found = shares(
        lengths,
        budget,
        setup["world"],
        cost=model,
        tail=setup["tail"],
        window=setup["window"],
        seed=setup["seed"],
    )
    for share in found:
        for batch in share:
            cost, scale = exact(model, lengths, batch)
            assert batch and (cost <= scale * budget or len(batch) == 1), (batch, cost)
    counts = {len(share) for share in found}
    if setup["tail"] != "uneven":
        assert len(counts) == 1
    else:
        seen = Counter(i for share in found for batch in share for i in batch)
        assert sorted(seen) == list(range(len(lengths)))
        assert set(seen.values()) <= {1}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_model_resumes_on_another_world_size(name: str) -> None:
    """Half of an epoch on 3 ranks, the rest on 5: every sample exactly once."""
    model = MODELS[name]
    lengths = [(i * 53) % 300 + 1 for i in range(700)]

    def make(world: int, rank: int) -> DistributedTokenBatchSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return DistributedTokenBatchSampler(lengths, 2000, world, rank, cost=model)

    first = [make(3, rank) for rank in range(3)]
    iterators = [iter(sampler) for sampler in first]
    seen = [index for it in iterators for _ in range(4) for index in next(it)]
    state = first[0].state_dict()
    assert all(sampler.state_dict() == state for sampler in first)
    rest = [make(5, rank) for rank in range(5)]
    for sampler in rest:
        sampler.load_state_dict(state)
        seen += [index for batch in sampler for index in batch]
    assert sorted(seen) == list(range(len(lengths)))


def test_the_state_records_the_model_and_refuses_another() -> None:
    lengths = list(range(1, 300))
    quadratic = DistributedTokenBatchSampler(lengths, 8000, 2, 0, cost=TokenCost(quadratic=32))
    next(iter(quadratic))
    state = quadratic.state_dict()
    assert state["cost"] == "padded, quadratic=32"
    for other in ("padded", TokenCost(quadratic=16), TokenCost("sum", quadratic=32)):
        sampler = DistributedTokenBatchSampler(lengths, 8000, 2, 0, cost=other)
        with pytest.raises(ValueError, match="'cost'"):
            sampler.load_state_dict(state)
    same = DistributedTokenBatchSampler(lengths, 8000, 2, 1, cost={"quadratic": 32})
    same.load_state_dict(state)  # a mapping of the same fields is the same model
    named = TokenCost("sum", per_sample=cubic, name="cubic")
    sampler = DistributedTokenBatchSampler(lengths, 8000, 2, 0, cost=named)
    assert sampler.state_dict()["cost"] == "sum, name=cubic"
    renamed = TokenCost("sum", per_sample=cubic, name="cubic-v2")
    with pytest.raises(ValueError, match="'cost'"):
        DistributedTokenBatchSampler(lengths, 8000, 2, 0, cost=renamed).load_state_dict(
            sampler.state_dict()
        )


def test_the_plain_models_keep_their_states_and_batches() -> None:
    """``"padded"`` and ``TokenCost("padded")`` are the same model: same state, same batches."""
    lengths = [(i * 31) % 97 + 1 for i in range(400)]
    plain = DistributedTokenBatchSampler(lengths, 500, 2, 1, cost="sum")
    typed = DistributedTokenBatchSampler(lengths, 500, 2, 1, cost=TokenCost("sum"))
    assert list(plain) == list(typed)
    assert plain.state_dict() == typed.state_dict()
    assert typed.cost == "sum" and plain.state_dict()["cost"] == "sum"


def test_a_quadratic_budget_keeps_long_batches_smaller() -> None:
    """Under d + d²/q a batch of long samples holds fewer of them than under tokens."""
    lengths = [1000] * 64 + [10] * 64
    linear = [b for share in shares(lengths, 8000, 1, shuffle=False) for b in share]
    quadratic = TokenCost("padded", quadratic=1000)
    squared = [
        b for share in shares(lengths, 8000, 1, shuffle=False, cost=quadratic) for b in share
    ]
    longest = max(len(b) for b in linear if lengths[b[0]] == 1000)
    assert longest == 8
    assert max(len(b) for b in squared if lengths[b[0]] == 1000) == 4  # 4 x 2000 = 8000


def test_batch_costs_follow_the_model() -> None:
    lengths = torch.tensor([10, 4, 6, 2, 2])
    sizes = torch.tensor([2, 3])
    assert batch_costs(lengths, sizes, "padded").tolist() == [20, 18]
    assert batch_costs(lengths, sizes, "sum").tolist() == [14, 10]
    # q = 2, in halves of a token: q * d + d² per sample.
    assert batch_costs(lengths, sizes, TokenCost("sum", quadratic=2)).tolist() == [
        (20 + 100) + (8 + 16),
        (12 + 36) + 2 * (4 + 4),
    ]
    assert batch_costs(lengths, sizes, TokenCost("padded", quadratic=2)).tolist() == [
        2 * (20 + 100),
        3 * (12 + 36),
    ]


def test_the_over_budget_warning_counts_costs() -> None:
    with pytest.warns(UserWarning, match=r"2 sample\(s\) cost more than max_tokens=100 alone"):
        DistributedTokenBatchSampler([90, 91, 10], 100, 1, 0, cost=TokenCost(quadratic=100))


@pytest.mark.parametrize(
    ("make", "error", "said"),
    [
        (lambda: TokenCost("max"), ValueError, "kind must be one of 'padded', 'sum', got 'max'"),
        (lambda: TokenCost(quadratic=0), ValueError, "quadratic must be an integer .* got 0"),
        (lambda: TokenCost(quadratic=2.5), ValueError, "got 2.5"),
        (lambda: TokenCost(per_sample=cubic), ValueError, "needs name="),
        (lambda: TokenCost(per_sample=cubic, name="c", quadratic=2), ValueError, "not both"),
        (lambda: TokenCost(name="c"), ValueError, "name= is for a per_sample"),
        (lambda: TokenCost(per_sample=3, name="c"), TypeError, "per_sample must be callable"),
    ],
)
def test_bad_models_are_named(make: Any, error: type[Exception], said: str) -> None:
    with pytest.raises(error, match=said):
        make()


@pytest.mark.parametrize(
    ("cost", "error", "said"),
    [
        (cubic, TypeError, "pass a callable as TokenCost"),
        ({"kind": "sum", "q": 3}, ValueError, "got 'q'"),
        (3, TypeError, "cost must be 'padded', 'sum', a TokenCost or a mapping, got int"),
        (
            TokenCost(per_sample=lambda d: d.float(), name="f"),
            TypeError,
            "'f': per_sample must return integer costs",
        ),
        (
            TokenCost(per_sample=lambda d: -d, name="n"),
            ValueError,
            "'n': per_sample must return costs of at least 0, got -3 for length 3",
        ),
        (
            TokenCost(per_sample=lambda d: d[:1], name="s"),
            ValueError,
            r"'s': per_sample must return a tensor of shape \(3,\)",
        ),
    ],
)
def test_bad_costs_are_named(cost: Any, error: type[Exception], said: str) -> None:
    with pytest.raises(error, match=said):
        DistributedTokenBatchSampler([1, 2, 3], 10, 1, 0, cost=cost)


def test_a_sampler_with_a_named_function_pickles() -> None:
    model = TokenCost("sum", per_sample=cubic, name="cubic")
    sampler = DistributedTokenBatchSampler(list(range(1, 200)), 3000, 2, 0, cost=model)
    first = list(sampler)
    copy = pickle.loads(pickle.dumps(sampler))
    copy.set_epoch(0)
    assert list(copy) == first
