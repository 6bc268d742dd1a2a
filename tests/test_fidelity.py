"""No working program can tell ours from the stock sampler, except by getting better errors.

The audit table runs every bad (or merely unusual) input through both samplers, at every
place a value can enter: the constructor, attribute writes, ``set_epoch``, and iteration.
Each row states what must happen:

``same-error``
    Both raise; ours raises an instance of the stock exception type, no later than the
    stock sampler does.
``same-output``
    Both accept it and yield the same indices.
``ours-rejects``
    The stock sampler accepts it silently (and usually does something else than the
    caller meant); ours raises a ``TypeError``/``ValueError`` naming the argument. Each is
    listed in docs/guides/drop-in.md as a deliberate difference.
``ours-accepts``
    The stock sampler fails on it when shuffling (numpy and tensor integers reach
    ``manual_seed``, which rejects them); ours accepts it and yields what the stock
    sampler yields for the plain ``int``.

``seed=None`` without a process group is in the table; with one, ours agrees one random
seed over the job (``tests/test_groups_processes.py``), where the stock sampler fails when
iterating.
"""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from strategies import StockSampler
from torch.utils.data import DataLoader

from samplers import DistributedSampler, EpochTypeError, SeedTypeError

BASE: dict[str, Any] = {
    "num_replicas": 2,
    "rank": 1,
    "shuffle": True,
    "seed": 0,
    "drop_last": False,
}
DATASET = range(7)

#: Stages in the order a program reaches them.
STAGES = ("init", "attribute", "set_epoch", "iter")


class NoLength:
    """A dataset object without ``__len__``."""

    def __repr__(self) -> str:
        # A test id holds it: the default repr's address differs between xdist workers.
        return "NoLength()"


def _run(sampler_class: type, stage: str, name: str, value: Any) -> tuple[str, Any]:
    """("ok", indices) or (stage where it raised, the exception)."""
    arguments = dict(BASE)
    dataset: Any = DATASET
    if stage == "init":
        if name == "dataset":
            dataset = value
        else:
            arguments[name] = value
    reached = "init"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = sampler_class(dataset, **arguments)
            if stage == "attribute":
                reached = "attribute"
                setattr(sampler, name, value)
            if stage == "set_epoch":
                reached = "set_epoch"
                sampler.set_epoch(value)
            reached = "iter"
            return "ok", list(sampler)
    except Exception as error:  # what is compared is the type and the stage
        return reached, error


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, np.integer | torch.Tensor) else value


