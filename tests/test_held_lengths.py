"""The token sampler's lengths: checked at once, copied when first needed, never changed
under it (:mod:`samplers.tokens.held`)."""

from __future__ import annotations

import copy
import itertools
import pickle
import threading
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import samplers.tokens.held as held
import samplers.tokens.order as token_order
from samplers import DistributedTokenBatchSampler
from samplers.tokens.held import HeldLengths


def _lengths(size: int = 5000, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, 200, (size,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Epochs of several chunks at a few thousand samples."""
    monkeypatch.setattr(token_order, "CHUNK_SAMPLES", 500)


@pytest.mark.parametrize("with_numpy", [True, False])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_the_check_gives_the_exact_largest_and_sum(
    monkeypatch: pytest.MonkeyPatch, with_numpy: bool, dtype: torch.dtype
) -> None:
    monkeypatch.setattr(held, "numpy", np if with_numpy else None)
    monkeypatch.setattr(held, "SCAN_SAMPLES", 7)  # several parts, the last one short
    values = _lengths(100).to(dtype)
    found = HeldLengths(values)
    assert (found.longest, found.total, found.size) == (int(values.max()), int(values.sum()), 100)
    owned = found.owned()
    assert owned.dtype == torch.int16 and torch.equal(owned, values.to(torch.int16))
    assert HeldLengths(torch.zeros(0, dtype=dtype)).owned().numel() == 0


@pytest.mark.parametrize("with_numpy", [True, False])
@pytest.mark.parametrize(
    "longest, held_dtype, widened_dtype",
    [
        (0, torch.int16, torch.int32),
        (2**15 - 1, torch.int16, torch.int32),
        (2**15, torch.int32, torch.int32),
        (2**31 - 1, torch.int32, torch.int32),
        (2**31, torch.int64, torch.int64),
    ],
)
def test_the_copy_is_the_smallest_dtype_holding_the_longest_and_widened_for_users(
    monkeypatch: pytest.MonkeyPatch,
    with_numpy: bool,
    longest: int,
    held_dtype: torch.dtype,
    widened_dtype: torch.dtype,
) -> None:
    """int16 below 2**15 (the random reads of a chunk's lengths touch half the memory),
    int32 below 2**31, else int64; :meth:`widened` (what ``sampler.lengths`` returns) is a
    new tensor of at least int32, so arithmetic on it does not wrap at 32767."""
    monkeypatch.setattr(held, "numpy", np if with_numpy else None)
    values = torch.tensor([3, longest, 0, 7], dtype=torch.int64)
    found = HeldLengths(values)
    owned, widened = found.owned(), found.widened()
    assert owned.dtype == held_dtype and torch.equal(owned.to(torch.int64), values)
    assert widened.dtype == widened_dtype and torch.equal(widened.to(torch.int64), values)
    widened[1] = 5  # a copy: the sampler's lengths are not changed through it
    assert int(found.owned()[1]) == longest and int(found.widened()[1]) == longest
    sampler = DistributedTokenBatchSampler(values, max(longest, 7), 1, 0)
    assert sampler.lengths.dtype == widened_dtype
    assert torch.equal(sampler.lengths.to(torch.int64), values)


@pytest.mark.parametrize("with_numpy", [True, False])
def test_a_negative_length_is_named_and_a_huge_one_is_kept_in_int64(
    monkeypatch: pytest.MonkeyPatch, with_numpy: bool
) -> None:
    monkeypatch.setattr(held, "numpy", np if with_numpy else None)
    monkeypatch.setattr(held, "SCAN_SAMPLES", 4)
    values = _lengths(20)
    values[13] = -2
    with pytest.raises(ValueError, match=r"lengths\[13\] = -2"):
        HeldLengths(values)
    values[13] = 2**40
    found = HeldLengths(values)
    assert (found.longest, found.total) == (2**40, int(values.sum()))
    assert found.owned().dtype == torch.int64 and torch.equal(found.owned(), values)


def test_the_first_batch_reads_the_callers_tensor_and_gives_the_same_batches(
    small_chunks: None,
) -> None:
    lengths = _lengths()
    sampler = DistributedTokenBatchSampler(lengths, 600, 3, 2)
    copied_first = DistributedTokenBatchSampler(lengths, 600, 3, 2)
    assert copied_first.lengths.dtype == torch.int32  # its copy made before it plans
    iterator = iter(sampler)
    first = next(iterator)
    given = sampler._held.given  # not copied yet: one chunk planned
    assert given is not None and given.data_ptr() == lengths.data_ptr()
    assert sampler.order().chunks > 2
    rest = list(iterator)
    assert sampler._held.given is None  # copied at the second chunk
    assert [first, *rest] == list(copied_first)


def test_an_in_place_change_of_the_sum_before_the_copy_is_refused(small_chunks: None) -> None:
    lengths = _lengths()
    sampler = DistributedTokenBatchSampler(lengths, 600, 3, 2)
    iterator = iter(sampler)
    next(iterator)
    lengths[4000] += 1
    with pytest.raises(RuntimeError, match=r"summed to \d+ with the longest 199, now"):
        list(iterator)


def test_a_change_through_shared_numpy_memory_is_refused(small_chunks: None) -> None:
    values = _lengths().numpy().copy()
    sampler = DistributedTokenBatchSampler(values, 600, 3, 2)
    values[10] = 10_000  # torch.as_tensor shared the array
    with pytest.raises(RuntimeError, match=r"summed to \d+ with the longest 199, now"):
        sampler.state_dict()  # the digest needs the copy


def test_a_change_under_the_first_chunk_keeping_the_sum_is_refused(small_chunks: None) -> None:
    """Reversing the lengths keeps their sum and largest value, but the first chunk was
    planned from the old ones: a state taken now would resume onto other batches, so the
    copy is refused, naming a length that moved."""
    values = _lengths().numpy().copy()
    sampler = DistributedTokenBatchSampler(values, 600, 1, 0, seed=1)
    iterator = iter(sampler)
    [next(iterator) for _ in range(5)]
    values[:] = values[::-1].copy()
    with pytest.raises(RuntimeError, match=r"under samples it had already planned: lengths\["):
        sampler.state_dict()


def test_a_change_elsewhere_keeping_the_sum_reaches_every_plan_alike(small_chunks: None) -> None:
    """Lengths the first chunk did not read, swapped before the copy: the copy holds the
    swap, the state's digest is the copy's, and a run resumed from it on the new lengths
    (and another world size) hands out every sample exactly once."""
    values = _lengths().numpy().copy()
    sampler = DistributedTokenBatchSampler(values, 600, 1, 0, seed=1)
    iterator = iter(sampler)
    taken = [next(iterator) for _ in range(5)]
    read = set(sampler._held._read[0].tolist())
    outside = [k for k in range(values.size) if k not in read]
    i = outside[0]
    j = next(k for k in outside if values[k] != values[i])
    values[[i, j]] = values[[j, i]]
    state = sampler.state_dict()
    assert torch.equal(sampler.lengths, torch.as_tensor(values, dtype=torch.int32))
    resumed = [DistributedTokenBatchSampler(values.copy(), 600, 2, r, seed=1) for r in range(2)]
    for each in resumed:
        each.load_state_dict(state)
    handed = [i for batch in taken for i in batch]
    handed += [i for each in resumed for batch in each for i in batch]
    assert sorted(handed) == list(range(values.size))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.int32])
def test_narrow_lengths_give_the_int64_batches(small_chunks: None, dtype: Any) -> None:
    values = (_lengths().numpy() % 120).astype(dtype)
    sampler = DistributedTokenBatchSampler(values, 600, 3, 1)
    assert sampler.order().chunks > 2
    expected = list(DistributedTokenBatchSampler(values.astype(np.int64), 600, 3, 1))
    assert list(sampler) == expected


def test_lengths_built_in_inference_mode_or_viewed_in_a_larger_tensor_work(
    small_chunks: None,
) -> None:
    expected = list(DistributedTokenBatchSampler(_lengths(), 600, 3, 1))
    with torch.inference_mode():
        inferred = DistributedTokenBatchSampler(_lengths(), 600, 3, 1)
        listed = DistributedTokenBatchSampler(_lengths().tolist(), 600, 3, 1)
    table = torch.stack([_lengths(), _lengths(seed=1)], dim=1)
    column = DistributedTokenBatchSampler(table[:, 0], 600, 3, 1)
    iterator = iter(column)
    first = next(iterator)
    table[:, 1] += 1  # the same storage, not the lengths
    assert [first, *iterator] == list(inferred) == list(listed) == expected


def test_after_the_copy_the_callers_changes_do_not_reach_the_sampler(small_chunks: None) -> None:
    lengths = _lengths()
    sampler = DistributedTokenBatchSampler(lengths, 600, 3, 0)
    before = list(sampler)
    lengths.fill_(7)
    sampler.set_epoch(0)
    assert list(sampler) == before
    assert torch.equal(sampler.lengths, _lengths().to(torch.int32))


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))])
def test_copying_the_sampler_makes_its_copy_of_the_lengths_first(
    small_chunks: None, duplicate: Any
) -> None:
    lengths = _lengths()
    sampler = DistributedTokenBatchSampler(lengths, 600, 3, 1)
    next(iter(sampler))
    assert sampler._held.given is not None
    twin = duplicate(sampler)
    assert sampler._held.given is None and twin._held.given is None
    lengths.fill_(3)  # reaches neither
    expected = list(DistributedTokenBatchSampler(_lengths(), 600, 3, 1))
    for each in (sampler, twin):
        each.set_epoch(0)
        assert list(each) == expected


def test_threads_asking_for_the_copy_get_the_same_one() -> None:
    found = HeldLengths(_lengths(200_000))
    copies: list[torch.Tensor] = []
    threads = [threading.Thread(target=lambda: copies.append(found.owned())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(copies) == 4 and all(c is copies[0] for c in copies)


def test_a_token_order_takes_int32_positions_near_two_to_the_31() -> None:
    """The chunk arithmetic is 64-bit whatever the positions' dtype."""
    from samplers.tokens.order import TokenOrder

    size = 2**31 - 10
    lengths = torch.ones(1, dtype=torch.int32).expand(size)  # no memory of its size
    order = TokenOrder(lengths, 10, "padded", 1, shuffle=False, seed=0, epoch=0)
    position = size - 5
    wide = order.at(torch.tensor([position]))
    assert torch.equal(order.at(torch.tensor([position], dtype=torch.int32)), wide)


@pytest.mark.parametrize("with_numpy", [True, False])
@pytest.mark.parametrize(
    "changes",
    [
        {3000: -5, 3001: 10, 3002: 10},  # the same sum and largest, one length negative
        {3000: 5 + 2**32},  # a length an int32 copy would wrap to 5
        {3000: 5 + 2**16},  # a length the int16 copy would wrap to 5
    ],
)
def test_a_negative_or_wrapping_length_before_the_copy_is_refused(
    monkeypatch: pytest.MonkeyPatch, small_chunks: None, with_numpy: bool, changes: dict
) -> None:
    monkeypatch.setattr(held, "numpy", np if with_numpy else None)
    lengths = torch.full((4000,), 5)
    lengths[0] = 10
    sampler = DistributedTokenBatchSampler(lengths, 40, 1, 0, window=100)
    iterator = iter(sampler)
    next(iterator)
    for index, value in changes.items():
        lengths[index] = value
    changed = 20005 - 5 * len(changes) + sum(changes.values())
    match = "is negative" if -5 in changes.values() else f"now {changed} and {changed - 20000}"
    with pytest.raises(RuntimeError, match=match):
        list(iterator)


@pytest.mark.parametrize("with_numpy", [True, False])
def test_huge_lengths_are_summed_exactly_and_copied(
    monkeypatch: pytest.MonkeyPatch, with_numpy: bool
) -> None:
    monkeypatch.setattr(held, "numpy", np if with_numpy else None)
    values = torch.ones(2**16, dtype=torch.int64)
    values[[0, 1, 2**15, 2**15 + 1]] = 2**62  # two per part: a part's int64 sum overflows
    found = HeldLengths(values)
    assert (found.longest, found.total) == (2**62, 4 * 2**62 + 2**16 - 4)
    assert torch.equal(found.owned(), values)


@pytest.mark.parametrize("attempt", range(5))
def test_a_thread_reading_states_before_the_copy_changes_nothing(
    small_chunks: None, attempt: int
) -> None:
    """A checkpoint thread calling ``state_dict()`` while the loop plans its first chunks
    from the caller's tensor (the copy is made by whichever comes first): the same
    batches, and every state read loads."""
    expected = list(DistributedTokenBatchSampler(_lengths(), 600, 3, 1))
    sampler = DistributedTokenBatchSampler(_lengths(), 600, 3, 1)
    states: list[dict] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                states.append(sampler.state_dict())
            except BaseException as error:
                errors.append(error)
                return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        batches = list(sampler)
    finally:
        done.set()
        reader.join(timeout=60)
    assert not errors and batches == expected and states
    for state in states[:: max(1, len(states) // 5)]:
        DistributedTokenBatchSampler(_lengths(), 600, 2, 0).load_state_dict(state)


def test_a_dataloader_with_workers_and_auto_epoch_before_the_copy(small_chunks: None) -> None:
    from torch.utils.data import DataLoader

    lengths = _lengths()
    sampler = DistributedTokenBatchSampler(lengths, 600, 3, 1, auto_epoch=True)
    assert sampler._held.given is not None
    loader = DataLoader(range(lengths.numel()), batch_sampler=sampler, num_workers=2)
    epochs = [[batch.tolist() for batch in loader] for _ in range(2)]
    reference = DistributedTokenBatchSampler(_lengths(), 600, 3, 1)
    expected = []
    for epoch in range(2):
        reference.set_epoch(epoch)
        expected.append(list(reference))
    assert epochs == expected and sampler.epoch == 1 and sampler._held.given is None


@pytest.mark.parametrize("with_numpy", [True, False])
def test_lengths_held_in_int16_give_the_batches_warnings_and_states_of_int32(
    monkeypatch: pytest.MonkeyPatch, small_chunks: None, with_numpy: bool
) -> None:
    """Every token sampler plans the same batches, warns alike and saves the same state
    (its length digest too) from lengths held in int16 as from the same lengths held in
    int32, with budgets above 2**15 (which int16 cannot hold: a comparison with them
    must not wrap) and below it."""
    from samplers import DistributedMixtureTokenBatchSampler, DistributedPackedBatchSampler
    from samplers.tokens import arrays as token_arrays
    from samplers.tokens.cost import TokenCost

    monkeypatch.setattr(token_arrays, "numpy", np if with_numpy else None)
    monkeypatch.setattr(held, "numpy", np if with_numpy else None)
    lengths = torch.randint(1, 2**15, (3000,), generator=torch.Generator().manual_seed(4))
    lengths[::97] = 2**15 - 1
    builds = {
        "padded above 2**15": lambda: DistributedTokenBatchSampler(lengths, 70_000, 3, 1),
        "padded, over budget": lambda: DistributedTokenBatchSampler(lengths, 20_000, 3, 2),
        "sum": lambda: DistributedTokenBatchSampler(lengths, 100_000, 2, 0, cost="sum"),
        "quadratic": lambda: DistributedTokenBatchSampler(
            lengths, 90_000, 2, 1, cost=TokenCost("padded", quadratic=4096), tail="drop"
        ),
        "packed above 2**15": lambda: DistributedPackedBatchSampler(lengths, 40_000, 2, 3, 0),
        "packed, over length": lambda: DistributedPackedBatchSampler(lengths, 30_000, 2, 2, 1),
        "mixture": lambda: DistributedMixtureTokenBatchSampler(
            [range(1000), range(2000)], [1, 1], lengths, 50_000, 2, 1, epoch_length=2500
        ),
    }

    def run(build: Any, dtype: torch.dtype) -> tuple[Any, ...]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler = build()
            assert sampler._held.dtype == dtype
            sampler.set_epoch(1)
            iterator = iter(sampler)
            first = next(iterator)
            state = sampler.state_dict()  # mid-epoch: its length digest and position
            batches = [first, *iterator]
        return batches, [str(warning.message) for warning in caught], state

    int16 = {name: run(build, torch.int16) for name, build in builds.items()}
    monkeypatch.setattr(held, "_INT16_LIMIT", 0)  # held in int32 from here on
    for name, build in builds.items():
        assert run(build, torch.int32) == int16[name], name
    assert int16["padded, over budget"][1] and int16["packed, over length"][1]
    assert not int16["padded above 2**15"][1] and not int16["packed above 2**15"][1]


@pytest.mark.parametrize("value", [40_000, 70_000, 5 + 2**32, -5])
def test_a_length_the_first_chunk_reads_changed_past_the_built_ones_is_refused(
    value: int,
) -> None:
    """Changed before the first batch to a length the sampler was not built from (longer
    than the longest then, which the int16 copy would wrap to -25536 or 4464, or
    negative), a length the first chunk reads is refused, never planned from."""
    lengths = torch.full((70_000,), 10, dtype=torch.int64)
    sampler = DistributedTokenBatchSampler(lengths, 1000, 1, 0, window=1000)
    assert sampler._held.dtype == torch.int16 and sampler._held.given is not None
    index = int(sampler.order().permuted.between(0, 1000)[5])
    lengths[index] = value
    why = "negative" if value < 0 else r"longer than the longest then \(10\)"
    with pytest.raises(RuntimeError, match=rf"lengths\[{index}\] = {value} is {why}"):
        next(iter(sampler))
    lengths[index] = 10  # changed back: planned as built
    sampler.set_epoch(0)  # the same epoch again, on purpose
    assert next(iter(sampler)) == next(
        iter(DistributedTokenBatchSampler(lengths, 1000, 1, 0, window=1000))
    )


def _packed_samplers(lengths: Any) -> dict[str, Any]:
    from samplers import DistributedPackedBatchSampler, DistributedPackedMixtureSampler

    half = len(lengths) // 2
    return {
        "packed": DistributedPackedBatchSampler(lengths, 400, 2, 3, 2),
        "packed mixture": DistributedPackedMixtureSampler(
            [range(half), range(len(lengths) - half)], [2, 1], lengths, 400, 2, 3, 2
        ),
    }


@pytest.mark.parametrize("name", ["packed", "packed mixture"])
def test_the_packed_samplers_first_batch_reads_the_callers_tensor_as_the_token_samplers(
    name: str,
) -> None:
    """Building a packed sampler and planning its first chunk (one window) copies nothing;
    the copy comes with the next chunk, and the batches are those of a sampler that copied
    first."""
    lengths = _lengths(20_000)
    sampler = _packed_samplers(lengths)[name]
    copied_first = _packed_samplers(lengths)[name]
    copied_first._held.owned()
    iterator = iter(sampler)
    first = next(iterator)
    given = sampler._held.given
    assert given is not None and given.data_ptr() == lengths.data_ptr()
    assert sampler.order().chunk_windows == 1 and sampler.order().chunks >= 2
    rest = list(iterator)
    assert sampler._held.given is None
    assert [first, *rest] == list(copied_first)


def test_a_change_that_moves_tokens_between_sources_before_the_copy_is_refused() -> None:
    """The packed mixture's token weights come from each source's sum, read when it is
    built: lengths swapped between two sources before the copy keep the total and the
    longest, but the copy is refused, naming the source."""
    values = _lengths(20_000).numpy().copy()
    sampler = _packed_samplers(values)["packed mixture"]
    iterator = iter(sampler)
    next(iterator)
    read = set(sampler._held._read[0].tolist())
    i = next(k for k in range(10_000) if k not in read)
    j = next(k for k in range(10_000, 20_000) if k not in read and values[k] != values[i])
    values[[i, j]] = values[[j, i]]
    with pytest.raises(RuntimeError, match=r"the lengths of part 0 \(samples 0 to 10000\)"):
        list(iterator)


def test_a_length_only_the_merge_read_ahead_changed_before_the_copy_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The packed mixture's merge by tokens reads lengths ahead of its first chunk (reads
    of the caller's tensor not counted as the plan's): one of those, swapped with another
    length of its source that nothing read (its sum and the longest kept), keyed draws
    the copy would key otherwise, so the copy is refused naming it."""
    values = _lengths(20_000).numpy().copy()
    sampler = _packed_samplers(values)["packed mixture"]
    reads: dict[bool, list[torch.Tensor]] = {True: [], False: []}
    original = HeldLengths.read

    def read(self: HeldLengths, indices: torch.Tensor, *, counted: bool = True) -> torch.Tensor:
        reads[counted].append(indices.clone())
        return original(self, indices, counted=counted)

    monkeypatch.setattr(HeldLengths, "read", read)
    iterator = iter(sampler)
    next(iterator)
    assert sampler._held.given is not None  # no copy yet
    planned, peeked = (set(torch.cat(reads[c]).tolist()) for c in (True, False))
    ahead = sorted(k for k in peeked - planned if k < 10_000)
    assert ahead  # the merge read past the plan's chunk
    i = ahead[0]
    j = next(k for k in range(10_000) if k not in peeked | planned and values[k] != values[i])
    values[[i, j]] = values[[j, i]]
    with pytest.raises(RuntimeError, match=rf"already planned: lengths\[{i}\] was"):
        list(iterator)


def test_parts_are_summed_when_built_and_checked_in_the_copy() -> None:
    values = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    lengths = HeldLengths(values, parts=(3, 5, 8))
    assert lengths.part_totals == (8, 6, 17) and lengths.total == 31
    values[5], values[0] = 3, 9  # the sum and the longest kept, parts 0 and 2 moved
    with pytest.raises(RuntimeError, match=r"part 0 \(samples 0 to 3\) summed to 8, now 14"):
        lengths.owned()


@given(
    st.lists(st.integers(0, 2**15 - 1), max_size=60),
    st.lists(st.integers(0, 60), max_size=6),
    st.sampled_from([torch.int16, torch.int32, torch.int64]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([1, 3, 7, 2**15]),
)
def test_the_parts_are_summed_in_the_one_pass_that_checks_the_lengths(
    values: list[int],
    ends: list[int],
    dtype: torch.dtype,
    strided: bool,
    with_numpy: bool,
    block: int,
) -> None:
    """The one pass over the lengths (parts empty, ending before the lengths do, across
    blocks, a strided tensor, any dtype, with numpy or without) gives the largest, the
    sum and each part's sum, and the copy made later agrees with them."""
    lengths = torch.tensor([v for v in values for _ in range(2 if strided else 1)], dtype=dtype)
    if strided:
        lengths = lengths[::2]
    bounds = tuple(sorted(min(e, len(values)) for e in ends))
    expected = tuple(sum(values[a:b]) for a, b in itertools.pairwise((0, *bounds)))
    original, original_block = held.numpy, held.SCAN_SAMPLES
    held.numpy, held.SCAN_SAMPLES = (original if with_numpy else None), block
    try:
        assert held._scan(lengths, bounds) == (max(values, default=0), sum(values), expected)
        copied = HeldLengths(lengths, parts=bounds)
        assert copied.part_totals == expected
        assert copied.owned().tolist() == values
    finally:
        held.numpy, held.SCAN_SAMPLES = original, original_block


@pytest.mark.parametrize("longest", [None, 2**62])
def test_length_sum_is_exact_where_a_chunk_of_int64_lengths_overflows(
    monkeypatch: pytest.MonkeyPatch, longest: int | None
) -> None:
    """Lengths of 2**43 and more summed a chunk at a time overflow int64 in one chunk:
    such chunks are summed in halves (told the longest or not)."""
    monkeypatch.setattr(held, "_SUM_CHUNK", 4)
    monkeypatch.setattr(held, "_DIRECT_LIMIT", 2**63 // 4)
    values = torch.tensor([2**62, 2**62 - 1, 2**62 + 5, 7, 1, 2, 3, 4, 2**61], dtype=torch.int64)
    assert held.length_sum(values, longest=longest) == sum(values.tolist())
    assert int(values[:4].sum()) != sum(values[:4].tolist())  # int64 alone wraps there


def test_length_sum_is_exact_at_the_real_chunk_size() -> None:
    values = torch.full((2**20 + 3,), 2**43 + 1, dtype=torch.int64)
    assert held.length_sum(values) == (2**20 + 3) * (2**43 + 1)


def test_the_packed_mixtures_token_weights_are_exact_for_huge_lengths() -> None:
    """Each source's tokens (its token weight) summed exactly where int64 sums wrap."""
    values = torch.full((2**16,), 2**48, dtype=torch.int64)
    lengths = HeldLengths(values, parts=(2**15, 2**16))
    assert lengths.part_totals == (2**63, 2**63)
    assert lengths.total == held.length_sum(values) == 2**64
