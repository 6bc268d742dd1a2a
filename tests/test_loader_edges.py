"""Where the loaders meet the sampler's state, each at its boundary (each test fails
without its fix).

1. A DataLoader's iterator created before the sampler's state (or weights) changes:
   ``it = iter(loader)`` then ``sampler.load_state_dict(state)`` (a trainer that builds
   the epoch's iterator first, then restores its checkpoint) or ``sampler.set_weights``
   (a curriculum callback at the epoch's start), then ``for batch in it``. Without
   workers the DataLoader has not advanced the sampler's iterator yet: that iterator
   continues from the loaded state (or under the new weights), exactly as ``iter()``
   after the change would. With workers it has (they prefetch at ``iter(loader)``): the
   iteration keeps the epoch it began, and a ``SamplerWarning`` says so. Every sampler
   we ship, the state taken at the first step, mid-epoch and at the epoch's end,
   resumed on fewer and more ranks, and a second resume.
2. :func:`samplers.unshard` over a mixture, whose stream repeats samples: its results
   kept per position.
3. A DataLoader yielding out of order (``in_order=False`` with workers): no state in the
   loop.
4. A ``StatefulDataLoader`` with workers restored where a shorter rank's rest of the
   epoch is empty: that empty pass counts, the next is the next epoch (it was replayed,
   empty, pass after pass).
5. :func:`samplers.gather_unsharded` checks ``dst`` and ``local_results`` before the
   collective.
6. A mixture's ``set_weights`` in a loop then left, the loader iterated again: the next
   iteration continues from the loop's step through every loader, persistent workers
   (whose iterator zeroes its count before it asks the sampler again) and
   ``StatefulDataLoader`` with workers (whose ``iter()`` is no snapshot) included.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import composition  # the composition matrix's samplers and loaders
import pytest
import torch

from samplers import (
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedMixtureSampler,
    SamplerWarning,
    unshard,
)

MIXTURES = ("mixture", "mixture batch", "mixture token", "packed mixture")


def _ranks(kind: str, world: int) -> list[Any]:
    samplers = [composition.SAMPLERS[kind](world, rank) for rank in range(world)]
    for sampler in samplers:
        sampler.set_epoch(composition.EPOCH)
    return samplers


def _items(batches: Any) -> list[int]:
    return [item for batch in batches for item in composition.items(batch)]


def _drain(kind: str, samplers: list[Any], change: Any, *, early: bool) -> list[list[int]]:
    """Each rank's items through a DataLoader, ``change(sampler)`` applied after
    ``iter(loader)`` (``early``) or before it."""
    received = []
    for sampler in samplers:
        loader = composition.make_loader(kind, "torch", sampler)
        if not early:
            change(sampler)
        iterator = iter(loader)
        if early:
            change(sampler)
        received.append(_items(iterator))
    return received


def _first_steps(kind: str, steps: int) -> tuple[Counter[int], dict[str, Any]]:
    """What the loops of :data:`composition.OLD_WORLD` ranks received in ``steps`` steps
    (at most the epoch), and the state there."""
    seen: Counter[int] = Counter()
    state: dict[str, Any] = {}
    for sampler in _ranks(kind, composition.OLD_WORLD):
        iterator = iter(composition.make_loader(kind, "torch", sampler))
        for _ in range(steps):
            batch = next(iterator, None)
            if batch is not None:
                seen.update(composition.items(batch))
        state = sampler.state_dict()
    return seen, state


@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("steps", [0, 2, 100])
@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_a_state_loaded_after_iter_loader_continues_in_that_iterator(
    kind: str, steps: int, world: int
) -> None:
    seen, state = _first_steps(kind, steps)
    late = _drain(kind, _ranks(kind, world), lambda s: s.load_state_dict(state), early=True)
    first = _drain(kind, _ranks(kind, world), lambda s: s.load_state_dict(state), early=False)
    assert late == first
    assert seen + Counter(_items(late)) == composition.reference_epoch(kind)


@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_a_second_resume_through_an_iterator_made_before_each_load(kind: str) -> None:
    """Resumed on 3 ranks after 1 step, again on 1 rank after another step there."""
    seen, state = _first_steps(kind, 1)
    samplers = _ranks(kind, 3)
    for sampler in samplers:
        iterator = iter(composition.make_loader(kind, "torch", sampler))
        sampler.load_state_dict(state)
        batch = next(iterator, None)
        if batch is not None:
            seen.update(composition.items(batch))
    state = samplers[0].state_dict()
    rest = _drain(kind, _ranks(kind, 1), lambda s: s.load_state_dict(state), early=True)
    assert seen + Counter(_items(rest)) == composition.reference_epoch(kind)


@pytest.mark.parametrize("held", [True, False])
@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_set_epoch_of_the_saved_epoch_after_such_a_load_still_continues_it(
    kind: str, held: bool
) -> None:
    """``iter(loader)``, the state loaded, then the loop's usual ``set_epoch(saved)``: the
    rest of the epoch once, whether the loop then iterates that iterator (``held``) or
    drops it and iterates the loader again (the load is taken up at the first ``next()``,
    not at the load: a ``set_epoch`` in between still chooses the epoch)."""
    seen, state = _first_steps(kind, 2)
    rest: Counter[int] = Counter()
    for sampler in _ranks(kind, 3):
        loader = composition.make_loader(kind, "torch", sampler)
        iterator = iter(loader)
        sampler.load_state_dict(state)
        sampler.set_epoch(state["epoch"])
        rest.update(_items(iterator if held else iter(loader)))
    assert seen + rest == composition.reference_epoch(kind)


@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_the_state_after_such_an_iteration_says_the_epoch_is_finished(kind: str) -> None:
    _, state = _first_steps(kind, 1)
    (sampler,) = _ranks(kind, 1)
    iterator = iter(composition.make_loader(kind, "torch", sampler))
    sampler.load_state_dict(state)
    assert sampler.state_dict() == state  # before the first batch: the loaded position
    list(iterator)
    after = sampler.state_dict()
    assert after["finished"] and after["epoch"] == composition.EPOCH


@pytest.mark.parametrize("kind", MIXTURES)
def test_weights_set_after_iter_loader_apply_in_that_iterator(kind: str) -> None:
    """New weights at the epoch's start, set after ``iter(loader)``: that iteration draws
    under them (as one begun after them), and a state taken at its end resumes the next
    epoch alike: nothing repeated within a pass, as the weights say."""

    def reweighted(sampler: Any) -> None:
        sampler.set_weights([0, 1])

    late_samplers, first_samplers = _ranks(kind, 2), _ranks(kind, 2)
    late = _drain(kind, late_samplers, reweighted, early=True)
    first = _drain(kind, first_samplers, reweighted, early=False)
    assert late == first
    assert late_samplers[0].state_dict() == first_samplers[0].state_dict()
    for samplers in (late_samplers, first_samplers):
        for sampler in samplers:
            sampler.set_epoch(composition.EPOCH + 1)
    assert _drain(kind, late_samplers, lambda s: None, early=True) == _drain(
        kind, first_samplers, lambda s: None, early=True
    )


def _left_and_reweighted(kind: str, loader: str | None, steps: int) -> list[Any]:
    """One rank's loop over a ``loader`` of ``kind`` (``None``: over the sampler itself, a
    step :data:`composition.BATCH` indices for an index sampler) left after ``steps``
    steps with ``set_weights([1, 3])`` set in it, then iterated again: the indices each
    part received, and the sampler's state after them."""
    (sampler,) = _ranks(kind, 1)
    source = sampler if loader is None else composition.make_loader(kind, loader, sampler)
    batched = loader is not None or kind in composition.BATCHED
    iterator = iter(source)
    head = [next(iterator) for _ in range(steps if batched else steps * composition.BATCH)]
    with pytest.warns(SamplerWarning, match="set_weights during an iteration"):
        sampler.set_weights([1, 3])
    del iterator  # the loop is left
    rest = list(iter(source))
    if batched:
        return [_items(head), _items(rest), sampler.state_dict()]
    return [head, rest, sampler.state_dict()]