# (stage, argument, value, expected)
AUDIT: list[tuple[str, str, Any, str]] = [
    # Constructor.
    ("init", "num_replicas", 0, "same-error"),
    ("init", "num_replicas", -1, "same-error"),
    ("init", "num_replicas", 2.5, "same-error"),
    ("init", "num_replicas", 2.0, "same-error"),
    ("init", "num_replicas", "2", "same-error"),
    ("init", "num_replicas", None, "same-error"),
    ("init", "num_replicas", True, "same-error"),
    ("init", "num_replicas", np.int64(2), "same-output"),
    ("init", "num_replicas", torch.tensor(2), "same-output"),
    ("init", "rank", 2, "same-error"),
    ("init", "rank", -1, "same-error"),
    ("init", "rank", 1.0, "same-error"),
    ("init", "rank", "0", "same-error"),
    ("init", "rank", None, "same-error"),
    ("init", "rank", True, "ours-rejects"),
    ("init", "rank", np.int64(1), "same-output"),
    ("init", "shuffle", np.False_, "same-output"),
    ("init", "shuffle", np.True_, "same-output"),
    ("init", "shuffle", np.array(False), "same-output"),
    ("init", "shuffle", torch.tensor(False), "same-output"),
    ("init", "shuffle", torch.tensor(True), "same-output"),
    ("init", "shuffle", 0, "same-output"),
    ("init", "shuffle", 1, "same-output"),
    ("init", "shuffle", "no", "ours-rejects"),
    ("init", "shuffle", None, "ours-rejects"),
    ("init", "shuffle", 0.5, "ours-rejects"),
    ("init", "shuffle", 2, "ours-rejects"),
    ("init", "drop_last", np.True_, "same-output"),
    ("init", "drop_last", torch.tensor(True), "same-output"),
    ("init", "drop_last", "yes", "ours-rejects"),
    ("init", "drop_last", None, "ours-rejects"),
    ("init", "seed", 1.5, "same-error"),
    ("init", "seed", 1.0, "same-error"),
    ("init", "seed", np.float64(1.0), "same-error"),
    ("init", "seed", "1", "same-error"),
    ("init", "seed", 2**64, "same-error"),
    ("init", "seed", -(2**63) - 1, "same-error"),
    ("init", "seed", True, "ours-rejects"),
    ("init", "seed", None, "same-error"),
    ("init", "seed", np.int64(3), "ours-accepts"),
    ("init", "seed", torch.tensor(3), "ours-accepts"),
    ("init", "dataset", NoLength(), "same-error"),
    ("init", "dataset", None, "same-error"),
    ("init", "dataset", 5, "same-error"),
    # Attribute writes, acting when iterating.
    ("attribute", "rank", 2, "same-error"),
    ("attribute", "rank", 0.0, "same-error"),
    ("attribute", "rank", 0, "same-output"),
    ("attribute", "num_replicas", 3.0, "same-error"),
    ("attribute", "num_replicas", 3, "same-error"),
    ("attribute", "seed", 1.5, "same-error"),
    ("attribute", "seed", "1", "same-error"),
    ("attribute", "seed", 2**64, "same-error"),
    ("attribute", "seed", 5, "same-output"),
    ("attribute", "shuffle", np.False_, "same-output"),
    ("attribute", "shuffle", False, "same-output"),
    ("attribute", "shuffle", "no", "ours-rejects"),
    ("attribute", "drop_last", np.True_, "same-error"),
    ("attribute", "drop_last", "yes", "same-error"),
    ("attribute", "shuffle", None, "ours-rejects"),
    ("attribute", "epoch", 1.5, "same-error"),
    ("attribute", "epoch", "1", "same-error"),
    ("attribute", "epoch", 3, "same-output"),
    ("attribute", "num_samples", 2.0, "same-error"),
    ("attribute", "num_samples", 9, "same-error"),
    ("attribute", "total_size", 8.0, "same-error"),
    ("attribute", "total_size", 10, "same-error"),
    ("attribute", "rank", -1, "same-error"),
    ("attribute", "total_size", 11, "same-error"),
    ("attribute", "dataset", NoLength(), "same-error"),
    ("attribute", "dataset", range(9), "same-error"),
    # set_epoch.
    ("set_epoch", "epoch", 1.5, "same-error"),
    ("set_epoch", "epoch", 1.0, "same-error"),
    ("set_epoch", "epoch", "1", "same-error"),
    ("set_epoch", "epoch", None, "same-error"),
    ("set_epoch", "epoch", torch.tensor(2.0), "same-error"),
    ("set_epoch", "epoch", 2**64, "same-error"),
    ("set_epoch", "epoch", -(2**63) - 1, "same-error"),
    ("set_epoch", "epoch", True, "ours-rejects"),
    ("set_epoch", "epoch", -3, "same-output"),
    ("set_epoch", "epoch", np.int64(3), "ours-accepts"),
    ("set_epoch", "epoch", torch.tensor(3), "ours-accepts"),
]


def _row_id(row: tuple[str, str, Any, str]) -> str:
    stage, name, value, _ = row
    return f"{stage}-{name}={type(value).__name__}:{value!r}"[:60]


@pytest.mark.parametrize("row", AUDIT, ids=[_row_id(row) for row in AUDIT])
def test_audit_every_argument_path_against_the_stock_sampler(row: tuple) -> None:
    stage, name, value, expected = row
    stock_stage, stock = _run(StockSampler, stage, name, value)
    ours_stage, ours = _run(DistributedSampler, stage, name, value)
    if expected == "same-error":
        assert isinstance(stock, Exception), f"the stock sampler accepted it: {stock}"
        assert isinstance(ours, type(stock)), (ours, stock)
        assert STAGES.index(ours_stage) <= STAGES.index(stock_stage), (ours_stage, stock_stage)
    elif expected == "same-output":
        assert (stock_stage, ours_stage) == ("ok", "ok"), (stock, ours)
        assert ours == stock
    elif expected == "ours-rejects":
        assert stock_stage == "ok", stock
        assert isinstance(ours, TypeError | ValueError)
        assert name in str(ours) and repr(_plain(value))[:10] in str(ours), str(ours)
    else:
        assert expected == "ours-accepts"
        assert isinstance(stock, Exception)
        assert ours_stage == "ok", ours
        assert ours == _run(StockSampler, stage, name, _plain(value))[1]


