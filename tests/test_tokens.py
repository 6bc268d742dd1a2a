"""DistributedTokenBatchSampler: budget, equal counts, exactly once, tails, determinism, resume.

Properties are checked against what the ranks actually yield, with the expectations
computed here from the lengths (costs, counts, coverage), not read from the layout.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import samplers.tokens.arrays as token_arrays
import samplers.tokens.order as token_order
from samplers import DistributedTokenBatchSampler, SamplerWarning
from samplers.tokens.order import TokenOrder

TAILS = ("uneven", "pad", "drop")


def build(lengths: Any, max_tokens: int, world: int, rank: int, **options: Any):
    """A sampler for ``rank`` (an ``epoch`` option is set with ``set_epoch``)."""
    at = options.pop("epoch", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        sampler = DistributedTokenBatchSampler(lengths, max_tokens, world, rank, **options)
    if at is not None:
        sampler.set_epoch(at)
    return sampler


def epoch(lengths: Any, max_tokens: int, world: int, **options: Any) -> list[list[list[int]]]:
    """What each rank yields in one epoch (``epoch`` option: set_epoch before)."""
    shares = []
    options.setdefault("epoch", 0)
    for rank in range(world):
        sampler = build(lengths, max_tokens, world, rank, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SamplerWarning)
            shares.append(list(sampler))
    return shares


def cost(lengths: list[int], batch: list[int], kind: str = "padded") -> int:
    values = [lengths[i] for i in batch]
    return max(values) * len(values) if kind == "padded" else sum(values)


def order_batches(sampler: DistributedTokenBatchSampler) -> list[int]:
    """Sizes of the epoch order's own batches (before the layout cuts or pads any)."""
    order = sampler.order()
    starts = torch.cat([order.starts(chunk) for chunk in range(order.chunks)])
    return torch.diff(starts, append=torch.tensor([order.size])).tolist()


@st.composite
def setups(draw: st.DrawFn, max_size: int = 300) -> dict[str, Any]:
    size = draw(st.integers(0, max_size))
    spread = draw(st.sampled_from([1, 4, 40, 400]))
    lengths = draw(st.lists(st.integers(0, spread), min_size=size, max_size=size))
    return {
        "lengths": lengths,
        "max_tokens": draw(st.sampled_from([1, 3, 16, 100, 1000])),
        "world": draw(st.integers(1, 9)),
        "tail": draw(st.sampled_from(TAILS)),
        "cost": draw(st.sampled_from(["padded", "sum"])),
        "window": draw(st.sampled_from([None, 1, 3, 17, 10_000])),
        "seed": draw(st.integers(0, 2**32)),
        "epoch": draw(st.integers(0, 5)),
        "shuffle": draw(st.booleans()),
    }


def options(setup: dict[str, Any]) -> dict[str, Any]:
    return {k: setup[k] for k in ("tail", "cost", "window", "seed", "epoch", "shuffle")}


# --- one epoch ---------------------------------------------------------------------------


@given(setups())
def test_every_batch_is_within_the_budget_or_a_single_long_sample(setup) -> None:
    lengths, budget = setup["lengths"], setup["max_tokens"]
    for share in epoch(lengths, budget, setup["world"], **options(setup)):
        for batch in share:
            assert batch, "an empty batch"
            assert cost(lengths, batch, setup["cost"]) <= budget or len(batch) == 1


@given(setups())
def test_every_rank_yields_the_same_number_of_batches(setup) -> None:
    world = setup["world"]
    shares = epoch(setup["lengths"], setup["max_tokens"], world, **options(setup))
    counts = [len(share) for share in shares]
    if setup["tail"] != "uneven" or len(set(counts)) == 1:
        assert len(set(counts)) == 1
        return
    # "uneven" only when too few of the order's batches have two samples to cut.
    assert max(counts) - min(counts) == 1
    assert counts == sorted(counts, reverse=True)
    sampler = build(setup["lengths"], setup["max_tokens"], world, 0, **options(setup))
    cuttable = sum(size >= 2 for size in order_batches(sampler))
    assert cuttable < world - 1


@given(setups())
def test_len_is_what_each_rank_yields(setup) -> None:
    world = setup["world"]
    shares = epoch(setup["lengths"], setup["max_tokens"], world, **options(setup))
    for rank, share in enumerate(shares):
        sampler = build(setup["lengths"], setup["max_tokens"], world, rank, **options(setup))
        assert len(sampler) == len(share)


