"""DistributedPackedBatchSampler and packed_collate: rows within max_length, every sample
whole and exactly once, equal steps, resume on another world size, the rows read back by
the collate, attention over a packed row equal to attention over each sample alone, and
the packing efficiency on the token finding's two length distributions.

Expectations are computed here from the lengths (row sums, counts, coverage).
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from samplers import DistributedPackedBatchSampler, TokenCost, packed_collate
from samplers.tokens.packing import best_fit_decreasing, row_starts


def build(lengths: Any, max_length: int, rows: int, world: int, rank: int, **options: Any):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DistributedPackedBatchSampler(lengths, max_length, rows, world, rank, **options)


def shares(lengths: Any, max_length: int, rows: int, world: int, **options: Any):
    found = []
    for rank in range(world):
        sampler = build(lengths, max_length, rows, world, rank, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            found.append(list(sampler))
    return found


def rows_of(lengths: list[int], batch: list[int], max_length: int) -> list[list[int]]:
    """The rows of a batch as the collate reads them (lengths, in order)."""
    values = [lengths[i] for i in batch]
    starts = row_starts(values, max_length)
    return [values[a:b] for a, b in zip(starts, [*starts[1:], len(values)], strict=True)]


@st.composite
def setups(draw: st.DrawFn) -> dict[str, Any]:
    size = draw(st.integers(0, 300))
    spread = draw(st.sampled_from([1, 8, 64, 300]))
    return {
        "lengths": draw(st.lists(st.integers(0, spread), min_size=size, max_size=size)),
        "max_length": draw(st.sampled_from([1, 16, 64, 256])),
        "rows": draw(st.integers(1, 5)),
        "world": draw(st.integers(1, 7)),
        "tail": draw(st.sampled_from(["uneven", "pad", "drop"])),
        "window": draw(st.sampled_from([None, 1, 7, 100])),
        "seed": draw(st.integers(0, 50)),
        "cost": draw(st.sampled_from(["sum", TokenCost("sum", quadratic=8)])),
    }


@given(setups())
def test_rows_fit_samples_are_whole_and_steps_are_equal(setup) -> None:
    lengths, limit = setup["lengths"], setup["max_length"]
    options = {k: setup[k] for k in ("tail", "window", "seed", "cost")}
    found = shares(lengths, limit, setup["rows"], setup["world"], **options)
    for share in found:
        for batch in share:
            rows = rows_of(lengths, batch, limit)
            assert batch and len(rows) <= setup["rows"], rows
            assert all(sum(row) <= limit or len(row) == 1 for row in rows), rows
    counts = [len(share) for share in found]
    seen = Counter(i for share in found for batch in share for i in batch)
    if setup["tail"] == "uneven":
        assert sorted(seen) == list(range(len(lengths))) and set(seen.values()) <= {1}
        assert max(counts, default=0) - min(counts, default=0) <= 1
    else:
        assert len(set(counts)) == 1


@given(st.lists(st.integers(0, 40), max_size=200), st.integers(1, 50))
def test_the_rows_are_read_back_from_the_lengths_alone(values, limit) -> None:
    """Best-fit decreasing's rows, laid out in the order they opened, are what a greedy
    cut of their lengths finds (what the collate relies on)."""
    ordered = sorted(values, reverse=True)
    rows = best_fit_decreasing(ordered, limit)
    laid = sorted(range(len(ordered)), key=lambda i: (rows[i], i))
    flat = [ordered[i] for i in laid]
    expected = [
        number for number, i in enumerate(laid) if number == 0 or rows[i] != rows[laid[number - 1]]
    ]
    assert row_starts(flat, limit) == expected
    for row in set(rows):
        members = [ordered[i] for i in range(len(ordered)) if rows[i] == row]
        assert sum(members) <= limit or len(members) == 1


def test_best_fit_takes_the_tightest_row() -> None:
    # 6 opens row 0 (room 4), 5 opens row 1 (room 5), 4 goes to row 0 (room 4 is the
    # tightest that fits), 3 to row 1 (room 5), 2 to row 1 (room 2).
    assert best_fit_decreasing([6, 5, 4, 3, 2], 10) == [0, 1, 0, 1, 1]
    assert best_fit_decreasing([12, 3, 0], 10) == [0, 1, 1]  # 12 alone, closed at once


def planned_rows(sampler: DistributedPackedBatchSampler) -> set[tuple[int, ...]]:
    """The rows of the epoch order's own batches, as tuples of dataset indices."""
    order = sampler.order()
    values = sampler.lengths.tolist()
    starts = torch.cat([order.starts(chunk) for chunk in range(order.chunks)]).tolist()
    found = set()
    for lo, hi in zip(starts, [*starts[1:], order.size], strict=True):
        batch = order.at(torch.arange(lo, hi)).tolist()
        cuts = row_starts([values[i] for i in batch], sampler.max_length)
        for a, b in zip(cuts, [*cuts[1:], len(batch)], strict=True):
            found.add(tuple(batch[a:b]))
    return found