def test_the_audit_covers_every_argument_and_stage() -> None:
    covered = {(stage, name) for stage, name, _, _ in AUDIT}
    for name in ("num_replicas", "rank", "shuffle", "drop_last", "seed", "dataset"):
        assert ("init", name) in covered
    for name in ("rank", "num_replicas", "seed", "shuffle", "drop_last", "epoch", "dataset"):
        assert ("attribute", name) in covered
    assert ("set_epoch", "epoch") in covered
    assert {expected for *_, expected in AUDIT} == {
        "same-error",
        "same-output",
        "ours-rejects",
        "ours-accepts",
    }


# Generic, like the stock class.


def test_subscripting_and_subclassing_as_with_the_stock_class() -> None:
    alias = DistributedSampler[int]
    assert alias.__origin__ is DistributedSampler

    class MySampler(DistributedSampler[int]):
        pass

    sampler = MySampler(range(10), num_replicas=3, rank=2, seed=4)
    assert list(sampler) == list(StockSampler(range(10), num_replicas=3, rank=2, seed=4))
    assert isinstance(sampler, StockSampler)


# The iterator.


def test_a_pickled_iterator_is_small_and_counts_what_it_handed_out() -> None:
    sampler = DistributedSampler(range(1_000_000), num_replicas=4, rank=1)
    iterator = iter(sampler)
    for _ in range(70_000):  # past the first chunk
        next(iterator)
    assert iterator.taken == 70_000
    assert len(pickle.dumps(iterator)) < 2_000
    copy = pickle.loads(pickle.dumps(iterator))
    assert copy.taken == 70_000
    assert next(copy) == next(iterator)


def test_the_iterator_holds_only_this_ranks_share() -> None:
    sampler = DistributedSampler(range(100_000), num_replicas=8, rank=3)
    iterator = iter(sampler)
    share = iterator._share
    assert share is not None and share.numel() == 12_500 and share.dtype == torch.int32
    assert share.untyped_storage().nbytes() == 12_500 * 4


# Bool-likes.


@pytest.mark.parametrize(
    "flag",
    [np.True_, np.False_, np.array(True), torch.tensor(False), torch.tensor(True), 0, 1],
    ids=repr,
)
def test_numpy_and_torch_booleans_are_accepted(flag: Any) -> None:
    for name in ("shuffle", "drop_last"):
        ours = DistributedSampler(range(9), 2, 1, **{name: flag})
        stock = StockSampler(range(9), 2, 1, **{name: flag})
        assert getattr(ours, name) is bool(flag)
        assert list(ours) == list(stock)


@pytest.mark.parametrize("flag", ["no", "", None, 0.0, 1.5, 2, torch.tensor([True])], ids=repr)
def test_other_flag_values_are_rejected_naming_the_argument(flag: Any) -> None:
    for name in ("shuffle", "drop_last"):
        with pytest.raises(TypeError, match=f"^{name} must be a bool, got "):
            DistributedSampler(range(9), 2, 1, **{name: flag})


# Messages: the stock wording where it is accurate, the real problem where it is not.


def test_an_invalid_rank_starts_with_the_stock_message() -> None:
    message = r"^Invalid rank 2, rank should be in the interval \[0, 1\]"
    with pytest.raises(ValueError, match=message + "$"):
        StockSampler(range(4), 2, 2)
    with pytest.raises(ValueError, match=message + r": rank must be in \[0, 1\].*got 2"):
        DistributedSampler(range(4), 2, 2)


def test_zero_replicas_is_reported_as_such_not_as_a_rank() -> None:
    with pytest.raises(ValueError, match="Invalid rank 0"):
        StockSampler(range(4), 0, 0)
    with pytest.raises(ValueError, match=r"^num_replicas must be at least 1, got 0$"):
        DistributedSampler(range(4), 0, 0)