# Every loader of the matrix but a torchdata.nodes pipeline, which takes the state itself.
@pytest.mark.parametrize("loader", [name for name in composition.LOADERS if name != "nodes"])
@pytest.mark.parametrize("kind", MIXTURES)
def test_weights_set_in_a_loop_left_apply_from_there_with_any_loader(
    kind: str, loader: str
) -> None:
    """A loop left after 2 steps with new weights set in it, then the loader iterated
    again: the next iteration continues the epoch from the loop's step under the new
    weights, as the sampler iterated by hand does, whatever the loader: persistent
    workers included, whose iterator zeroes its count before it asks the sampler again."""
    head, rest, state = _left_and_reweighted(kind, loader, 2)
    assert [head, rest, state] == _left_and_reweighted(kind, None, 2)
    (fresh,) = _ranks(kind, 1)
    whole = _items(composition.make_loader(kind, "torch", fresh))
    assert head == whole[: len(head)]  # the old weights' first 2 steps
    # The rest of the epoch, not the epoch again from its start: one epoch in all.
    assert len(head) + len(rest) == len(whole) and state["finished"]
    assert state["schedule"][-1][1] != fresh.state_dict()["schedule"][-1][1]


@pytest.mark.parametrize("kind", ["index", "token", "mixture"])
def test_with_workers_the_iteration_begun_keeps_its_epoch_and_a_warning_says_so(
    kind: str,
) -> None:
    _, state = _first_steps(kind, 2)
    (sampler,) = _ranks(kind, 1)
    loader = composition.make_loader(kind, "torch 2 workers", sampler)
    iterator = iter(loader)  # the workers fetch ahead: the sampler's iterator has started
    with pytest.warns(SamplerWarning, match="load_state_dict during an iteration of"):
        sampler.load_state_dict(state)
    received = Counter(_items(iterator))
    (fresh,) = _ranks(kind, 1)
    assert received == Counter(_items(iter(composition.make_loader(kind, "torch", fresh))))
    resumed = Counter(_items(iter(loader)))  # the next iteration: from the loaded state
    seen, _ = _first_steps(kind, 2)
    assert seen + resumed == composition.reference_epoch(kind)


