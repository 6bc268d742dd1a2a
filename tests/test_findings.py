"""Each finding's claim, checked on the stock sampler (and ours) for the configs it reports.

One test per finding, named by the finding's ``GUARDED_BY``. Expected values are derived
here from the documented algorithm (``torch.randperm`` seeded with ``seed + epoch``, a
strided deal, padding from the head), not read from the report code, so a torch release
that changes what ranks receive fails here. Hypothesis tests extend a claim to many small
configurations where it is a property rather than an example.
"""

from __future__ import annotations

import ast
import json
import math
import warnings
from collections import Counter
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedSampler, SamplerWarning
from studies.core.cases import EXPERIMENT, Case
from studies.core.evaluation import estimates, exact_accuracy, is_correct, rank_results
from studies.core.simulate import case_rows
from studies.engines.collectives import COLLECTIVES
from studies.engines.collectives import COLUMNS as COLLECTIVE_COLUMNS
from studies.engines.versus_simulation import MATCH_COLUMNS, MISMATCH_COLUMNS, Comparison
from studies.findings import (
    batch_of_one,
    build,
    collective_evaluation,
    cost,
    distributed_evaluation,
    drop_last,
    equal_batches,
    experiment,
    manual_seed,
    modules,
    padding,
    persistent_workers,
    real_processes,
    resume,
    seed_per_rank,
    set_epoch,
    set_epoch_timing,
    strided_prefix,
    tiny_datasets,
)
from studies.findings.memory import python_heap, tensor_bytes

SAMPLERS = {"torch": StockSampler, "samplers": DistributedSampler}
implementations = pytest.mark.parametrize("name", sorted(SAMPLERS))


# --- independent helpers: the documented algorithm, written out -------------------------


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """torch.randperm seeded with seed + epoch, or 0..N-1."""
    if not shuffle:
        return list(range(size))
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator).tolist()


def build_sampler(name: str, size: int, world: int, rank: int, **options: object) -> StockSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)  # ours warns on empty shards
        return SAMPLERS[name](range(size), num_replicas=world, rank=rank, **options)


def loader_batches(case: Case, epoch: int) -> list[list[list[int]]]:
    """Each rank's batches in ``epoch``, built directly with torch (no studies code)."""
    result = []
    for rank in range(case.world_size):
        if case.implementation == "none":
            # A shuffling DataLoader seeded with the case's seed; none when not shuffling.
            options = {}
            if case.shuffle:
                options["generator"] = torch.Generator().manual_seed(case.seed)
            loader = DataLoader(
                range(case.dataset_size),
                batch_size=case.batch_size,
                shuffle=case.shuffle,
                drop_last=case.loader_drop_last,
                **options,
            )
            epochs = [[batch.tolist() for batch in loader] for _ in range(epoch + 1)]
            result.append(epochs[epoch])
            continue
        sampler = build_sampler(
            case.implementation,
            case.dataset_size,
            case.world_size,
            rank,
            shuffle=case.shuffle,
            seed=case.seed,
            drop_last=case.drop_last,
        )
        if case.set_epoch:
            sampler.set_epoch(epoch)
        loader = DataLoader(
            range(case.dataset_size),
            batch_size=case.batch_size,
            sampler=sampler,
            drop_last=case.loader_drop_last,
        )
        result.append([batch.tolist() for batch in loader])
    return result


def flat(batches: list[list[int]]) -> list[int]:
    return [index for batch in batches for index in batch]


small_cases = st.builds(
    Case,
    dataset_size=st.integers(1, 60),
    world_size=st.integers(1, 9),
    batch_size=st.integers(1, 6),
    seed=st.integers(0, 2**31),
    drop_last=st.booleans(),
    loader_drop_last=st.booleans(),
    epochs=st.just(1),
    implementation=st.sampled_from(["torch", "samplers"]),
)


# --- the experiment -----------------------------------------------------------------------


def test_experiment_batches() -> None:
    """The experiment table shows exactly what torch's DataLoaders yield, and each labelled
    run shows its effect."""
    finding = build(experiment)
    table = finding.tables[0].frame
    effects = {}
    for label, case in EXPERIMENT:
        epochs = [loader_batches(case, epoch) for epoch in range(case.epochs)]
        rows = table[table["case"] == label].sort_values("rank")
        for rank in range(case.world_size):
            for epoch in range(case.epochs):
                cell = rows.iloc[rank][f"torch now, epoch {epoch}"]
                shown = [] if cell == "-" else [json.loads(b + "]") for b in cell[:-1].split("] ")]
                assert shown == epochs[epoch][rank], (label, rank, epoch)
        effects[label] = epochs

    assert [label for label, _ in EXPERIMENT] == ["1", "2", "3", "4a", "4b", "5a", "5b", "6", "7"]
    first, second = effects["1"]
    assert first[0] == first[1] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # every rank, in order
    assert first == second  # no shuffling: both epochs read the dataset in order
    for label in ("2", "4a", "5a", "6", "7"):
        assert effects[label][0] == effects[label][1], label  # no set_epoch: a repeat
    assert effects["3"][0] == effects["2"][0] and effects["3"][0] != effects["3"][1]
    assert effects["5b"][0] == effects["5a"][0] and effects["5b"][0] != effects["5b"][1]
    assert [len(flat(b)) for b in effects["4a"][0]] == [3, 3]
    assert effects["4b"][0] == [[], []] == effects["4b"][1]  # DataLoader drop_last: empty
    five = Counter(flat(effects["5a"][0][0]) + flat(effects["5a"][0][1]))
    assert sorted(five.values()) == [1, 1, 1, 1, 2]  # padding: one sample twice
    assert [len(b[-1]) for b in effects["6"][0]] == [1, 1]  # batch of one
    assert len(set(flat(effects["7"][0][0]) + flat(effects["7"][0][1]))) == 8  # 2 dropped