@given(setups())
def test_tail_policies(setup) -> None:
    lengths, world, tail = setup["lengths"], setup["world"], setup["tail"]
    shares = epoch(lengths, setup["max_tokens"], world, **options(setup))
    seen = Counter(i for share in shares for batch in share for i in batch)
    size = len(lengths)
    if tail == "uneven":
        assert seen == Counter(range(size))
    elif tail == "pad":
        assert set(seen) == set(range(size))
        repeated = [i for i, n in seen.items() if n > 1]
        # The padding is whole batches of the epoch's head: fewer than `world` of them.
        last_step = [share[-1] for share in shares if share]
        assert len(repeated) <= sum(len(batch) for batch in last_step)
    else:
        assert max(seen.values(), default=1) == 1
        sampler = build(lengths, setup["max_tokens"], world, 0, **options(setup))
        sizes = order_batches(sampler)
        batches = sum(len(share) for share in shares)
        assert len(sizes) - batches < world  # fewer than W of the order's batches dropped


@given(setups(), st.integers(0, 3))
def test_identical_on_every_construction_without_communication(setup, epoch_shift) -> None:
    first = epoch(setup["lengths"], setup["max_tokens"], setup["world"], **options(setup))
    again = epoch(setup["lengths"], setup["max_tokens"], setup["world"], **options(setup))
    assert first == again
    as_tensor = epoch(
        torch.tensor(setup["lengths"], dtype=torch.int64),
        setup["max_tokens"],
        setup["world"],
        **options(setup),
    )
    assert as_tensor == first


def test_epochs_reshuffle_and_the_order_does_not_depend_on_the_world_size() -> None:
    lengths = torch.randint(1, 500, (3000,), generator=torch.Generator().manual_seed(1))
    zero = epoch(lengths.tolist(), 2000, 1, epoch=0)[0]
    one = epoch(lengths.tolist(), 2000, 1, epoch=1)[0]
    assert zero != one
    # With W ranks, step k deals the k-th run of W batches of the same order.
    for world in (2, 3, 8):
        shares = epoch(lengths.tolist(), 2000, world, epoch=0)
        dealt = [i for step in zip(*shares, strict=True) for batch in step for i in batch]
        single = [i for batch in zero for i in batch]
        assert dealt == single[: len(dealt)]


def test_neighbouring_batches_cost_about_the_same() -> None:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.exp(torch.randn(20_000, generator=generator) * 0.9 + 6).clamp(1, 4096)
    values = lengths.long().tolist()
    for world in (4, 8):
        shares = epoch(values, 16384, world)
        steps = [[cost(values, batch) for batch in step] for step in zip(*shares, strict=True)]
        worst = sum(max(step) for step in steps)
        mean = sum(sum(step) / world for step in steps)
        assert worst / mean <= 1.05


@pytest.mark.parametrize("kind", ["padded", "sum"])
def test_order_is_the_same_whatever_the_chunking_and_the_sort(monkeypatch, kind) -> None:
    lengths = torch.randint(0, 300, (5000,), generator=torch.Generator().manual_seed(2))

    def planned() -> tuple[torch.Tensor, torch.Tensor, int]:
        made = TokenOrder(lengths, 1000, kind, 37, shuffle=True, seed=3, epoch=1)
        starts = torch.cat([made.starts(c) for c in range(made.chunks)])
        return made.materialise(), starts, made.chunks

    expected = planned()
    assert expected[2] == 1
    # Windows sorted by the radix sort (lengths up to RADIX_LONGEST) or by torch's sort;
    # chunks of 100 samples (longest 299) divide the budget by each length, larger ones
    # read a table of every length up to the longest; without numpy, torch alone.
    cases = ((100, -1, True), (100, 2**16 - 1, True), (10**6, -1, True), (100, 2**16 - 1, False))
    for chunk, radix, with_numpy in cases:
        monkeypatch.setattr(token_order, "CHUNK_SAMPLES", chunk)
        monkeypatch.setattr(token_arrays, "RADIX_LONGEST", radix)
        monkeypatch.setattr(token_arrays, "numpy", np if with_numpy else None)
        order, starts, chunks = planned()
        assert (chunks == 1) == (chunk > 5000)
        assert torch.equal(order, expected[0]) and torch.equal(starts, expected[1])