def test_a_loop_left_and_dropped_before_the_load_gets_no_warning() -> None:
    """Nobody iterates an iteration the loop left with ``break`` and dropped: loading a
    state then is the usual resume, without a warning."""
    _, state = _first_steps("index", 2)
    (sampler,) = _ranks("index", 1)
    for _ in composition.make_loader("index", "torch 2 workers", sampler):
        break
    sampler.load_state_dict(state)  # SamplerWarning is an error in the tests
    seen, _ = _first_steps("index", 2)
    rest = _items(iter(composition.make_loader("index", "torch", sampler)))
    assert seen + Counter(rest) == composition.reference_epoch("index")


# unshard over a stream that repeats samples ------------------------------------------------


def _mixture(kind: str, world: int, rank: int, epoch_length: int | None) -> Any:
    """The composition matrix's mixture of ``kind``, its epoch ``epoch_length`` draws."""
    c = composition
    common: dict[str, Any] = {"seed": c.SEED, "epoch_length": epoch_length}
    if kind == "mixture":
        return DistributedMixtureSampler(c.SOURCES, [1, 2], world, rank, tail="uneven", **common)
    if kind == "mixture batch":
        return DistributedMixtureBatchSampler(
            c.SOURCES, [1, 2], c.BATCH, world, rank, tail="uneven", **common
        )
    if kind == "mixture token":
        return DistributedMixtureTokenBatchSampler(
            c.SOURCES, [1, 2], c.LENGTHS, c.MAX_TOKENS, world, rank, **common
        )
    return DistributedPackedMixtureSampler(
        c.SOURCES, [1, 2], c.LENGTHS, 8, 2, world, rank, split=4, window=12, **common
    )


