"""``group=``, the agreed seed and the consistency checks, without a process group.

What needs real groups (a ``DeviceMesh``, subgroups, the collectives) is in
``tests/test_groups_processes.py``; here: the default group's stock behaviour, the errors
for values that are not groups, references that survive copies and pickles, and the
comparisons every rank computes.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import SequentialSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    SeedTypeError,
)
from samplers.consistency import agreed_seed, check_consistent, compare_replicas, compare_settings
from samplers.groups import DEFAULT_GROUP, GroupRef, placement, reference

BUILDERS = {
    "sampler": lambda **options: DistributedSampler(range(10), **options),
    "batch sampler": lambda **options: DistributedBatchSampler(range(10), 2, **options),
    "wrapper": lambda **options: DistributedSamplerWrapper(SequentialSampler(range(10)), **options),
}
builders = pytest.mark.parametrize("kind", sorted(BUILDERS))


# --- the default group: as the stock sampler --------------------------------------------


@builders
def test_the_default_group_is_remembered_and_survives_copies(kind: str) -> None:
    sampler = BUILDERS[kind](num_replicas=3, rank=2)
    assert sampler.group is DEFAULT_GROUP and sampler.group.is_default
    assert (sampler.num_replicas, sampler.rank) == (3, 2)
    copies = [copy.deepcopy(sampler), pickle.loads(pickle.dumps(sampler))]
    expected = list(sampler)
    for copied in copies:
        assert copied.group is DEFAULT_GROUP
        assert list(copied) == expected


def test_explicit_placement_without_a_process_group_is_taken_as_given() -> None:
    assert placement(4, 3) == (4, 3)
    assert placement(4, 3, None) == (4, 3)
    assert placement(1, 0, DEFAULT_GROUP) == (1, 0)


@pytest.mark.parametrize(
    ("num_replicas", "rank", "name"), [(None, 0, "num_replicas"), (2, None, "rank")]
)
def test_placement_read_from_a_missing_process_group_names_what_was_not_given(
    num_replicas: int | None, rank: int | None, name: str
) -> None:
    with pytest.raises(ValueError, match=r"^Default process group has not been initialized") as e:
        placement(num_replicas, rank)
    assert f"({name} was not given" in str(e.value)


@pytest.mark.parametrize(
    ("num_replicas", "rank", "error", "message"),
    [
        (0, 0, ValueError, r"^num_replicas must be at least 1, got 0$"),
        (2, 2, ValueError, r"^Invalid rank 2, rank should be in the interval \[0, 1\]"),
        (2.0, 0, TypeError, r"^num_replicas must be an integer, got float 2.0$"),
        (2, True, TypeError, r"^rank must be an integer, got bool True$"),
    ],
)
def test_placement_keeps_the_stock_exception_types_and_messages(
    num_replicas: Any, rank: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        placement(num_replicas, rank)


# --- values that are not groups --------------------------------------------------------


@builders
@pytest.mark.parametrize("group", ["dp", 3, [0, 1], (0, 1)], ids=repr)
def test_a_value_that_is_not_a_group_raises_naming_it(kind: str, group: Any) -> None:
    with pytest.raises(TypeError, match=r"^group must be None \(the default process group\)") as e:
        BUILDERS[kind](num_replicas=2, rank=0, group=group)
    assert f"got {type(group).__name__} {group!r}" in str(e.value)
    assert "mesh['dp']" in str(e.value)


def test_new_groups_placeholder_for_non_members_says_what_it_is() -> None:
    with pytest.raises(ValueError, match=r"^group is GroupMember.NON_GROUP_MEMBER \(-100\)"):
        reference(-100)


# --- references to groups --------------------------------------------------------------


def test_a_reference_copies_as_itself_and_pickles_by_name_and_ranks() -> None:
    named = GroupRef(name="3", ranks=(1, 3))
    assert copy.copy(named) is named and copy.deepcopy(named) is named
    restored = pickle.loads(pickle.dumps(named))
    assert restored == named and hash(restored) == hash(named)
    assert restored.ranks == (1, 3) and not restored.is_default
    assert repr(restored) == "GroupRef(global ranks [1, 3])"
    assert pickle.loads(pickle.dumps(DEFAULT_GROUP)) is DEFAULT_GROUP
    assert repr(DEFAULT_GROUP) == "GroupRef(default process group)"
    assert reference(named) is named and reference(None) is DEFAULT_GROUP


def test_a_reference_to_a_group_this_process_lacks_says_so_when_used() -> None:
    named = pickle.loads(pickle.dumps(GroupRef(name="3", ranks=(1, 3))))
    with pytest.raises(RuntimeError, match=r"global ranks \[1, 3\]\) does not exist in this"):
        _ = named.process_group
    assert DEFAULT_GROUP.process_group is None and DEFAULT_GROUP.ranks is None


# --- the agreed seed and the checks without a process group ----------------------------


def test_seed_none_needs_a_process_group() -> None:
    with pytest.raises(SeedTypeError, match=r"pass seed=<an integer>, the same on every rank"):
        agreed_seed()


def test_checks_without_a_process_group() -> None:
    settings = {"num_replicas": 4, "rank": 1, "seed": 0}
    check_consistent(settings)  # nothing to compare with
    DistributedSampler(range(4), 2, 0).check_consistent(replicas=None)
    with pytest.raises(RuntimeError, match=r"was given, but no process group is initialised"):
        check_consistent(settings, replicas=GroupRef(name="3", ranks=(0, 1)))
    with pytest.raises(RuntimeError, match=r"was given, but no process group is initialised"):
        check_consistent(settings, GroupRef(name="3", ranks=(0, 1)))


# --- the comparisons ---------------------------------------------------------------------


def test_a_world_size_that_is_not_the_groups_is_reported() -> None:
    # Issue 15: a 2-process job whose samplers say num_replicas=4 reads half the dataset.
    two_of_four = [{"num_replicas": 4, "rank": 0}, {"num_replicas": 4, "rank": 1}]
    assert compare_settings(two_of_four, [0, 1]) == (
        "the samplers use num_replicas=4, but the group they shard over has 2 processes "
        "(ranks [0, 1]): build them with num_replicas=2, or leave num_replicas out"
    )
    # Fewer replicas than processes, a divisor: tensor-parallel peers built the stock way
    # (num_replicas=dp size, rank=dp rank) read the right data; checked over the whole
    # job, the advice was only "num_replicas=4", which gives those peers different data.
    peers = [{"num_replicas": 2, "rank": rank} for rank in (0, 0, 1, 1)]
    assert compare_settings(peers, [0, 1, 2, 3]) == (
        "the samplers on ranks [0, 1, 2, 3] have ranks [0, 0, 1, 1], expected each of 0..3 "
        "once; the samplers use num_replicas=2, but the group they shard over has 4 "
        "processes (ranks [0, 1, 2, 3]): build them with num_replicas=4, or leave "
        "num_replicas out; or, if every 2 of these processes are replicas that must read "
        "the same samples (tensor or context parallelism), pass their data-parallel group "
        "of 2 processes as group= to the samplers and to check_consistent (a DeviceMesh's "
        "mesh['dp'], say)"
    )
    differing = [{"num_replicas": 4, "rank": 0}, {"num_replicas": 2, "rank": 1}]
    assert (
        compare_settings(differing, [5, 7]) == "num_replicas differs (ranks [5]: 4; ranks [7]: 2)"
    )


def test_replicas_must_be_identical_rank_included() -> None:
    peers = [{"num_replicas": 4, "rank": 0, "seed": 0}, {"num_replicas": 4, "rank": 1, "seed": 0}]
    assert compare_replicas(peers, [2, 3]) == (
        "ranks [2, 3] are replicas, which must read the same samples, but rank differs "
        "(ranks [2]: 0; ranks [3]: 1)"
    )
    assert compare_replicas([peers[0], dict(peers[0])], [2, 3]) is None


settings_lists = st.integers(1, 5).flatmap(
    lambda size: st.lists(
        st.fixed_dictionaries(
            {
                "num_replicas": st.sampled_from([size, size + 1]),
                "rank": st.integers(0, size),
                "seed": st.integers(0, 1),
            }
        ),
        min_size=size,
        max_size=size,
    )
)


@given(settings_lists)
def test_compare_settings_finds_exactly_what_breaks_a_data_parallel_group(
    settings: list[dict[str, int]],
) -> None:
    size = len(settings)
    sound = (
        sorted(entry["rank"] for entry in settings) == list(range(size))
        and all(entry["num_replicas"] == size for entry in settings)
        and len({entry["seed"] for entry in settings}) == 1
    )
    assert (compare_settings(settings) is None) == sound
    peers_identical = all(entry == settings[0] for entry in settings)
    assert (compare_replicas(settings, range(size)) is None) == peers_identical