def test_a_missing_process_group_starts_with_the_stock_message() -> None:
    with pytest.raises(ValueError) as stock:
        StockSampler(range(4))
    with pytest.raises(ValueError, match=re.escape(str(stock.value))) as ours:
        DistributedSampler(range(4))
    assert str(ours.value).startswith(str(stock.value))
    assert "num_replicas was not given" in str(ours.value)


def test_a_dataset_without_length_starts_with_the_stock_message() -> None:
    with pytest.raises(TypeError, match=r"^object of type 'NoLength' has no len\(\): dataset"):
        DistributedSampler(NoLength(), 2, 0)


def test_stale_sizes_start_with_the_stock_assertion() -> None:
    for sizes in ((8, 16), (5, 11)):
        messages = []
        for sampler_class in (StockSampler, DistributedSampler):
            sampler = sampler_class(range(10), 2, 1)
            sampler.num_samples, sampler.total_size = sizes
            try:
                list(sampler)
            except AssertionError as error:
                messages.append(str(error))
            else:
                messages.append("")
        stock, ours = messages
        assert ours.startswith(stock) if stock else ours == ""


def test_a_seed_out_of_range_starts_with_the_stock_message() -> None:
    with pytest.raises(ValueError, match=r"^Overflow when unpacking long long"):
        list(StockSampler(range(4), 2, 0, seed=2**64))
    with pytest.raises(
        ValueError,
        match=r"^Overflow when unpacking long long: .*seed=18446744073709551616 \+ epoch=0",
    ):
        DistributedSampler(range(4), 2, 0, seed=2**64)


# Shrinking datasets.


class Resizable:
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


def test_a_shrunk_dataset_yields_what_the_stock_sampler_yields_and_warns_once() -> None:
    ours_data, stock_data = Resizable(10), Resizable(10)
    ours = DistributedSampler(ours_data, 4, 3, seed=1)
    stock = StockSampler(stock_data, 4, 3, seed=1)
    ours_data.size = stock_data.size = 7
    with pytest.warns(UserWarning, match=r"len\(dataset\) changed from 10 to 7 .*build a new"):
        first = list(ours)
    assert first == list(stock)
    ours.set_epoch(1)
    stock.set_epoch(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(ours) == list(stock)  # once only


def test_a_grown_dataset_raises_the_stock_assertion_without_a_warning() -> None:
    data = Resizable(10)
    sampler = DistributedSampler(data, 2, 0)
    data.size = 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AssertionError, match=r"^Number of indices"):
            list(sampler)


# Early errors.


def test_errors_come_as_early_as_the_information_allows() -> None:
    with pytest.raises(ValueError, match=r"seed=18446744073709551616 \+ epoch=0"):
        DistributedSampler(range(8), 2, 0, seed=2**64)
    DistributedSampler(range(8), 2, 0, seed=2**64, shuffle=False)  # never seeded
    sampler = DistributedSampler(range(8), 2, 0, seed=2**64 - 1)
    with pytest.raises(ValueError, match=r"seed=18446744073709551615 \+ epoch=1"):
        sampler.set_epoch(1)
    assert sampler.epoch == 0
    with pytest.raises(EpochTypeError, match=r"^epoch must be an integer, got float 1\.5$"):
        sampler.set_epoch(1.5)
    with pytest.raises(SeedTypeError):
        DistributedSampler(range(8), 2, 0, seed=1.5)


def test_epoch_errors_are_both_type_errors_and_the_stock_runtime_error() -> None:
    sampler = DistributedSampler(range(8), 2, 0)
    for catch in (TypeError, RuntimeError):
        with pytest.raises(catch):
            sampler.set_epoch(2.0)


# Through a DataLoader, with the generic alias.


def test_a_dataloader_takes_the_subscripted_class() -> None:
    sampler_class: Callable[..., DistributedSampler[int]] = DistributedSampler[int]
    sampler = sampler_class(range(11), num_replicas=2, rank=0, shuffle=np.False_)
    loader = DataLoader(range(11), batch_size=4, sampler=sampler)
    assert [batch.tolist() for batch in loader] == [[0, 2, 4, 6], [8, 10]]