@pytest.mark.parametrize("epoch_length", [None, 5])
@pytest.mark.parametrize("kind", MIXTURES)
def test_unshard_keeps_a_mixtures_results_per_position_none_overwritten(
    kind: str, epoch_length: int | None
) -> None:
    """A mixture draws a small source in several passes, so a sample may come twice in
    an epoch: its results are kept one per position of the epoch (stream order), each
    position's index given by the plan, none overwritten, none out of range."""
    ranks = [_mixture(kind, 3, rank, epoch_length) for rank in range(3)]
    for sampler in ranks:
        sampler.set_epoch(composition.EPOCH)
    parts = [[("result of", index) for index in _flat(sampler)] for sampler in ranks]
    results = unshard(parts, ranks[0])
    assert len(results) == sum(len(part) for part in parts) == ranks[0].epoch_length
    expected = ranks[0].plan().indices_at(torch.arange(len(results))).tolist()
    assert results == [("result of", index) for index in expected]
    if epoch_length is None:
        assert len(set(expected)) < len(expected)  # a sample came twice: none overwritten


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_unshard_after_a_resume_places_the_resumed_results_where_they_belong(
    kind: str, world: int
) -> None:
    """Saved after 2 steps on 2 ranks, the rest of the epoch evaluated on ``world`` ranks:
    the results go where their samples are (each sample's own, or each position's for a
    stream) and the samples handed out before the state hold ``None``. unshard read the
    plan from the epoch's start: the results went to the wrong samples when the resumed
    shares were as long as whole ones, and otherwise it raised, miscounting the share."""
    seen, state = _first_steps(kind, 2)
    resumed = [composition.SAMPLERS[kind](world, rank) for rank in range(world)]
    parts = []
    for sampler in resumed:
        sampler.load_state_dict(state)
        parts.append([("result of", item) for item in _flat(sampler)])
    handed = Counter(item for part in parts for _, item in part)
    assert seen + handed == composition.reference_epoch(kind)
    for sampler in resumed:  # any rank's sampler
        results = unshard(parts, sampler)
        kept = [result for result in results if result is not None]
        assert Counter(item for _, item in kept) == handed
        assert results.count(None) == len(results) - sum(handed.values())
        # Each result in its own slot: the sample's, or (a stream) the position's sample.
        slots = torch.arange(len(results))
        owners = slots if sampler.plan().order.permutes else sampler.plan().indices_at(slots)
        for result, owner in zip(results, owners.tolist(), strict=True):
            assert result in (None, ("result of", owner))
    # A sampler that loaded the state and has not iterated reads the same plan from it.
    loaded = composition.SAMPLERS[kind](world, 0)
    loaded.load_state_dict(state)
    assert unshard(parts, loaded) == unshard(parts, resumed[0])


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_a_copy_made_in_a_loop_with_workers_is_at_the_loops_step(kind: str, how: str) -> None:
    """``copy.copy``, ``copy.deepcopy`` or ``pickle`` of the sampler after 2 batches of a
    DataLoader with 2 workers (a framework copying it into a checkpoint, ``torch.save``):
    the copy's state is the original's, the loop's step, and a resume from it sees every
    sample once. The copy counted what the workers had fetched ahead, and a resume from
    it skipped those batches."""
    import copy
    import pickle

    copies = {"copy": copy.copy, "deepcopy": copy.deepcopy}
    copies["pickle"] = lambda sampler: pickle.loads(pickle.dumps(sampler))
    seen: Counter[int] = Counter()
    states = []
    for sampler in _ranks(kind, composition.OLD_WORLD):
        loader = composition.make_loader(kind, "torch 2 workers", sampler)
        for step, batch in enumerate(loader):
            seen.update(composition.items(batch))
            if step == 1:
                states.append((sampler.state_dict(), copies[how](sampler).state_dict()))
                break
    assert all(original == copied for original, copied in states)
    rest = _drain(kind, _ranks(kind, 3), lambda s: s.load_state_dict(states[0][1]), early=False)
    assert seen + Counter(_items(rest)) == composition.reference_epoch(kind)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_copy_after_a_smaller_last_batch_is_at_the_epochs_end(workers: int) -> None:
    """The loop counts whole batches of the DataLoader's batch size: after a last batch of
    2 of 4, 24 items of a share of 22. A copy then raised "taken must be in [0, 22], got
    24" (the Hugging Face Trainer copies the sampler there)."""
    import copy

    from torch.utils.data import DataLoader

    from samplers import DistributedSampler

    sampler = DistributedSampler(range(22), 1, 0, seed=3, tail="uneven")
    loader = DataLoader(range(22), batch_size=4, sampler=sampler, num_workers=workers)
    iterator = iter(loader)
    received = [i for _ in range(len(loader)) for i in next(iterator).tolist()]
    clone = copy.deepcopy(sampler)
    assert clone.state_dict() == sampler.state_dict()
    assert sampler.state_dict()["finished"] and sorted(received) == list(range(22))