# --- set_epoch ----------------------------------------------------------------------------


def test_without_set_epoch_every_epoch_repeats() -> None:
    for case in set_epoch.CASES:
        per_epoch = [loader_batches(case, epoch) for epoch in range(case.epochs)]
        repeated, distinct = set_epoch.repeats(case)
        if case.set_epoch:
            assert all(per_epoch[e] != per_epoch[0] for e in range(1, case.epochs)), case
            assert (repeated, distinct) == (0, case.epochs), case
        else:
            assert all(per_epoch[e] == per_epoch[0] for e in range(1, case.epochs)), case
            assert (repeated, distinct) == (case.epochs - 1, 1), case
    table = build(set_epoch).tables[0].frame
    assert (
        table[~table["set_epoch"]]["later epochs equal to epoch 0"] == set_epoch.EPOCHS - 1
    ).all()
    assert (table[table["set_epoch"]]["later epochs equal to epoch 0"] == 0).all()


@given(small_cases, st.integers(2, 4))
def test_without_set_epoch_the_dataloader_repeats_epoch_0(case: Case, epochs: int) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = build_sampler(
            case.implementation,
            case.dataset_size,
            case.world_size,
            0,
            seed=case.seed,
            drop_last=case.drop_last,
        )
        loader = DataLoader(range(case.dataset_size), batch_size=case.batch_size, sampler=sampler)
        first = [batch.tolist() for batch in loader]
        assert all([batch.tolist() for batch in loader] == first for _ in range(epochs - 1))
    # Ours says so, once; the stock sampler repeats silently. (Ours also warns when its
    # drop_last leaves every rank empty.)
    said = [str(w.message) for w in caught]
    repeated = [m for m in said if "is iterated again at epoch 0 without set_epoch" in m]
    assert len(repeated) == (case.implementation == "samplers")
    assert all(m in repeated or "gives every rank 0 samples" in m for m in said)


# --- set_epoch timing ---------------------------------------------------------------------


def test_set_epoch_after_iter_keeps_the_running_order() -> None:
    zero, one = epoch_order(10, 0, 0), epoch_order(10, 0, 1)
    for name in SAMPLERS:
        sampler = build_sampler(name, 10, 1, 0)
        running = iter(sampler)
        sampler.set_epoch(1)
        assert list(running) == zero, name  # the iterator already holds epoch 0's order
        assert list(sampler) == one, name  # the next iter() uses the new epoch
        for workers, expected in ((0, one), (2, zero)):
            sampler = build_sampler(name, 10, 1, 0)
            loader = DataLoader(range(10), batch_size=5, sampler=sampler, num_workers=workers)
            running = iter(loader)
            sampler.set_epoch(1)
            assert flat([batch.tolist() for batch in running]) == expected, (name, workers)
            sampler.set_epoch(0)
            running = iter(loader)
            first = next(running).tolist()
            sampler.set_epoch(1)
            assert first + flat([b.tolist() for b in running]) == zero, (name, workers)
    table = build(set_epoch_timing).tables[0].frame
    assert table["ours the same"].all()
    changed = table[table["that is epoch"] == 1]
    assert changed[["iterating", "set_epoch(1) called"]].values.tolist() == [
        ["DataLoader, no workers", "after iter(loader)"]
    ]
    assert (table.drop(changed.index)["that is epoch"] == 0).all()


# --- torch.manual_seed ----------------------------------------------------------------------


def test_sampler_ignores_torch_manual_seed() -> None:
    state = torch.random.get_rng_state()
    orders = {}
    for seed in (0, 1, 7):
        torch.manual_seed(seed)
        for name, sampler_class in SAMPLERS.items():
            orders[name, seed] = list(sampler_class(range(10), num_replicas=2, rank=0))
        torch.manual_seed(seed)
        orders["loader", seed] = flat(
            [b.tolist() for b in DataLoader(range(10), batch_size=10, shuffle=True)]
        )
    torch.random.set_rng_state(state)
    default = epoch_order(10, 0, 0)[0::2]  # seed 0, epoch 0, rank 0 of 2
    assert all(orders[name, seed] == default for name in SAMPLERS for seed in (0, 1, 7))
    assert len({tuple(orders["loader", seed]) for seed in (0, 1, 7)}) == 3

    before = torch.random.get_rng_state()
    table = build(manual_seed).tables[0].frame
    assert torch.equal(torch.random.get_rng_state(), before)  # the study restores the RNG
    assert set(table["stock, no seed argument"]) == {json.dumps(default)}
    assert set(table["ours, no seed argument"]) == {json.dumps(default)}
    assert table["stock, seed=manual seed"].nunique() == len(manual_seed.MANUAL_SEEDS)
    assert table["DataLoader shuffle=True, no sampler"].nunique() == len(manual_seed.MANUAL_SEEDS)


