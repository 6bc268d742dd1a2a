"""A sampler of ours warns, naming the fix, when something shards its share a second time."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader

from samplers import DistributedBatchSampler, DistributedSampler, DistributedSamplerWrapper
from samplers.resharding import ReshardingWarning

SIZE = 43
DATASET = list(range(SIZE))


def sharded() -> DistributedSampler[int]:
    return DistributedSampler(DATASET, 2, 0, tail="uneven")


def warnings_of(make: Callable[[], Any], epochs: int = 2) -> list[str]:
    """The ReshardingWarnings raised while iterating ``make()`` for ``epochs`` epochs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = make()
        for _ in range(epochs):
            list(loader)
    return [str(w.message) for w in caught if issubclass(w.category, ReshardingWarning)]


def framework(name: str) -> Any:
    return pytest.importorskip(name, reason=f"{name.split('.')[0]} is not installed")


def test_accelerate_sharding_our_sampler_warns_once_and_names_the_fix() -> None:
    shard = framework("accelerate.data_loader").BatchSamplerShard
    for split_batches in (False, True):
        sampler = BatchSampler(sharded(), 4, False)
        loader = DataLoader(
            DATASET, batch_sampler=shard(sampler, 2, 1, split_batches=split_batches)
        )
        found = warnings_of(lambda loader=loader: loader)
        assert len(found) == 1, found  # once per sampler, not once per epoch
        assert "accelerate.data_loader.BatchSamplerShard splits it over 2 processes" in found[0]
        assert "samplers.integrations.accelerate.prepare_data_loader" in found[0]


def test_accelerate_sharding_our_batch_sampler_warns_with_workers_too() -> None:
    shard = framework("accelerate.data_loader").BatchSamplerShard
    batches = DistributedBatchSampler(DATASET, 4, 2, 1, tail="uneven")
    found = warnings_of(
        lambda: DataLoader(DATASET, batch_sampler=shard(batches, 2, 1), num_workers=2), epochs=1
    )
    assert len(found) == 1 and "DistributedBatchSampler already gives" in found[0]


def test_lightning_wrapping_our_sampler_warns() -> None:
    wrapper = framework("lightning.fabric.utilities.distributed").DistributedSamplerWrapper
    found = warnings_of(lambda: DataLoader(DATASET, sampler=wrapper(sharded(), 2, 0)))
    assert len(found) == 1
    assert "lightning.fabric.utilities.distributed.DistributedSamplerWrapper" in found[0]
    assert "samplers.integrations.lightning.ShardedDataLoader" in found[0]


def test_our_wrapper_around_a_sharded_sampler_warns() -> None:
    found = warnings_of(
        lambda: DataLoader(DATASET, sampler=DistributedSamplerWrapper(sharded(), 2, 0))
    )
    assert len(found) == 1 and "samplers.wrapper.DistributedSamplerWrapper" in found[0]
    assert "wrap a sampler that is not sharded" in found[0]


def passthrough_shard() -> Any:
    shard = framework("accelerate.data_loader").BatchSamplerShard
    return DataLoader(DATASET, batch_sampler=shard(BatchSampler(sharded(), 4, False), 1, 0))


@pytest.mark.parametrize(
    "make",
    [
        lambda: DataLoader(DATASET, sampler=sharded(), batch_size=4),
        lambda: DataLoader(DATASET, sampler=sharded(), batch_size=4, num_workers=2),
        lambda: DataLoader(
            DATASET, batch_sampler=DistributedBatchSampler(DATASET, 4, 2, 0, auto_epoch=True)
        ),
        # An unsharded sampler may be sharded by a wrapper: that is what wrappers are for.
        lambda: DataLoader(
            DATASET, sampler=DistributedSamplerWrapper(DistributedSampler(DATASET, 1, 0), 2, 0)
        ),
        passthrough_shard,  # a shard over one process splits nothing
    ],
    ids=["dataloader", "workers", "batch-sampler", "unsharded-inside-wrapper", "one-process"],
)
def test_no_warning_where_nothing_shards_twice(make: Callable[[], Any]) -> None:
    assert warnings_of(make) == []


def test_stateful_dataloader_and_nodes_do_not_shard_again() -> None:
    stateful = framework("torchdata.stateful_dataloader").StatefulDataLoader
    nodes = framework("torchdata.nodes")
    assert warnings_of(lambda: stateful(DATASET, sampler=sharded(), batch_size=4)) == []
    assert warnings_of(lambda: nodes.Loader(nodes.SamplerWrapper(sharded()))) == []


def test_the_check_is_one_call_in_each_samplers_iter() -> None:
    import inspect

    for module in ("samplers.sampler", "samplers.batch_sampler", "samplers.wrapper"):
        source = inspect.getsource(importlib.import_module(module))
        assert source.count("resharding.check(self)") == 1, module


def test_a_framework_rebuilding_our_batch_sampler_gets_the_fix() -> None:
    """Lightning rebuilds batch samplers as cls(its_sampler, batch_size=..., drop_last=...)."""
    from torch.utils.data.distributed import DistributedSampler as StockSampler

    with pytest.raises(TypeError, match=r"ShardedDataLoader .*use_distributed_sampler=False"):
        DistributedBatchSampler(StockSampler(DATASET, 2, 0), batch_size=4, drop_last=False)
    with pytest.raises(TypeError, match=r"takes tail='pad', 'drop' or 'uneven', not drop_last"):
        DistributedBatchSampler(DATASET, 4, 2, 0, drop_last=True)  # type: ignore[arg-type]


def test_lightning_rebuilding_our_batch_sampler_raises_our_error() -> None:
    from torch.utils.data.distributed import DistributedSampler as StockSampler

    data = framework("lightning.pytorch.utilities.data")
    loader = DataLoader(DATASET, batch_sampler=DistributedBatchSampler(DATASET, 4, 2, 0))
    with pytest.raises(TypeError, match=r"samplers\.integrations\.lightning\.ShardedDataLoader"):
        data._update_dataloader(loader, StockSampler(DATASET, 2, 0))