def _flat(sampler: Any) -> list[int]:
    return [i for item in sampler for i in ([item] if isinstance(item, int) else item)]


# A DataLoader that yields out of order -------------------------------------------------------


@pytest.mark.parametrize("loader_kind", ["torch", "stateful"])
def test_a_loader_yielding_out_of_order_refuses_a_state_in_the_loop(loader_kind: str) -> None:
    """``in_order=False`` with workers: the batches the loop received are not the first
    ones handed out, so a state in the loop is refused (it was counted as a prefix, and a
    resume lost some samples and repeated others); after the loop, the epoch is over."""
    from torch.utils.data import DataLoader
    from torchdata.stateful_dataloader import StatefulDataLoader

    (sampler,) = _ranks("batch", 1)
    kind = DataLoader if loader_kind == "torch" else StatefulDataLoader
    loader = kind(range(composition.SIZE), batch_sampler=sampler, num_workers=2, in_order=False)
    received = []
    for step, batch in enumerate(loader):
        received += batch.tolist()
        if step == 0:
            with pytest.raises(ValueError, match=r"in_order=False and workers.*in_order=True"):
                sampler.state_dict()
    assert sampler.state_dict()["finished"]
    assert (
        Counter(received) == composition.reference_epoch("batch")
        and len(received) == composition.SIZE
    )


def test_weights_set_in_a_loop_yielding_out_of_order_are_not_refused() -> None:
    """Only a state is refused there: set_weights in such a loop applies from where the
    iteration stops, as in any loop (its warning says so), and the loop runs on."""
    from torch.utils.data import DataLoader

    (sampler,) = _ranks("mixture", 1)
    dataset = range(composition.SIZE)  # the indices themselves
    loader = DataLoader(dataset, batch_size=3, sampler=sampler, num_workers=2, in_order=False)
    received = []
    for step, batch in enumerate(loader):
        received += batch.tolist()
        if step == 0:
            with pytest.warns(SamplerWarning, match="set_weights during an iteration"):
                sampler.set_weights([1, 1])
    (fresh,) = _ranks("mixture", 1)
    assert Counter(received) == Counter(_flat(fresh))