def test_runs_one_seed_apart_share_epochs_unless_feistel() -> None:
    """The manual-seed finding's second table, against torch's generator directly: the
    stock sampler (and ours by default) seeds epoch ``e`` with ``seed + e`` and torch keeps
    its low 32 bits; ``permutation="feistel"`` keys seed and epoch apart."""
    size, epochs = manual_seed.DATASET_SIZE, manual_seed.EPOCHS
    assert all(
        epoch_order(size, 1, epoch) == epoch_order(size, 0, epoch + 1) for epoch in range(epochs)
    )
    wrapped = torch.randperm(size, generator=torch.Generator().manual_seed(2**32)).tolist()
    assert wrapped == epoch_order(size, 0, 0)

    def feistel(seed: int, epoch: int) -> list[int]:
        sampler = DistributedSampler(range(size), 1, 0, seed=seed, permutation="feistel")
        sampler.set_epoch(epoch)
        return list(sampler)

    assert all(feistel(1, epoch) != feistel(0, epoch + 1) for epoch in range(epochs))
    assert feistel(2**32, 0) != feistel(0, 0)
    evidence = build(manual_seed)
    runs = evidence.tables[1].frame
    assert runs.iloc[:, 1].tolist() == [epochs, epochs, 0]
    assert runs.iloc[:, 2].tolist() == ["yes", "yes", "no"]
    assert evidence.facts.wrapped == ("stock", "ours, default")
    assert f"{epochs} of {epochs} epochs of a run seeded 1" in evidence.claim


# --- equal batch counts -------------------------------------------------------------------


@implementations
@given(small_cases)
def test_every_rank_gets_the_same_number_of_batches(name: str, case: Case) -> None:
    case = replace(case, implementation=name)
    assert len({len(batches) for batches in loader_batches(case, 0)}) == 1


def test_distributed_samplers_give_every_rank_equal_batches() -> None:
    # By hand: 5 samples in contiguous chunks of 3 on 2 ranks -> 3 and 2 samples.
    chunks = [range(0, 3), range(3, 5)]
    counts = [len(list(DataLoader(list(chunk), batch_size=2))) for chunk in chunks]
    assert counts == [2, 1]
    splits = equal_batches.SPLITS
    assert equal_batches.batch_counts(splits[equal_batches.CONTIGUOUS], 5, 2, 2, False) == [2, 1]
    assert equal_batches.batch_counts(splits[equal_batches.STRIDED], 3, 2, 1, False) == [2, 1]
    for split_name in equal_batches.EQUAL_SHARES:
        for size, world in ((5, 2), (33, 8), (1, 4)):
            counts = equal_batches.batch_counts(splits[split_name], size, world, 4, False)
            assert len(set(counts)) == 1, (split_name, size, world)
    # Ours uneven deals as every W-th sample does: 33 samples on 8 ranks, 5 and 4 each.
    uneven = equal_batches.batch_counts(splits[equal_batches.UNEVEN], 33, 8, 4, False)
    assert uneven == equal_batches.batch_counts(splits[equal_batches.STRIDED], 33, 8, 4, False)
    assert uneven == [2] + [1] * 7

    # The claim's conditions, against the table.
    table = build(equal_batches).tables[0].frame
    name = table["how each rank gets its part"]
    total = int(table["configurations"].iloc[0])
    assert (table["configurations"] == total).all()
    assert (table[name.isin(equal_batches.EQUAL_SHARES)][equal_batches.DIFFER] == 0).all()
    unequal = table[~name.isin(equal_batches.EQUAL_SHARES)]
    assert (unequal[equal_batches.DIFFER] > 0).all()
    assert (unequal["largest difference (batches)"] >= 1).all()
    ours = table[name == equal_batches.UNEVEN]
    assert (ours[equal_batches.AS_STRIDED] == total).all()  # "the same counts" in every one
    by_hand = table[name == equal_batches.STRIDED].set_index("DataLoader drop_last")
    assert ours.set_index("DataLoader drop_last")[equal_batches.DIFFER].equals(
        by_hand[equal_batches.DIFFER]
    )


# --- persistent workers -------------------------------------------------------------------


def test_persistent_workers_change_later_epochs() -> None:
    def epochs(workers: int, persistent: bool) -> list[list[int]]:
        loader = DataLoader(
            range(10),
            batch_size=4,
            shuffle=True,
            generator=torch.Generator().manual_seed(0),
            num_workers=workers,
            persistent_workers=persistent,
        )
        return [flat([b.tolist() for b in loader]) for _ in range(3)]

    plain, persistent = epochs(0, False), epochs(2, True)
    assert epochs(2, False) == plain
    assert persistent[0] == plain[0] and persistent[1] != plain[1] and persistent[2] != plain[2]
    # The mechanism: a new iterator draws a base seed, then RandomSampler draws the
    # permutation (and a second one it slices to the empty remainder).
    for new_iterators, expected in ((3, plain), (1, persistent)):
        generator = torch.Generator().manual_seed(0)
        drawn = []
        for epoch in range(3):
            if epoch < new_iterators:
                torch.empty((), dtype=torch.int64).random_(generator=generator)
            drawn.append(torch.randperm(10, generator=generator).tolist())
            torch.randperm(10, generator=generator)
        assert drawn == expected, new_iterators

    table = build(persistent_workers).tables[0].frame
    differing = table[~table["same as without workers"]]
    assert set(differing["DataLoader"]) == {"2 persistent workers"}
    assert set(differing["epoch"]) == {1, 2}
    assert differing["set-up"].str.contains("no sampler").all()