@pytest.mark.parametrize("world", [3, 5])
def test_a_cut_batch_is_cut_between_rows(world: int) -> None:
    """tail="uneven" cuts batches to make the count divide: between rows, so the collate
    reads the planned rows back, none cut in two."""
    lengths = [5] * 10 + [3] * 10  # ten rows [5, 3] of 8 tokens; batches of 3 rows
    samplers = [
        build(lengths, 8, 3, world, rank, shuffle=False, window=20) for rank in range(world)
    ]
    found = [list(sampler) for sampler in samplers]
    assert len({len(share) for share in found}) == 1
    planned = planned_rows(samplers[0])
    assert len(planned) == 10
    for share in found:
        for batch in share:
            values = [lengths[i] for i in batch]
            cuts = row_starts(values, 8)
            rows = [tuple(batch[a:b]) for a, b in zip(cuts, [*cuts[1:], len(batch)], strict=True)]
            assert set(rows) <= planned, (batch, rows)


@pytest.mark.parametrize("other", [1, 2, 5])
def test_a_state_resumes_on_another_world_size(other: int) -> None:
    lengths = [(i * 71) % 900 + 1 for i in range(1500)]
    first = [
        build(lengths, 1024, 4, 3, rank, cost=TokenCost("sum", quadratic=64)) for rank in range(3)
    ]
    iterators = [iter(sampler) for sampler in first]
    seen = [index for it in iterators for _ in range(7) for index in next(it)]
    state = first[0].state_dict()
    assert all(sampler.state_dict() == state for sampler in first)
    assert state["max_length"] == 1024 and state["rows_per_batch"] == 4
    assert state["cost"] == "sum, quadratic=64"
    for rank in range(other):
        sampler = build(lengths, 1024, 4, other, rank, cost=TokenCost("sum", quadratic=64))
        sampler.load_state_dict(state)
        seen += [index for batch in sampler for index in batch]
    assert sorted(seen) == list(range(len(lengths)))


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        ({"max_length": 512}, "max_length"),
        ({"rows": 2}, "rows_per_batch"),
        ({"cost": TokenCost("sum", quadratic=9)}, "cost"),
    ],
)
def test_a_state_of_other_settings_is_refused_naming_the_field(changed, field) -> None:
    lengths = list(range(1, 400))
    sampler = build(lengths, 1024, 4, 2, 0)
    next(iter(sampler))
    state = sampler.state_dict()
    settings = {"max_length": 1024, "rows": 4, "cost": "sum", **changed}
    other = build(lengths, settings["max_length"], settings["rows"], 2, 0, cost=settings["cost"])
    with pytest.raises(ValueError, match=f"'{field}'"):
        other.load_state_dict(state)


@pytest.mark.parametrize(
    ("arguments", "error", "said"),
    [
        ({"max_length": 0}, ValueError, "max_length must be at least 1, got 0"),
        ({"rows_per_batch": 0}, ValueError, "rows_per_batch must be at least 1, got 0"),
        ({"cost": "padded"}, ValueError, "cost must be summed .* got 'padded'"),
        ({"cost": TokenCost("padded", quadratic=4)}, ValueError, "got 'padded, quadratic=4'"),
    ],
)
def test_bad_arguments_are_named(arguments, error, said) -> None:
    values = {"max_length": 16, "rows_per_batch": 2, **arguments}
    with pytest.raises(error, match=said):
        DistributedPackedBatchSampler([1, 2, 3], num_replicas=1, rank=0, **values)


def test_a_sample_longer_than_a_row_is_a_row_of_its_own_with_a_warning() -> None:
    lengths = [4, 25, 6, 3]
    with pytest.warns(UserWarning, match=r"1 sample\(s\) are longer than max_length=10 .*25 tok"):
        sampler = DistributedPackedBatchSampler(lengths, 10, 2, 1, 0, shuffle=False, window=4)
    rows = [row for batch in sampler for row in rows_of(lengths, batch, 10)]
    assert sorted(rows) == [[3], [6, 4], [25]]


# --- the collate ---------------------------------------------------------------------------