def test_the_sampler_needs_only_torch() -> None:
    """Planned with numpy hidden (a fresh interpreter where ``import numpy`` fails): the
    same batches and the same digest of the lengths as here, with numpy."""
    script = (
        "import sys; sys.modules['numpy'] = None\n"
        "import warnings, json, torch\n"
        "warnings.simplefilter('ignore')\n"
        "import samplers.tokens.arrays as o\n"
        "assert o.numpy is None\n"
        "from samplers import DistributedTokenBatchSampler\n"
        "lengths = torch.randint(0, 70000, (3000,), generator=torch.Generator().manual_seed(5))\n"
        "lengths[::2] %= 300\n"
        "s = DistributedTokenBatchSampler(lengths, 90000, 3, 1, cost='sum', window=101)\n"
        "print(json.dumps([list(s), s.length_digest]))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    batches, digest = json.loads(done.stdout)
    lengths = torch.randint(0, 70000, (3000,), generator=torch.Generator().manual_seed(5))
    lengths[::2] %= 300
    here = build(lengths, 90000, 3, 1, cost="sum", window=101)
    assert batches == list(here) and len(batches) > 1
    little_endian = lengths.numpy().astype("<i8").tobytes()
    expected = hashlib.blake2b(little_endian, digest_size=16).hexdigest()
    assert digest == here.length_digest == expected


def test_the_first_batch_plans_only_the_first_chunk(monkeypatch) -> None:
    monkeypatch.setattr(token_order, "CHUNK_SAMPLES", 1000)
    lengths = torch.randint(1, 100, (50_000,), generator=torch.Generator().manual_seed(0))
    sampler = build(lengths, 1000, 4, 1, window=100)
    next(iter(sampler))
    order = sampler.order()
    # 500 windows of 100: a first chunk of 10 windows, then chunks of 4 x 10 windows.
    assert token_order.CHUNK_GROWTH == 4
    assert order.chunks == 1 + math.ceil(490 / 40) == 14
    assert [order.chunk_bounds(c) for c in (0, 1, 13)] == [(0, 1000), (1000, 5000), (49000, 50000)]
    assert [order.chunk_of(p) for p in (0, 999, 1000, 4999, 5000, 49999)] == [0, 0, 1, 1, 2, 13]
    assert len(order._starts) <= 2
    assert not sampler.layout()._final
    assert len(sampler) == sampler.layout().count(1)  # len() plans the rest
    assert len(order._starts) == 14


# --- arguments ---------------------------------------------------------------------------


def test_long_samples_are_kept_alone_and_reported() -> None:
    lengths = [5, 50, 5, 5, 70, 5]
    with pytest.warns(UserWarning, match=r"2 sample\(s\) are longer than max_tokens=20"):
        sampler = DistributedTokenBatchSampler(lengths, 20, 1, 0)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert [1] in batches and [4] in batches


@pytest.mark.parametrize(
    ("lengths", "error", "match"),
    [
        ([1, -2, 3], ValueError, r"lengths\[1\] = -2"),
        ([1.5, 2.0], TypeError, "integers, got dtype torch.float"),
        ([[1, 2]], ValueError, "one-dimensional"),
        ([True, False], TypeError, "integers"),
        (5, TypeError, "sequence, numpy array or tensor"),
    ],
)
def test_bad_lengths_are_named(lengths, error, match) -> None:
    with pytest.raises(error, match=match):
        DistributedTokenBatchSampler(lengths, 10, 1, 0)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
        ({"tail": "wrap"}, "tail must be one of 'pad', 'drop', 'uneven', got 'wrap'"),
        ({"cost": "max"}, "cost must be one of 'padded', 'sum', got 'max'"),
        ({"window": 0}, "window must be at least 1, got 0"),
        ({"rank": 2}, "rank must be in"),
    ],
)
def test_bad_arguments_are_named(changes, match) -> None:
    arguments: dict[str, Any] = {"max_tokens": 10, "num_replicas": 2, "rank": 0, **changes}
    with pytest.raises(ValueError, match=match):
        DistributedTokenBatchSampler([1, 2, 3], **arguments)


def test_lengths_are_copied_and_numpy_works() -> None:
    numpy = pytest.importorskip("numpy")
    values = numpy.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=numpy.int64)
    sampler = DistributedTokenBatchSampler(values, 10, 2, 0)
    before = list(sampler)
    values[:] = 0
    sampler.set_epoch(0)
    assert list(sampler) == before
    assert sampler.lengths.dtype == torch.int32