def test_a_peek_in_the_loop_restarts_a_persistent_workers_iterator() -> None:
    """The persistent-workers finding's peeks, against a DataLoader read directly: with
    persistent workers, iter(loader) in the loop resets the loop's own iterator."""

    def peeked(workers: int, persistent: bool) -> list[int]:
        loader = DataLoader(
            range(10),
            batch_size=4,
            sampler=StockSampler(range(10), num_replicas=1, rank=0),
            num_workers=workers,
            persistent_workers=persistent,
        )
        received: list[int] = []
        for step, batch in enumerate(loader):
            received += batch.tolist()
            if step == 1:
                next(iter(loader))
        return received

    whole = epoch_order(10, 0, 0)
    assert peeked(0, False) == peeked(2, False) == whole
    # Two batches, then the epoch again after the peek's batch (4 samples): 14 in all.
    assert peeked(2, True) == whole[:8] + whole[4:]
    peeks = build(persistent_workers).tables[1].frame
    assert peeks["samples the loop received"].tolist() == [10, 10, 14]
    assert peeks["received twice or more"].tolist() == [0, 0, 4]
    assert "read samples again with 2 persistent workers (" in build(persistent_workers).claim


# --- padding ------------------------------------------------------------------------------


def _padding_holds(name: str, size: int, world: int, seed: int, epoch: int) -> None:
    shares = []
    for rank in range(world):
        sampler = build_sampler(name, size, world, rank, seed=seed)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    order = epoch_order(size, seed, epoch)
    total = len(shares[0]) * world
    extra = total - size
    # Undo the strided deal: position p is rank p % W's (p // W)-th sample.
    received = [shares[p % world][p // world] for p in range(total)]
    assert received[:size] == order
    seen: set[int] = set()
    repeated_positions = []
    for position, index in enumerate(received):
        if index in seen:
            repeated_positions.append(position)
        seen.add(index)
    copies = [received[p] for p in repeated_positions]
    assert copies == (order * (extra // size + 1))[:extra]  # the head, not index 0
    assert {p % world for p in repeated_positions} == set(range(world - extra, world))


@implementations
def test_padding_repeats_head_of_order_on_highest_ranks(name: str) -> None:
    for case in padding.cases():
        for epoch in range(padding.EPOCHS):
            _padding_holds(name, case.dataset_size, case.world_size, case.seed, epoch)
    table = build(padding).tables[0].frame
    for _, row in table.iterrows():
        size, world = int(row["dataset size"]), int(row["world size"])
        order = epoch_order(size, 0, int(row["epoch"]))
        extra = int(row["padding"])
        wrapped = (order * (extra // size + 1))[:extra]  # from the head, again and again
        assert json.loads(row["copies received"]) == wrapped, row
        assert json.loads(row["ranks given the copies"]) == list(range(world - extra, world))
    assert table["copies = head"].all() and table["highest ranks"].all()
    assert table["= owners of the padding"].all() and table["ours identical"].all()
    assert (table["padding"] > table["dataset size"]).any()  # the wrap-around is measured
    assert not table["index 0 among copies"].all()  # index 0 is not what gets repeated


@implementations
@given(st.integers(1, 200), st.integers(1, 16), st.integers(0, 2**31), st.integers(0, 50))
def test_padding_property(name: str, size: int, world: int, seed: int, epoch: int) -> None:
    _padding_holds(name, size, world, seed, epoch)


# --- drop_last ----------------------------------------------------------------------------


def test_sampler_trims_before_sharding_and_loader_after() -> None:
    for name in SAMPLERS:
        for case in drop_last.cases(name):  # type: ignore[arg-type]
            never, held_back = drop_last.dropped_by(case)
            order = epoch_order(case.dataset_size, case.seed, 0)
            world, batch = case.world_size, case.batch_size
            shares = [
                list(build_sampler(name, case.dataset_size, world, r, drop_last=case.drop_last))
                for r in range(world)
            ]
            received = Counter(flat(flat(loader_batches(case, 0))))
            if case.drop_last:
                # Before sharding: the tail of the order is trimmed; the rest is dealt once.
                kept = len(order) - len(order) % world
                assert never == order[kept:], case
                assert sorted(flat(shares)) == sorted(order[:kept]), case
                assert not set(never) & set(received), case
                assert all(count == 1 for count in received.values()), case
            else:
                assert never == [], case
            # After sharding: each rank's short last batch, which may be its whole share.
            expected = [i for s in shares for i in s[len(s) - len(s) % batch :]]
            assert held_back == (expected if case.loader_drop_last else []), case

    # 11 samples, 4 ranks, batch 2, DataLoader drop_last only: rank 3's held-back sample
    # is position 11 of the padded order, a copy of order[0], which rank 0 still receives.
    loader_only = Case(11, 4, 2, loader_drop_last=True, epochs=1)
    order = epoch_order(11, 0, 0)
    _, held_back = drop_last.dropped_by(loader_only)
    per_rank = loader_batches(loader_only, 0)
    assert held_back[-1] == order[0] and order[0] in flat(per_rank[0])
    assert drop_last.held_back_padding(loader_only) == [order[0]]
    assert loader_batches(Case(6, 2, 4, loader_drop_last=True, epochs=1), 0) == [[], []]

    table = build(drop_last).tables[0].frame
    assert table["ours identical"].all() and table["= tail of the order"].all()
    trimmed = table[table["sampler drop_last"]]
    assert (trimmed["received twice or more"] == "[]").all()  # nothing repeated
    row = table[
        (table["dataset size"] == 11) & ~table["sampler drop_last"] & table["DataLoader drop_last"]
    ].iloc[0]
    assert json.loads(row["padded copies held back"]) == [order[0]]
    assert order[0] not in json.loads(row["received by no rank"])  # the copy's original is kept
    assert table[table["empty epoch"]]["dataset size"].tolist() == [6, 6]


@given(small_cases)
def test_loader_drop_last_keeps_only_full_batches(case: Case) -> None:
    dropped = replace(case, loader_drop_last=True)
    kept = replace(case, loader_drop_last=False)
    for full, trimmed in zip(loader_batches(kept, 0), loader_batches(dropped, 0), strict=True):
        assert trimmed == [batch for batch in full if len(batch) == case.batch_size]


# --- batch of one -------------------------------------------------------------------------


def test_last_batch_of_one_breaks_batchnorm() -> None:
    plain, trimmed = batch_of_one.CASES
    for epoch in range(plain.epochs):
        assert [[len(b) for b in rank] for rank in loader_batches(plain, epoch)] == [[4, 1]] * 2
        assert [[len(b) for b in rank] for rank in loader_batches(trimmed, epoch)] == [[4]] * 2
    layer = torch.nn.BatchNorm1d(3).train()
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        layer(torch.ones(1, 3))
    layer.eval()(torch.ones(1, 3))  # eval mode uses running statistics: no error
    outcomes = build(batch_of_one).tables[1].frame
    one = outcomes[outcomes["batch size"] == 1]
    assert len(one) == 1 and not one.iloc[0]["DataLoader drop_last"]
    assert one.iloc[0]["train mode"].startswith("ValueError: Expected more than 1 value")
    assert (outcomes[outcomes["batch size"] > 1]["train mode"] == "ok").all()

    # By input shape: train mode fails exactly when a channel holds a single value.
    message = "Expected more than 1 value per channel when training"
    for layer, shape, fails in (
        (torch.nn.BatchNorm1d(3), (1, 3), True),
        (torch.nn.BatchNorm1d(3), (1, 3, 1), True),
        (torch.nn.BatchNorm1d(3), (1, 3, 5), False),
        (torch.nn.BatchNorm2d(3), (1, 3, 1, 1), True),
        (torch.nn.BatchNorm2d(3), (1, 3, 4, 4), False),
    ):
        if fails:
            with pytest.raises(ValueError, match=message):
                layer.train()(torch.ones(shape))
        else:
            layer.train()(torch.ones(shape))
        layer.eval()(torch.ones(shape))
    shapes = build(batch_of_one).tables[2].frame
    failing = shapes[shapes["train mode"] != "ok"]
    assert failing["input shape"].tolist() == ["[1, 3]", "[1, 3, 1]", "[1, 3, 1, 1]"]
    assert failing["train mode"].str.startswith(f"ValueError: {message}").all()
    assert (shapes["eval mode"] == "ok").all()


@given(small_cases.filter(lambda case: case.batch_size > 1))
def test_a_batch_of_one_is_the_remainder_of_each_share(case: Case) -> None:
    share_length = len(
        build_sampler(
            case.implementation, case.dataset_size, case.world_size, 0, drop_last=case.drop_last
        )
    )
    sizes = [len(batch) for batch in loader_batches(case, 0)[0]]
    has_one = 1 in sizes
    assert has_one == (share_length % case.batch_size == 1 and not case.loader_drop_last)


# --- tiny datasets ------------------------------------------------------------------------


def test_tiny_datasets_repeat_or_vanish() -> None:
    for size, world in tiny_datasets.SHAPES:
        for name in SAMPLERS:
            shares = [list(build_sampler(name, size, world, r)) for r in range(world)]
            assert [len(s) for s in shares] == [1] * world
            counts = Counter(flat(shares))
            assert set(counts) == set(range(size))
            assert max(counts.values()) == -(-world // size)
            trimmed = [build_sampler(name, size, world, r, drop_last=True) for r in range(world)]
            assert [len(list(s)) for s in trimmed] == [0] * world
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the stock sampler stays silent
            StockSampler(range(size), num_replicas=world, rank=0, drop_last=True)
        with pytest.warns(UserWarning, match="gives every rank 0 samples"):
            DistributedSampler(range(size), num_replicas=world, rank=0, drop_last=True)
    table = build(tiny_datasets).tables[0].frame
    dropped = table[table["sampler drop_last"]]
    assert (dropped["stock warnings"] == 0).all()
    assert (dropped["our warnings"] == dropped["world size"]).all()
    assert (dropped["distinct samples received"] == 0).all()


@implementations
@given(
    st.integers(2, 48).flatmap(lambda world: st.tuples(st.integers(1, world - 1), st.just(world)))
)
def test_fewer_samples_than_ranks_and_drop_last_gives_nothing(
    name: str, shape: tuple[int, int]
) -> None:
    size, world = shape
    for rank in range(world):
        sampler = build_sampler(name, size, world, rank, drop_last=True)
        assert len(sampler) == 0 and list(sampler) == []


# --- seed per rank ------------------------------------------------------------------------


def test_seed_per_rank_loses_and_repeats_samples() -> None:
    size = seed_per_rank.DATASET_SIZE
    finding = build(seed_per_rank)
    table = finding.tables[0].frame
    assert table["world size"].tolist() == list(seed_per_rank.WORLD_SIZES)
    for world in seed_per_rank.WORLD_SIZES:
        assert size % world == 0  # no padding: rank r takes positions r, r + W, ...
        counts = Counter(i for r in range(world) for i in epoch_order(size, r, 0)[r::world])
        for name in SAMPLERS:
            shares = [list(build_sampler(name, size, world, r, seed=r)) for r in range(world)]
            assert Counter(flat(shares)) == counts, (name, world)
        never = size - len(counts)
        row = table[table["world size"] == world].iloc[0]
        assert row["never seen"] == never
        twice = sum(count >= 2 for count in counts.values()) / size
        assert row["seen twice or more (fraction)"] == pytest.approx(twice)
        if world > 1:  # the claim: within 0.01 of what independent draws give
            assert twice > 0 and abs(never / size - (1 - 1 / world) ** world) < 0.01, world
        else:
            assert never == 0
    formula = [(1 - 1 / world) ** world for world in seed_per_rank.WORLD_SIZES[1:]]
    assert all(a < b < math.exp(-1) for a, b in pairwise(formula))  # rises towards 1/e
    assert (table["same seed: never seen"] == 0).all() and table["ours identical"].all()
    rises = table["never seen (fraction)"].iloc[1:].is_monotonic_increasing
    assert ("does not rise at every step" in finding.prose) == (not rises)


# --- strided prefix -----------------------------------------------------------------------


def _prefix_holds(case: Case) -> None:
    order = epoch_order(case.dataset_size, case.seed, 0)
    per_rank = loader_batches(case, 0)
    steps = max(len(batches) for batches in per_rank)
    total = len(flat(per_rank[0])) * case.world_size
    padded = (order * (total // max(len(order), 1) + 1))[:total]
    for step in range(1, steps + 1):
        consumed = [i for batches in per_rank for batch in batches[:step] for i in batch]
        assert Counter(consumed) == Counter(padded[: len(consumed)]), (case, step)


def test_consumed_samples_are_a_prefix_of_the_order() -> None:
    for case in strided_prefix.cases():
        for name in SAMPLERS:
            _prefix_holds(case.using(name))  # type: ignore[arg-type]
    table = build(strided_prefix).tables[0].frame
    assert table["= first positions of the order"].all()


@given(small_cases.filter(lambda case: not case.drop_last))
def test_prefix_property(case: Case) -> None:
    _prefix_holds(case)


# --- resuming mid-epoch -------------------------------------------------------------------


def stock_skip_counts(size: int, old: int, steps: int, new: int, batch: int) -> Counter[int]:
    """Old ranks take steps * batch of their padded strided shares; new ranks skip as many."""
    order = epoch_order(size, resume.SEED, resume.EPOCH)

    def shares(world: int) -> list[list[int]]:
        total = -(-size // world) * world
        padded = (order * (total // size + 1))[:total]
        return [padded[rank::world] for rank in range(world)]

    taken = min(steps * batch, -(-size // old))  # a rank yields at most its padded share
    before = [i for share in shares(old) for i in share[:taken]]
    after = [i for share in shares(new) for i in share[taken:]]
    return Counter(before + after)


def test_resume_repeats_and_loses_only_what_the_tail_allows() -> None:
    finding = build(resume)
    table = finding.tables[2].frame
    # The world size whose layout ended the epoch: new when resumed mid-epoch, else old.
    world = table["new world size"].where(table["stopped"] == "mid-epoch", table["old world size"])
    for tail, label in resume.OURS.items():
        rows = table[table["how the job resumes"] == label]
        repeated, never = rows["samples repeated"], rows["samples never seen"]
        if tail == "uneven":
            assert (repeated == 0).all() and (never == 0).all()
        elif tail == "pad":
            assert (repeated < world[rows.index]).all() and (never == 0).all()
        else:
            assert (repeated == 0).all() and (never < world[rows.index]).all()
    skip = table[table["how the job resumes"] == resume.SKIP]
    changed = skip["old world size"] != skip["new world size"]
    assert (skip[~changed]["samples never seen"] == 0).all()
    assert (skip[changed]["samples never seen"] > 0).any()
    assert (skip[changed]["samples repeated"] >= skip[changed]["new world size"]).any()
    restart = table[table["how the job resumes"] == resume.RESTART]
    consumed = (restart["steps done"] * resume.BATCH_SIZE * restart["old world size"]).clip(
        upper=restart["dataset size"]
    )
    assert (restart["samples repeated"] >= consumed).all()
    # After the epoch's last step our state resumes nothing more of the epoch.
    ours = table[table["how the job resumes"].isin(list(resume.OURS.values()))]
    ended = ours[ours["stopped"] == "epoch end"]
    assert len(ended) > 0 and (ended["received after the resume"] == 0).all()
    # A configuration is one row per way of resuming: the tails multiply runs, not
    # configurations.
    per_tail = ended.groupby("how the job resumes").size()
    assert len(per_tail) == len(resume.OURS) and per_tail.nunique() == 1
    configurations = int(per_tail.iloc[0])
    assert configurations * len(resume.OURS) == len(ended)
    assert (
        f"nothing more of it in all {configurations} end-of-epoch configurations with each "
        f"of the {len(resume.OURS)} tails ({len(ended)} runs)" in finding.prose
    )
    assert (
        f"in all {len(ended)} runs ({configurations} end-of-epoch configurations x "
        f"{len(resume.OURS)} tails)" in finding.claim
    )
    assert f"in all {len(ended)} configurations" not in finding.claim + finding.prose
    restarted = restart[restart["stopped"] == "epoch end"]
    assert (restarted["received after the resume"] >= restarted["dataset size"]).all()
    # The skipping approach, written out from the documented layout.
    for _, row in skip.iloc[:: max(len(skip) // 12, 1)].iterrows():
        counts = stock_skip_counts(
            row["dataset size"],
            row["old world size"],
            row["steps done"],
            row["new world size"],
            resume.BATCH_SIZE,
        )
        repeated = sum(counts.values()) - len(counts)
        assert (repeated, row["dataset size"] - len(counts)) == (
            row["samples repeated"],
            row["samples never seen"],
        )


# --- distributed evaluation ---------------------------------------------------------------


def test_padded_evaluation_is_off_and_gathering_is_exact() -> None:
    for size in distributed_evaluation.DATASET_SIZES[:3]:
        for world in distributed_evaluation.WORLD_SIZES:
            values = distributed_evaluation.evaluate(size, world)
            exact = exact_accuracy(size)
            assert values["gathered"] == pytest.approx(exact, abs=1e-12)
            assert values["pooled_counts"] != pytest.approx(exact, abs=1e-12)
            assert values["mean_of_rank_means"] == pytest.approx(values["pooled_counts"])
    table = build(distributed_evaluation).tables[0].frame
    errors = distributed_evaluation.ERROR_COLUMNS
    assert (table[errors["gathered"]].abs() < 1e-12).all()
    assert (table[errors["pooled_counts"]] != 0).all()


@implementations
@given(st.integers(1, 300), st.integers(1, 16), st.booleans())
def test_gathering_is_exact_and_pooling_is_exact_only_without_padding(
    name: str, size: int, world: int, shuffle: bool
) -> None:
    shares = [list(build_sampler(name, size, world, r, shuffle=shuffle)) for r in range(world)]
    values = estimates(rank_results(shares), size)
    exact = exact_accuracy(size)
    assert values["gathered"] == pytest.approx(exact, abs=1e-12)
    # The padded copies repeat the head of the order; pooling is exact only when there are
    # none, or when they happen to score exactly the dataset's accuracy (e.g. N = 1).
    order = epoch_order(size, 0, 0, shuffle)
    copies = [order[p % size] for p in range(size, len(shares[0]) * world)]
    correct = int(is_correct(torch.arange(size)).sum())
    copies_correct = int(is_correct(torch.tensor(copies, dtype=torch.int64)).sum())
    pooled_exact = values["pooled_counts"] == pytest.approx(exact, abs=1e-12)
    assert pooled_exact == (copies_correct * size == correct * len(copies))
    if size % world == 0:
        assert not copies and pooled_exact


# --- cost ---------------------------------------------------------------------------------


def test_stock_heap_grows_with_n_and_ours_is_bounded() -> None:
    """Measured in this process at two sizes past our chunk size (one rank holds all)."""
    small, large = 100_000, 500_000
    heap = {
        (name, size): python_heap(build_sampler(name, size, 1, 0)).peak_to_first
        for name in SAMPLERS
        for size in (small, large)
    }
    assert heap["torch", large] > 4 * heap["torch", small]  # proportional to N
    assert heap["samplers", large] < 1.05 * heap["samplers", small]  # bounded
    assert heap["samplers", large] < heap["torch", large] / 5
    assert tensor_bytes(build_sampler("torch", large, 1, 0)).to_first >= 8 * large
    # On rank 7 of 8 the stock sampler still lists the whole order (at least a pointer per
    # sample of the dataset) before its first index, then keeps only its share.
    stock_rank = python_heap(build_sampler("torch", small, 8, 7))
    assert stock_rank.peak_to_first >= 8 * small
    assert stock_rank.held_at_first < stock_rank.peak_to_first / 4
    ours_rank = python_heap(build_sampler("samplers", small, 8, 7))
    assert ours_rank.peak_to_first < stock_rank.peak_to_first / 5


@pytest.mark.timeout(300)
def test_the_cost_prose_names_small_sizes_in_kib() -> None:
    assert cost._size(44_684) == "43.6 KiB"
    assert cost._size(3 * 2**20) == "3.0 MiB"
    assert cost._size(2**20 - 1) == "1,024.0 KiB"


def test_the_cost_claim_holds_for_its_table() -> None:
    """The claim's conditions against the finding's own table (fewer, smaller sizes, one
    interpreter: the median over several that the finding takes steadies a peak by a few
    dozen bytes, tests/test_cost_determinism.py, which these conditions do not need)."""
    sizes = (10, 1_000, 10**6, 2 * 10**6)  # past the chunk on rank 7 of 8
    finding = cost.evidence(cost.measure_in_fresh_process(sizes, processes=1))
    table = finding.tables[0].frame
    peak = table.pivot(
        index="dataset size", columns="implementation", values="heap peak to first index"
    )
    previous, largest = sizes[-2], sizes[-1]
    stock = peak.loc[largest, "torch"] / peak.loc[previous, "torch"]
    ours = peak.loc[largest, "samplers"] / peak.loc[previous, "samplers"]
    assert stock > 0.8 * largest / previous  # grows in proportion to the dataset
    assert ours < 1.05  # stops growing
    assert f"its Python-heap peak grew {stock:.2f} times" in finding.claim
    assert f"its peak grew {ours:.4f} times" in finding.claim


def test_crossover_names_the_first_size_from_which_ours_uses_less() -> None:
    sizes = [10, 100, 300, 1000]
    stock = pd.Series([5, 50, 150, 500], index=sizes)
    assert cost.crossover(stock, pd.Series([9, 60, 100, 200], index=sizes)) == (
        "more up to 100 samples, less from 300 on"
    )
    assert cost.crossover(stock, pd.Series([1, 1, 1, 1], index=sizes)).startswith("less at every")
    assert cost.crossover(stock, stock).startswith("more or the same at every")
    assert cost.crossover(stock, pd.Series([1, 60, 1, 600], index=sizes)) == "less at 10, 300"


# --- prose of the real-process findings (their measurements are in test_real_processes) ---

SEED_DRAW = "draw one seed fewer"


def _comparison(*runs: tuple[str, Case, int, bool, bool | None, int | None]) -> Comparison:
    """A Comparison of (label, case, workers, persistent, same_in_process, epoch differing)."""
    matches, mismatches = [], []
    for label, case, workers, persistent, same, differing in runs:
        loader = {"num_workers": workers, "persistent_workers": persistent}
        simulated = case_rows(case)
        if differing is not None:
            real = [
                {**row, "indices": row["indices"][::-1]} if row["epoch"] == differing else row
                for row in simulated
            ]
            for source, rows in (("simulated", simulated), ("processes", real)):
                mismatches += [{"label": label, "source": source, **loader, **r} for r in rows]
        matches.append(
            {
                "label": label,
                **case.key(),
                **loader,
                "simulated_rows": len(simulated),
                "processes_rows": len(simulated),
                "match": differing is None,
                "same_in_process": same,
            }
        )
    return Comparison(
        pd.DataFrame(matches, columns=list(MATCH_COLUMNS)),
        pd.DataFrame(mismatches, columns=list(MISMATCH_COLUMNS)),
    )


def test_real_process_prose_states_only_causes_its_tables_show() -> None:
    no_sampler = Case(8, 2, 4, implementation="none", epochs=2)
    sampler = Case(8, 2, 4, epochs=2)
    one = real_processes.explain(_comparison(("a", no_sampler, 2, True, True, 1)))
    assert "1 run differs: a. It is reproduced in-process" in one
    assert "differ in epoch 1." in one and SEED_DRAW in one
    for other in (
        ("a", sampler, 2, True, True, 1),  # with a DistributedSampler
        ("a", no_sampler, 2, False, True, 1),  # workers not persistent
        ("a", no_sampler, 2, True, True, 0),  # epoch 0 differs
        ("a", no_sampler, 2, True, False, 1),  # not reproduced in-process
    ):
        assert SEED_DRAW not in real_processes.explain(_comparison(other)), other
    two = real_processes.explain(
        _comparison(("a", no_sampler, 2, True, False, 1), ("b", sampler, 0, False, True, 0))
    )
    assert "2 runs differ: a and b. 1 of them is NOT reproduced" in two and SEED_DRAW not in two
    none = real_processes.explain(_comparison(("c", sampler, 0, False, None, None)))
    assert none.startswith("1 of 1 runs match") and "No run differs." in none


def test_collective_prose_covers_every_collective_of_a_pattern() -> None:
    # (dataset size, padding, {collective: error}); unlisted collectives are exact.
    pairs = (
        (7, 1, {"all_reduce(SUM)": 0.02, "reduce(SUM, dst=0)": 0.02, "gather_object": 0.5}),
        (9, 1, {"reduce(SUM, dst=0)": 0.02}),
        (8, 0, {"reduce(SUM, dst=0)": 0.25}),
    )
    rows = []
    for size, padded, wrong in pairs:
        for pattern, collective in COLLECTIVES:
            error = next((e for name, e in wrong.items() if collective.startswith(name)), 0.0)
            if pattern == "mean_of_rank_means":
                error = wrong.get("all_reduce(SUM)", 0.0)
            rows.append(
                {
                    "dataset_size": size,
                    "world_size": 2,
                    "padding": padded,
                    "pattern": pattern,
                    "collective": collective,
                    "accuracy": 0.5 + error,
                    "exact": 0.5,
                    "error": error,
                    "formula": 0.5 + error,
                    "same_on_every_rank": True,
                }
            )
    measured = pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS))
    table = collective_evaluation.summary(measured)
    prose = collective_evaluation.describe(table, collective_evaluation.errors(measured))
    assert "off by at most 5.00e-01 with each of" in prose  # gather_object, not all_gather
    assert "in 1 of the 2 padded pairs with both" in prose
    assert "and in 2 with at least one of them" in prose
    assert "off by at most 2.50e-01 without padding" in prose  # reduce, not all_reduce
    assert "summed counts of either collective by at most 2.50e-01" in prose


# --- the registry -------------------------------------------------------------------------


def test_every_finding_is_guarded_by_an_existing_test() -> None:
    root = Path(__file__).resolve().parents[1]
    for module in modules():
        path, test = module.GUARDED_BY.split("::")
        tree = ast.parse((root / path).read_text())
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert test in names, module.GUARDED_BY


def test_the_registry_labels_evidence_and_rejects_anything_else() -> None:
    import types

    import studies.findings as registry

    module = types.ModuleType("studies.findings.example")
    module.NAME, module.TITLE = "example", "An example"
    module.GUARDED_BY = "tests/test_findings.py::test_example"
    module.build = lambda: registry.Evidence("A claim.", "prose", ())
    finding = registry.build(module)
    assert (finding.name, finding.claim, finding.prose, finding.tables) == (
        "example",
        "A claim.",
        "prose",
        (),
    )
    with pytest.raises(ValueError, match="claim must be a non-empty sentence"):
        registry.Evidence(" ", "prose", ())
    module.build = lambda: "not evidence"
    with pytest.raises(TypeError, match=r"example\.build\(\) must return Evidence"):
        registry.build(module)
    module.NAME = "Not A Name"
    with pytest.raises(ValueError, match="NAME must be lowercase words joined by '-'"):
        registry.build(module)