def test_a_mixtures_weights_applied_at_set_epoch_warn_of_no_load() -> None:
    """Weights set during an iteration apply at the next ``set_epoch`` (the sampler loads
    its own state there): that is not the caller's ``load_state_dict`` during an
    iteration, so that warning does not come."""
    import warnings

    (sampler,) = _ranks("mixture", 1)
    iterator = iter(sampler)
    next(iterator)
    with pytest.warns(SamplerWarning, match="set_weights during an iteration"):
        sampler.set_weights([0, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler.set_epoch(composition.EPOCH + 1)
    assert not [w for w in caught if "load_state_dict during" in str(w.message)]
    assert caught  # the rest of the epoch dropped by the new epoch: said, as before


def test_in_order_false_without_workers_keeps_the_order_and_the_state() -> None:
    from torch.utils.data import DataLoader

    (sampler,) = _ranks("batch", 1)
    iterator = iter(DataLoader(range(composition.SIZE), batch_sampler=sampler, in_order=False))
    next(iterator)
    assert sampler.state_dict()["position"] == composition.BATCH


# A restored rank whose rest of the epoch is empty ---------------------------------------------


def test_a_stateful_loader_restored_where_a_ranks_rest_is_empty_goes_on_to_the_next_epoch() -> None:
    """21 samples on 2 ranks, batches of 2, ``tail="uneven"``: rank 1's 10 samples are 5
    whole batches, so its loader's state after the epoch's loop is position 20 of 21 (rank
    0 still had a batch then), and its rest of the epoch is empty. Restored, each rank's
    every pass is the next epoch, the same on both ranks."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from samplers import DistributedSampler

    def built(rank: int) -> tuple[Any, Any]:
        sampler = DistributedSampler(range(21), 2, rank, auto_epoch=True, tail="uneven")
        loader = StatefulDataLoader(range(21), batch_size=2, sampler=sampler, num_workers=2)
        return sampler, loader

    for rank in (0, 1):
        sampler, loader = built(rank)
        for _ in range(2):
            list(loader)
        state = loader.state_dict()
        sampler, loader = built(rank)
        loader.load_state_dict(state)
        for epoch in (2, 3):
            received = _items(loader)
            expected = DistributedSampler(range(21), 2, rank, tail="uneven")
            expected.set_epoch(epoch)
            assert (received, sampler.epoch) == (list(expected), epoch)


@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_a_stateful_loader_restored_at_an_epochs_end_between_snapshots_goes_on(kind: str) -> None:
    """``StatefulDataLoader(num_workers=2, snapshot_every_n_steps=3)``, its state taken
    after an epoch's loop, restored with the usual loop (``set_epoch(saved)``, then the
    next): nothing more of the saved epoch, then the next epoch. torchdata restores the
    last snapshot, replays the batches since (which the loop had), finds the epoch over
    and starts a fresh iterator: that one repeated the whole saved epoch."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def built(rank: int) -> tuple[Any, Any]:
        sampler = composition.SAMPLERS[kind](composition.OLD_WORLD, rank)
        batched = kind in composition.BATCHED
        options: dict[str, Any] = (
            {"batch_sampler": sampler}
            if batched
            else {"batch_size": composition.BATCH, "sampler": sampler}
        )
        loader = StatefulDataLoader(
            composition.dataset_of(sampler), num_workers=2, snapshot_every_n_steps=3, **options
        )
        return sampler, loader

    for rank in range(composition.OLD_WORLD):
        sampler, loader = built(rank)
        sampler.set_epoch(composition.EPOCH)
        steps = len(list(loader))
        state = loader.state_dict()
        sampler.set_epoch(composition.EPOCH + 1)
        expected = _items(loader)
        sampler, loader = built(rank)
        loader.load_state_dict(state)
        sampler.set_epoch(composition.EPOCH)
        assert _items(loader) == [], (rank, steps)
        sampler.set_epoch(composition.EPOCH + 1)
        assert _items(loader) == expected


def test_gather_unsharded_names_a_bad_destination_or_results(tmp_path: Any) -> None:
    """Checked before the collective (a one-process gloo group): ``dst`` a rank of the
    group (``True`` was read as rank 1, a float gave a signature dump) and
    ``local_results`` a sequence."""
    import torch.distributed as dist

    from samplers import DistributedSampler, gather_unsharded

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        sampler = DistributedSampler(range(5), shuffle=False)
        results = [f"result {i}" for i in sampler]
        for dst, error, said in [
            (3, ValueError, "dst must be a rank of the group, 0 to 0, got 3"),
            (-1, ValueError, "dst must be a rank of the group, 0 to 0, got -1"),
            (True, TypeError, "dst must be an integer, got bool True"),
            (0.0, TypeError, "dst must be an integer, got float 0.0"),
        ]:
            with pytest.raises(error, match=said):
                gather_unsharded(results, sampler, dst=dst)
        with pytest.raises(TypeError, match=r"local_results must be a sequence .* got NoneType"):
            gather_unsharded(None, sampler)  # type: ignore[arg-type]
        assert gather_unsharded(results, sampler, dst=0) == results
        assert gather_unsharded(results, sampler) == results
    finally:
        dist.destroy_process_group()