def test_a_dataloader_with_workers_sees_each_epoch_once() -> None:
    lengths = list(range(1, 41))
    sampler = build(lengths, 60, 2, 1, auto_epoch=True)
    loader = DataLoader(range(40), batch_sampler=sampler, num_workers=1)
    first = [batch.tolist() for batch in loader]
    second = [batch.tolist() for batch in loader]
    expected = [epoch(lengths, 60, 2, epoch=e)[1] for e in (0, 1)]
    assert [first, second] == expected
    assert sampler.epoch == 1


def test_unequal_counts_warn() -> None:
    with pytest.warns(UserWarning, match=r"gives ranks 0 or 1 batches"):
        sampler = DistributedTokenBatchSampler([1, 1], 10, 3, 2)
        assert list(sampler) == []


# --- resume ------------------------------------------------------------------------------


@given(setups(max_size=120), st.integers(1, 9), st.sampled_from(["first", "middle", "last"]))
def test_resume_on_another_world_size_continues_the_epoch(setup, other, when) -> None:
    lengths, budget, world = setup["lengths"], setup["max_tokens"], setup["world"]
    opts = options(setup)
    at = opts.pop("epoch")
    full = epoch(lengths, budget, world, epoch=at, **opts)
    fewest = min(len(share) for share in full)
    steps = {"first": 0, "middle": fewest // 2, "last": fewest}[when]
    taken, states = [], []
    for rank in range(world):
        sampler = build(lengths, budget, world, rank, **opts)
        sampler.set_epoch(at)
        with warnings.catch_warnings():
            # tail="uneven" warns when ranks get different numbers of batches; expected
            # here, and asserted in test_unequal_counts_warn.
            warnings.filterwarnings("ignore", r".*\(tail='uneven'\) gives ranks", SamplerWarning)
            iterator = iter(sampler)
        taken.append([next(iterator) for _ in range(steps)])
        states.append(json.loads(json.dumps(sampler.state_dict())))
    assert all(state == states[0] for state in states), "states differ across ranks"
    rest = []
    for rank in range(other):
        resumed = build(lengths, budget, other, rank, **opts)
        resumed.load_state_dict(states[0])
        resumed.set_epoch(at)
        expected = len(resumed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SamplerWarning)
            rest.append(list(resumed))
        assert len(rest[-1]) == expected
    seen = Counter(i for part in (*taken, *rest) for batch in part for i in batch)
    if setup["tail"] == "uneven":
        assert seen == Counter(range(len(lengths)))
    elif setup["tail"] == "drop":
        assert max(seen.values(), default=1) == 1
    else:
        assert set(seen) == set(range(len(lengths)))
    if other == world:  # the same world size: exactly the rest of the uninterrupted epoch
        assert rest == [share[steps:] for share in full]
    counts = {len(part) for part in rest}
    if setup["tail"] != "uneven":
        assert len(counts) <= 1


def test_a_finished_epoch_state() -> None:
    lengths = list(range(1, 30))
    sampler = build(lengths, 50, 2, 0)
    batches = list(sampler)
    state = sampler.state_dict()
    assert state["finished"] and state["epoch"] == 0
    later = build(lengths, 50, 2, 1)
    later.load_state_dict(state)
    assert len(later) == 0
    later.set_epoch(0)
    assert list(later) == []
    later.load_state_dict(state)
    later.set_epoch(1)
    assert list(later) == epoch(lengths, 50, 2, epoch=1)[1]
    auto = build(lengths, 50, 2, 0, auto_epoch=True)
    auto.load_state_dict(state)
    assert list(auto) == epoch(lengths, 50, 2, epoch=1)[0] and auto.epoch == 1
    assert batches == epoch(lengths, 50, 2)[0]


def test_consumed_counts_what_the_loop_took() -> None:
    lengths = list(range(1, 80))
    sampler = build(lengths, 100, 2, 0)
    iterator = iter(sampler)
    for _ in range(4):
        next(iterator)
    state = sampler.state_dict(consumed=2)
    resumed = build(lengths, 100, 2, 0)
    resumed.load_state_dict(state)
    assert list(resumed) == epoch(lengths, 100, 2)[0][2:]
    with pytest.raises(ValueError, match=r"consumed must be at most 4"):
        sampler.state_dict(consumed=5)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("max_tokens", 99, "'max_tokens' is 99, this sampler's is 100"),
        ("window", 3, "'window' is 3"),
        ("length_sum", 1, "'length_sum' is 1"),
        ("cost", "sum", "'cost' is 'sum'"),
        ("version", 3, "reads state versions 1 and 2"),
        ("position", "3", "'position' must be int"),
        ("sampler", "DistributedSampler", "kind of sampler"),
    ],
)
def test_a_state_that_does_not_fit_is_refused(field, value, match) -> None:
    sampler = build(list(range(1, 20)), 100, 2, 0)
    state = sampler.state_dict()
    with pytest.raises(ValueError, match=match):
        build(list(range(1, 20)), 100, 2, 0).load_state_dict({**state, field: value})
    missing = dict(state)
    del missing[field]
    with pytest.raises(ValueError, match=f"'{field}' is missing"):
        build(list(range(1, 20)), 100, 2, 0).load_state_dict(missing)