class Tokens(torch.utils.data.Dataset):
    """Sample ``i``: ``lengths[i]`` token ids, ``1000 * i + position``."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.arange(self.lengths[index]) + 1000 * index}


def test_a_dataloader_gives_rows_of_max_length_and_their_boundaries() -> None:
    lengths = [(i * 37) % 60 + 1 for i in range(300)]
    sampler = build(lengths, 64, 3, 2, 1)
    expected = list(build(lengths, 64, 3, 2, 1))
    loader = DataLoader(
        Tokens(lengths),
        batch_sampler=sampler,
        collate_fn=functools.partial(packed_collate, max_length=64, pad_id=-1),
    )
    for batch, indices in zip(loader, expected, strict=True):
        ids, positions, bounds = batch["input_ids"], batch["position_ids"], batch["cu_seqlens"]
        assert ids.shape[1] == 64 and 1 <= ids.shape[0] <= 3
        assert bounds.dtype == torch.int32 and int(bounds[-1]) == ids.numel()
        flat, places = ids.view(-1), positions.view(-1)
        segments = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        padding = [(lo, hi) for lo, hi in segments if int(flat[lo]) == -1]
        assert all(set(flat[lo:hi].tolist()) == {-1} for lo, hi in padding)
        samples = [(lo, hi) for lo, hi in segments if int(flat[lo]) != -1]
        assert len(samples) == len(indices)
        for (lo, hi), index in zip(samples, indices, strict=True):
            assert flat[lo:hi].tolist() == (torch.arange(lengths[index]) + 1000 * index).tolist()
            assert places[lo:hi].tolist() == list(range(lengths[index]))
        assert batch["seq_lens"].tolist() == [lengths[i] for i in indices]


def test_the_flattened_layout_is_data_collator_with_flattening_s() -> None:
    packed = packed_collate([[5, 6, 7], [8, 9]], 8, rows=False)
    assert packed["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert packed["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert packed["cu_seqlens"].tolist() == [0, 3, 5]
    assert packed["max_seqlen"] == 3
    rowed = packed_collate([[5, 6, 7], [8, 9], [4, 4, 4, 4]], 6, pad_id=-1)
    assert rowed["input_ids"].tolist() == [[5, 6, 7, 8, 9, -1], [4, 4, 4, 4, -1, -1]]
    assert rowed["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    assert rowed["cu_seqlens"].tolist() == [0, 3, 5, 6, 10, 12]
    assert rowed["row_starts"].tolist() == [0, 2]


def block_diagonal(bounds: torch.Tensor, size: int, causal: bool) -> torch.Tensor:
    """The boolean mask letting each token attend only within its own segment."""
    segment = torch.zeros(size, dtype=torch.int64)
    segment[bounds[1:-1].long()] = 1
    segment = torch.cumsum(segment, 0)
    mask = segment.unsqueeze(0) == segment.unsqueeze(1)
    if causal:
        mask &= torch.ones(size, size, dtype=torch.bool).tril()
    return mask


@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_a_packed_row_equals_attention_over_each_sample(causal: bool) -> None:
    torch.manual_seed(0)
    lengths = [(i * 29) % 40 + 1 for i in range(60)]
    sampler = build(lengths, 48, 2, 1, 0)
    width, heads = 16, 2
    table = torch.nn.Embedding(1000 * len(lengths) + 100, heads * width)
    collate = functools.partial(packed_collate, max_length=48)
    for indices in list(sampler)[:6]:
        batch = collate([Tokens(lengths)[i] for i in indices])
        ids, bounds = batch["input_ids"], batch["cu_seqlens"]
        flat = table(ids.view(-1)).detach()
        x = flat.view(-1, heads, width).transpose(0, 1)  # heads, tokens, width
        mask = block_diagonal(bounds, flat.shape[0], causal)
        packed = F.scaled_dot_product_attention(x, x * 0.5, x + 1.0, attn_mask=mask)
        for index in indices:
            lo = int((ids.view(-1) == 1000 * index).nonzero()[0])
            hi = lo + lengths[index]
            alone = table(torch.arange(lengths[index]) + 1000 * index).detach()
            y = alone.view(-1, heads, width).transpose(0, 1)
            expected = F.scaled_dot_product_attention(y, y * 0.5, y + 1.0, is_causal=causal)
            torch.testing.assert_close(packed[:, lo:hi], expected, rtol=1e-5, atol=1e-5)


# --- efficiency on the finding's data -----------------------------------------------------


@pytest.mark.parametrize("data", ["lognormal", "torch source files"])
def test_packing_fills_at_least_98_percent_of_the_rows(data: str) -> None:
    from studies.findings.token_batches import CONTEXT_ROWS, datasets

    lengths = datasets()[data]
    values = lengths.tolist()
    rows = real = 0
    for share in shares(lengths, CONTEXT_ROWS[0], CONTEXT_ROWS[1], 4):
        for batch in share:
            rows += len(rows_of(values, batch, CONTEXT_ROWS[0]))
            real += sum(values[i] for i in batch)
    assert real / (rows * CONTEXT_ROWS[0]) >= 0.98


def test_a_row_longer_than_max_length_widens_the_rows() -> None:
    packed = packed_collate([[1] * 12, [2] * 3], 10, pad_id=-1)
    assert packed["input_ids"].shape == (2, 12)
    assert packed["cu_seqlens"].tolist() == [0, 12, 15, 24]
    assert packed["row_starts"].tolist() == [0, 1]


def test_a_packed_sampler_pickles_without_its_plans() -> None:
    import pickle

    sampler = build(list(range(1, 300)), 512, 3, 2, 1, cost=TokenCost("sum", quadratic=16))
    first = list(sampler)
    copy = pickle.loads(pickle.dumps(sampler))
    copy.set_epoch(0)
    assert list(copy) == first
    assert repr(copy).startswith("DistributedPackedBatchSampler(dataset length=299, max_length=512")
