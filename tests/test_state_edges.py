"""The state at the edges: a second iterator mid-epoch, bool-likes written as attributes,
``consumed`` counts that are not whole steps, and states that do not fit."""

from __future__ import annotations

import copy
import warnings
from itertools import islice
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from samplers import (
    DistributedBatchSampler,
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
    SamplerWarning,
)

KINDS = ("sampler", "batch", "wrapper", "tokens")


def make(kind: str, rank: int = 0, **options: Any) -> Any:
    data = range(40)
    if kind == "sampler":
        return DistributedSampler(data, 2, rank, seed=3, **options)
    if kind == "batch":
        return DistributedBatchSampler(data, 3, 2, rank, seed=3, **options)
    if kind == "wrapper":
        options.pop("shuffle", None)  # a wrapped sampler's stream always shuffles
        inner = RandomSampler(data, generator=torch.Generator().manual_seed(1))
        return DistributedSamplerWrapper(inner, 2, rank, seed=3, **options)
    lengths = [1 + index % 6 for index in range(40)]
    return DistributedTokenBatchSampler(lengths, 12, 2, rank, seed=3, **options)


# A second iterator mid-epoch -----------------------------------------------------------------


def test_a_peek_while_the_loop_iterates_makes_state_dict_refuse_and_say_why() -> None:
    """The loop has taken 30 of its 50 indices; a callback peeks with next(iter(sampler))."""
    ranks = [DistributedSampler(range(100), 2, rank, seed=1) for rank in range(2)]
    loops = [iter(sampler) for sampler in ranks]
    taken = [list(islice(loop, 30)) for loop in loops]
    with pytest.warns(UserWarning, match="iterated again"):
        next(iter(ranks[0]))  # the callback's peek
    with pytest.raises(
        ValueError, match=r"ambiguous.*30 items handed out.*peek = copy\.copy\(sampler\)"
    ):
        ranks[0].state_dict()
    # Peeking at a copy leaves the loop's progress alone: position 60, and the resume
    # yields exactly the 20 indices the loop had left.
    ranks[1].state_dict()  # untouched rank: fine
    peek = copy.copy(ranks[1])
    peek.set_epoch(ranks[1].epoch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert next(iter(peek)) == taken[1][0]
    state = ranks[1].state_dict()
    assert (state["position"], state["finished"]) == (60, False)
    rest = list(loops[1])
    resumed = DistributedSampler(range(100), 2, 1, seed=1)
    resumed.load_state_dict(state)
    assert list(resumed) == rest
    assert len(rest) == 20 and not set(rest) & set(taken[1])


@pytest.mark.parametrize("loader", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_a_peek_before_the_loops_first_item_makes_state_dict_refuse(
    kind: str, loader: bool
) -> None:
    """The loop's ``iter()`` (or ``iter(loader)``, which calls it), then a callback's peek,
    then the loop: the peek replaced the loop's unstarted iteration, and the state counted
    the peek's one item, not the loop's (a resume repeated what the loop had taken). Two
    iterations are in progress: refused, as for a peek mid-loop."""
    sampler = make(kind, shuffle=False)
    if loader:
        dataset = range(40)
        batched = kind in ("batch", "tokens")
        reader = (
            DataLoader(dataset, batch_sampler=sampler)
            if batched
            else DataLoader(dataset, sampler=sampler, batch_size=2)
        )
        loop = iter(reader)
    else:
        loop = iter(sampler)
    next(iter(sampler))  # the callback's peek
    if loader and kind == "wrapper":  # its stream shuffles: a second pass of epoch 0
        with pytest.warns(SamplerWarning, match="iterated again at epoch 0"):
            list(islice(loop, 3))
    else:
        list(islice(loop, 3))
    if loader and kind in ("sampler", "wrapper"):
        # The DataLoader's BatchSampler calls iter(sampler) at the loop's first batch,
        # after the peek: that iteration is the loop's (3 batches of 2 on 2 ranks).
        assert sampler.state_dict()["position"] == 12
        return
    with pytest.raises(ValueError, match=r"ambiguous"):
        sampler.state_dict()
    sampler.set_epoch(1)  # the next epoch ends it
    assert sampler.state_dict()["position"] == 0


def test_an_iter_dropped_unstarted_before_the_loop_leaves_the_loop_alone() -> None:
    """``iter()`` never advanced and dropped, then the loop: the loop's state, no error."""
    sampler = make("sampler", shuffle=False)
    iter(sampler)
    loop = iter(sampler)
    list(islice(loop, 7))
    assert sampler.state_dict()["position"] == 14


def test_state_dict_stays_refused_after_the_loop_ends_until_the_next_iteration() -> None:
    sampler = DistributedSampler(range(100), 2, 0, seed=1, shuffle=False)
    loop = iter(sampler)
    list(islice(loop, 30))
    next(iter(sampler))
    list(loop)  # the loop finishes; the peek's iteration is still the sampler's
    with pytest.raises(ValueError, match="ambiguous"):
        sampler.state_dict()
    sampler.set_epoch(1)
    assert sampler.state_dict()["epoch"] == 1  # a new epoch chosen: a fresh state
    list(sampler)
    assert sampler.state_dict()["finished"]


def test_a_loop_left_with_break_does_not_make_the_next_iteration_ambiguous() -> None:
    sampler = DistributedSampler(range(100), 2, 0, shuffle=False)
    for count, _ in enumerate(sampler):
        if count == 5:
            break
    loop = iter(sampler)
    list(islice(loop, 7))
    assert sampler.state_dict()["position"] == 14


def _every_kind(kind: str, **options: Any) -> Any:
    """``make``'s samplers, and the mixture and packed samplers, rank 0 of 2."""
    if kind in KINDS:
        return make(kind, **options)
    lengths = [1 + index % 6 for index in range(40)]
    sources = [range(25), range(15)]
    if kind == "mixture":
        return DistributedMixtureSampler(sources, [2, 1], 2, 0, seed=3, **options)
    if kind == "mixture batch":
        return DistributedMixtureBatchSampler(sources, [2, 1], 3, 2, 0, seed=3, **options)
    if kind == "mixture tokens":
        return DistributedMixtureTokenBatchSampler(
            sources, [2, 1], lengths, 12, 2, 0, seed=3, **options
        )
    return DistributedPackedBatchSampler(lengths, 8, 2, num_replicas=2, rank=0, seed=3, **options)


EVERY_KIND = (*KINDS, "mixture", "mixture batch", "mixture tokens", "packed")


def _epoch_1_is_its_own(kind: str, sampler: Any, **options: Any) -> None:
    """A new iteration of epoch 1, one step in: its state is its own (not refused as
    ambiguous), and a fresh sampler resumed from it yields exactly the rest."""
    loop = iter(sampler)
    next(loop)
    state = sampler.state_dict()
    assert (state["epoch"], state["finished"]) == (1, False)
    rest = list(loop)
    resumed = _every_kind(kind, **options)
    resumed.load_state_dict(state)
    assert list(resumed) == rest


@pytest.mark.parametrize("auto_epoch", [False, True])
@pytest.mark.parametrize("kind", EVERY_KIND)
def test_a_loop_that_took_its_whole_share_leaves_the_next_iteration_unambiguous(
    kind: str, auto_epoch: bool
) -> None:
    """The loop takes len(sampler) items with next() (no StopIteration) and still holds
    its iterator when the next epoch's iter() begins: nothing is left to iterate, so the
    new iteration's state is its own."""
    sampler = _every_kind(kind, auto_epoch=auto_epoch)
    loop = iter(sampler)
    for _ in range(len(sampler)):
        next(loop)
    assert sampler.state_dict()["finished"]
    if not auto_epoch:
        sampler.set_epoch(1)
    _epoch_1_is_its_own(kind, sampler, auto_epoch=auto_epoch)


@pytest.mark.parametrize("kind", EVERY_KIND)
def test_set_epoch_to_another_epoch_leaves_the_abandoned_iteration_behind(kind: str) -> None:
    """A loop left mid-epoch for the next epoch (set_epoch, then iter() while the name
    still holds the old iterator): the new iteration's state is its own. The same epoch
    set again is still two iterations of one epoch, refused."""
    sampler = _every_kind(kind)
    loop = iter(sampler)
    next(loop)
    sampler.set_epoch(1)
    _epoch_1_is_its_own(kind, sampler)
    again = _every_kind(kind)
    held = iter(again)
    next(held)
    again.set_epoch(0)
    peek = iter(again)
    next(peek)
    with pytest.raises(ValueError, match="ambiguous"):
        again.state_dict()


def test_a_dataloader_starting_an_iteration_starts_the_loop_s() -> None:
    sampler = DistributedSampler(range(100), 2, 0, shuffle=False)
    held = iter(sampler)
    next(held)
    loader = iter(DataLoader(range(100), batch_size=5, sampler=sampler))
    next(loader)
    assert sampler.state_dict()["position"] == 10  # the DataLoader's one step of 5


# Bool-likes written as attributes -----------------------------------------------------------


@pytest.mark.parametrize("value", [np.True_, 1, torch.tensor(True)], ids=["numpy", "1", "tensor"])
@pytest.mark.parametrize("kind", KINDS)
def test_shuffle_written_as_a_bool_like_counts_as_true(kind: str, value: Any) -> None:
    sampler = make(kind, shuffle=False, auto_epoch=True)
    sampler.shuffle = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, second = list(sampler), list(sampler)
    assert first != second, "auto_epoch must advance the shuffled epoch"
    assert sampler.epoch == 1
    state = sampler.state_dict()
    assert state["shuffle"] is True
    resumed = make(kind, shuffle=False, auto_epoch=True)
    resumed.shuffle = value
    resumed.load_state_dict(state)  # the sampler accepts its own state
    assert list(resumed) == list(sampler)  # epoch 1 was finished: both run epoch 2
    assert resumed.epoch == sampler.epoch == 2


@pytest.mark.parametrize("kind", KINDS)
def test_auto_epoch_advances_the_epoch_without_shuffling_too(kind: str) -> None:
    """``auto_epoch=True``, ``shuffle=False``: each pass is the next epoch, so a state
    after the second pass says epoch 1 finished, and a resumed run (``set_epoch(0)``
    before loading, as a script that sets up its sampler the same way) goes on with epoch
    2. Without shuffling the epoch stayed 0, and that resume said epoch 0 was chosen and
    finished: it yielded nothing."""
    options: dict[str, Any] = {"shuffle": False, "auto_epoch": True}
    if kind == "wrapper":
        options["tail"] = "uneven"
    sampler = make(kind, **options)
    sampler.set_epoch(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, second = list(sampler), list(sampler)
        assert sampler.epoch == 1
        state = sampler.state_dict()
        assert (state["epoch"], state["finished"]) == (1, True)
        third = list(sampler)
        resumed = make(kind, **options)
        resumed.set_epoch(0)
        resumed.load_state_dict(state)
        assert list(resumed) == third and len(third) > 0
        assert resumed.epoch == sampler.epoch == 2
    if kind != "wrapper":  # its stream shuffles whatever shuffle says
        assert first == second == third


@pytest.mark.parametrize("value", [np.False_, 0], ids=["numpy", "0"])
@pytest.mark.parametrize("kind", ["sampler", "batch", "tokens"])
def test_shuffle_written_as_a_false_bool_like_counts_as_false(kind: str, value: Any) -> None:
    sampler = make(kind)
    sampler.shuffle = value
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    assert state["shuffle"] is False
    resumed = make(kind)
    resumed.shuffle = value
    resumed.load_state_dict(state)
    assert list(resumed) == list(iterator)


# consumed= that is not whole steps ----------------------------------------------------------


def _uneven_ranks() -> list[DistributedSampler[int]]:
    """23 samples over 4 ranks with tail="uneven": ranks 0-2 take 6, rank 3 takes 5."""
    ranks = [DistributedSampler(range(23), 4, rank, tail="uneven") for rank in range(4)]
    for sampler in ranks:
        list(sampler)
    return ranks


def test_a_short_rank_s_true_count_is_refused_naming_the_expected_count() -> None:
    ranks = _uneven_ranks()
    with pytest.raises(ValueError, match=r"consumed=5 is not a whole number .* expected 6"):
        ranks[3].state_dict(consumed=5, batch_size=3)
    with pytest.raises(ValueError, match=r"consumed=5 is rank 3's whole share.*at least 6"):
        ranks[3].state_dict(consumed=5)
    states = [sampler.state_dict(consumed=6, batch_size=3) for sampler in ranks]
    assert all(state == states[0] for state in states)
    assert states[0]["finished"]
    # With batch size 1, after 5 steps, 5 is the right count: the others have one more step.
    assert ranks[3].state_dict(consumed=5, batch_size=1)["position"] == 20
    assert not ranks[3].state_dict(consumed=5, batch_size=1)["finished"]


def test_the_batch_size_of_the_dataloader_reading_the_sampler_checks_consumed() -> None:
    sampler = DistributedSampler(range(40), 2, 0)
    loader = iter(DataLoader(range(40), batch_size=4, sampler=sampler))
    next(loader)
    with pytest.raises(ValueError, match=r"batch_size=4 .* expected 4"):
        sampler.state_dict(consumed=3)
    assert sampler.state_dict(consumed=4)["position"] == 8


def test_batch_size_is_refused_for_a_batch_sampler() -> None:
    sampler = make("batch")
    next(iter(sampler))
    with pytest.raises(ValueError, match="batch_size is for index samplers"):
        sampler.state_dict(consumed=1, batch_size=3)


# States that do not fit ---------------------------------------------------------------------


def test_state_keys_of_mixed_types_are_a_value_error_naming_the_key() -> None:
    sampler = make("sampler")
    state: dict[Any, Any] = dict(sampler.state_dict())
    state[1] = "x"
    with pytest.raises(ValueError, match=r"field names are strings.* field 1 \(int\)"):
        sampler.load_state_dict(state)


@pytest.mark.parametrize(("writer", "reader"), [("tokens", "sampler"), ("sampler", "tokens")])
def test_a_state_of_another_sampler_kind_names_the_kind(writer: str, reader: str) -> None:
    state = make(writer).state_dict()
    with pytest.raises(ValueError, match=f"'sampler' is '{type(make(writer)).__name__}'"):
        make(reader).load_state_dict(state)


@pytest.mark.parametrize("value", [np.True_, 1, True], ids=["numpy", "1", "bool"])
@pytest.mark.parametrize("kind", KINDS)
def test_auto_epoch_written_as_an_attribute_takes_effect(kind: str, value: Any) -> None:
    sampler = make(kind)
    sampler.auto_epoch = value
    first, second = list(sampler), list(sampler)
    assert sampler.epoch == 1
    assert first != second


def test_uneven_through_a_dataloader_rank_0_s_state_is_right_at_a_shorter_rank_s_last_step() -> (
    None
):
    """The documented exception (resume guide, state_dict): at the step where a shorter
    share's DataLoader yields its last batch, that rank says finished; rank 0 (the longest
    share) says where the epoch stands, and resuming from it loses nothing."""
    ranks = [DistributedSampler(range(3), 2, rank, shuffle=False, tail="uneven") for rank in (0, 1)]
    loops = [iter(DataLoader(range(3), batch_size=1, sampler=sampler)) for sampler in ranks]
    first = [next(loop).tolist() for loop in loops]
    assert first == [[0], [1]]
    states = [sampler.state_dict() for sampler in ranks]
    assert [(s["position"], s["finished"]) for s in states] == [(2, False), (3, True)]
    resumed = DistributedSampler(range(3), 1, 0, shuffle=False, tail="uneven")
    resumed.load_state_dict(states[0])
    assert list(resumed) == [2]