def test_a_sampler_pickles_without_its_plans() -> None:
    sampler = build(list(range(1, 200)), 300, 2, 0)
    first = list(sampler)
    copy = pickle.loads(pickle.dumps(sampler))
    copy.set_epoch(0)
    assert list(copy) == first


# --- the guarantee kit -------------------------------------------------------------------


def kit_factory(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    """The sampler as the guarantee kit builds it: lengths derived from the dataset size."""
    lengths = [(index * 37) % 50 + 1 for index in range(len(dataset))]
    return DistributedTokenBatchSampler(lengths, 128, num_replicas, rank, seed=seed)


@pytest.mark.parametrize(
    "guarantee",
    [
        "len-matches-iteration",
        "equal-batch-counts",
        "exactly-once",
        "reshuffles-with-set-epoch",
        "resumes-same-world-size",
        "resumes-other-world-size",
    ],
)
def test_the_guarantee_kit_checks_it(guarantee) -> None:
    from samplers.testing import CHECKS, Configuration

    for size, world, taken, other in ((40, 3, 2, 2), (301, 4, 5, 7), (1000, 8, 9, 3)):
        configuration = Configuration(
            dataset_size=size, world_size=world, epoch=1, taken=taken, other_world_size=other
        )
        CHECKS[guarantee](kit_factory, configuration)  # raises a Violation if it fails


@pytest.mark.parametrize("with_numpy", [True, False])
@pytest.mark.parametrize("clamped", [True, False])
@pytest.mark.parametrize("count, window", [(0, 5), (1, 1), (7, 3), (100, 7), (1000, 10), (999, 1)])
def test_following_every_windows_chain_at_once_equals_one_link_at_a_time(
    monkeypatch: pytest.MonkeyPatch, with_numpy: bool, clamped: bool, count: int, window: int
) -> None:
    """:func:`follow` (numpy: all windows' chains in lockstep from 8 windows on; else one
    Python step per link) gives each window's chain from its first position, one window
    after the other, at the windows' edges too: whether the links stop at their window's
    end or pass it (a batch cut by the window's end)."""
    monkeypatch.setattr(token_arrays, "numpy", np if with_numpy else None)
    generator = torch.Generator().manual_seed(count + window)
    local = torch.arange(count)
    window_end = torch.clamp((local // window + 1) * window, max=count)
    after = local + torch.randint(1, 2 * window + 1, (count,), generator=generator)
    if clamped:
        after = torch.minimum(after, window_end)
    expected = []
    for head in range(0, count, window):
        position = head
        while position < min(head + window, count):
            expected.append(position)
            position = int(after[position])
    if clamped:  # the single chain from 0, one link at a time
        single, position = [], 0
        while position < count:
            single.append(position)
            position = int(after[position])
        assert single == expected
    found = token_arrays.follow(after, count, window)
    assert found.dtype == torch.int64 and found.tolist() == expected
    # The same links as batch sizes read from a table by length, at the chains only.
    lengths = torch.randint(0, 50, (count,), generator=generator, dtype=torch.int16)
    table = torch.randint(1, 2 * window + 1, (50,), generator=generator)
    links = local + table[lengths.long()]
    if clamped:
        links = torch.minimum(links, window_end)
        table = torch.clamp(table, max=window)  # a batch never holds more than a window
    sized = token_arrays.follow(table, count, window, lengths)
    assert sized.tolist() == token_arrays.follow(links, count, window).tolist()
