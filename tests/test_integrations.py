"""samplers.integrations in one process: imports, argument checks and state round trips.

The frameworks in real processes are in ``tests/test_integrations_processes.py``; here the
ranks are simulated with explicit ``num_replicas``/``rank``.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import (
    DistributedBatchSampler,
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)
from samplers.integrations.loop import BATCH_SAMPLERS, LoopPosition, our_sampler

ROOT = Path(__file__).resolve().parents[1]
SIZE = 43
BATCH = 4
DATASET = list(range(SIZE))
MODULES = {
    "accelerate": "accelerate",
    "transformers": "transformers",
    "lightning": "lightning",
    "torchdata": "torchdata",
    "ray": "ray",
}


#: Each sample's length, for the token and packed samplers; the mixtures' two sources are
#: the dataset's two halves, weighted by their sizes (or tokens): every sample once.
LENGTHS = [1 + (7 * index) % 13 for index in range(SIZE)]
HALVES = [DATASET[:20], DATASET[20:]]


def made(kind: str, world: int = 2, rank: int = 0, epoch: int = 0) -> Any:
    tokens = [sum(LENGTHS[:20]), sum(LENGTHS[20:])]
    if kind == "batches":
        sampler: Any = DistributedBatchSampler(DATASET, BATCH, world, rank, tail="uneven")
    elif kind == "wrapper":
        sampler = DistributedSamplerWrapper(RandomSampler(DATASET), world, rank, tail="uneven")
    elif kind == "tokens":
        sampler = DistributedTokenBatchSampler(LENGTHS, 16, world, rank)
    elif kind == "packed":
        sampler = DistributedPackedBatchSampler(LENGTHS, 16, 2, world, rank, window=16)
    elif kind == "mixture":
        sampler = DistributedMixtureSampler(HALVES, [20, 23], world, rank, tail="uneven")
    elif kind == "mixture batches":
        sampler = DistributedMixtureBatchSampler(
            HALVES, [20, 23], BATCH, world, rank, tail="uneven"
        )
    elif kind == "packed mixture":
        sampler = DistributedPackedMixtureSampler(HALVES, tokens, LENGTHS, 16, 2, world, rank)
    else:
        sampler = DistributedSampler(DATASET, world, rank, tail="uneven")
    sampler.set_epoch(epoch)
    return sampler


def arguments(sampler: Any) -> dict[str, Any]:
    if isinstance(sampler, BATCH_SAMPLERS):
        return {"batch_sampler": sampler}
    return {"batch_size": BATCH, "sampler": sampler}


KINDS = (
    "batches",
    "indices",
    "wrapper",
    "tokens",
    "packed",
    "mixture",
    "mixture batches",
    "packed mixture",
)


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_importing_the_samplers_imports_no_framework() -> None:
    done = python(
        "import sys, samplers, samplers.integrations\n"
        f"print(sorted(set({sorted(MODULES)!r}) & {{m.split('.')[0] for m in sys.modules}}))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_missing_framework_names_the_extra_to_install(module: str) -> None:
    blocked = {"lightning": ["lightning", "pytorch_lightning"]}.get(module, [MODULES[module]])
    done = python(
        "import sys\n"
        + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
        + f"import samplers.integrations.{module}\n"
    )
    assert done.returncode != 0
    # dsampler is installed from a clone: the command names it, never a package index.
    assert (
        f"install it with the '{module}' extra: pip install -e '.[{module}]' in the clone, "
        f"or pip install -e '{ROOT}[{module}]' from anywhere"
    ) in done.stderr
    assert f"'dsampler[{module}]'" not in done.stderr


def test_a_loader_without_a_sampler_of_ours_is_refused() -> None:
    for loader in (
        DataLoader(DATASET, batch_size=BATCH, shuffle=True),
        DataLoader(DATASET, batch_size=BATCH, sampler=StockSampler(DATASET, 2, 0)),
        DataLoader(DATASET, batch_size=None, sampler=made("indices")),
    ):
        with pytest.raises(TypeError, match="driven by a sampler of ours"):
            our_sampler(loader)


def counted(loader: DataLoader[Any], position: LoopPosition) -> Iterator[list[int]]:
    for batch in position.track(loader, len(loader)):
        yield batch.tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_the_loop_position_is_the_state_at_the_step_the_loop_reached(kind: str) -> None:
    """With workers prefetching, the state after k batches continues at batch k + 1."""
    whole = [batch.tolist() for batch in DataLoader(DATASET, **arguments(made(kind)))]
    sampler = made(kind)
    loader = DataLoader(DATASET, num_workers=2, **arguments(sampler))
    position = LoopPosition(*our_sampler(loader))
    batches = counted(loader, position)
    assert [next(batches) for _ in range(2)] == whole[:2]
    state = position.state_dict()
    assert position.taken == 2 and not position.finished
    rest = [batch.tolist() for batch in _resumed(kind, state)]
    assert rest == whole[2:]


def _resumed(kind: str, state: dict[str, Any], world: int = 2, rank: int = 0) -> Any:
    sampler = made(kind, world, rank)
    sampler.load_state_dict(state)
    return DataLoader(DATASET, **arguments(sampler))


def test_the_loop_position_at_the_epochs_end_starts_the_next_epoch() -> None:
    sampler = made("indices")  # 22 samples: the last batch is smaller than the batch size
    loader = DataLoader(DATASET, **arguments(sampler))
    position = LoopPosition(*our_sampler(loader))
    assert len(list(counted(loader, position))) == 6 and position.finished
    restored = made("indices")
    restored.load_state_dict(position.state_dict())
    restored.set_epoch(1)
    assert list(restored) == list(made("indices", epoch=1))


# --- Lightning's loader ------------------------------------------------------------------


@pytest.fixture(scope="module")
def lightning() -> Any:
    pytest.importorskip("lightning.fabric", reason="lightning is not installed")
    import samplers.integrations.lightning as module

    return module


@pytest.mark.parametrize("kind", KINDS)
def test_lightning_sees_a_distributed_sampler_and_sets_our_epoch(lightning: Any, kind: str) -> None:
    sampler = made(kind)
    loader = lightning.ShardedDataLoader(DATASET, **arguments(sampler))
    assert isinstance(loader.sampler, StockSampler)
    assert [b.tolist() for b in loader] == [
        b.tolist() for b in DataLoader(DATASET, **arguments(made(kind)))
    ]
    loader.sampler.set_epoch(3)
    assert sampler.epoch == 3
    if kind != "indices":
        with pytest.raises(TypeError, match="iterate the loader"):
            iter(loader.sampler)
        with pytest.raises(TypeError, match="take len"):
            len(loader.sampler)


@pytest.mark.parametrize("kind", KINDS)
def test_lightning_loader_state_resumes_the_epoch_and_counts_it_whole(
    lightning: Any, kind: str
) -> None:
    whole = [b.tolist() for b in lightning.ShardedDataLoader(DATASET, **arguments(made(kind)))]
    loader = lightning.ShardedDataLoader(DATASET, num_workers=2, **arguments(made(kind)))
    iterator = iter(loader)
    first = [next(iterator).tolist() for _ in range(2)]
    state = loader.state_dict()
    assert state["batches"] == 2 and not state["finished"]

    restored = lightning.ShardedDataLoader(DATASET, **arguments(made(kind)))
    restored.load_state_dict(state)
    assert restored.state_dict() == state  # loaded, not iterated: the same state
    assert len(restored) == len(whole)  # the epoch's batches, the 2 taken included
    rest = [batch.tolist() for batch in restored]
    assert first + rest == whole
    assert restored.state_dict()["finished"]
    assert restored.state_dict()["batches"] == len(whole)


def test_lightning_loader_refuses_a_foreign_state(lightning: Any) -> None:
    loader = lightning.ShardedDataLoader(DATASET, **arguments(made("batches")))
    good = loader.state_dict()
    for broken, field in (
        ([], "state must be a dict"),
        ({k: v for k, v in good.items() if k != "batches"}, "'batches' is missing"),
        ({**good, "batches": -1}, "'batches' must be at least 0"),
        ({**good, "finished": 1}, "'finished' must be a bool"),
        ({**good, "sampler": 3}, "'sampler' must be a Mapping"),
    ):
        with pytest.raises(ValueError, match=field):
            loader.load_state_dict(broken)


def test_lightning_loader_refuses_a_loader_without_ours(lightning: Any) -> None:
    with pytest.raises(TypeError, match="driven by a sampler of ours"):
        lightning.ShardedDataLoader(DATASET, batch_size=BATCH, shuffle=True)


# --- accelerate and the Hugging Face Trainer -----------------------------------------


@pytest.fixture
def accelerator() -> Iterator[Any]:
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed")
    from accelerate.state import AcceleratorState, PartialState

    yield accelerate.Accelerator(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()


def test_prepare_data_loader_checks_its_arguments(accelerator: Any) -> None:
    from samplers.integrations.accelerate import prepare_data_loader

    loader = DataLoader(DATASET, **arguments(made("batches")))
    with pytest.raises(TypeError, match="dataloader must be a torch DataLoader"):
        prepare_data_loader(DATASET, accelerator)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"accelerator must be an accelerate\.Accelerator"):
        prepare_data_loader(loader, object())
    prepared = prepare_data_loader(loader, accelerator)
    assert accelerator.prepare(prepared) is prepared  # recognised as prepared
    with pytest.raises(ValueError, match="already prepared by accelerate"):
        prepare_data_loader(prepared, accelerator)
    with pytest.raises(ValueError, match="already prepared by accelerate"):
        prepare_data_loader(accelerator.prepare(DataLoader(DATASET, batch_size=2)), accelerator)


@pytest.mark.parametrize("kind", KINDS)
def test_prepared_loader_state_continues_the_epoch(accelerator: Any, kind: str) -> None:
    from samplers.integrations.accelerate import prepare_data_loader

    whole = [b.tolist() for b in DataLoader(DATASET, **arguments(made(kind)))]
    loader = prepare_data_loader(
        DataLoader(DATASET, num_workers=2, **arguments(made(kind))), accelerator
    )
    iterator = iter(loader)
    first = [next(iterator).tolist() for _ in range(3)]  # accelerate has fetched a 4th
    state = loader.state_dict()
    restored = prepare_data_loader(
        DataLoader(DATASET, **arguments(made(kind, epoch=5))), accelerator
    )
    restored.load_state_dict(state)
    assert first + [b.tolist() for b in restored] == whole
    assert restored.iteration == 1  # the next iteration is the next epoch


@pytest.mark.parametrize("kind", KINDS)
def test_prepared_loader_restored_at_an_epochs_end_goes_on_with_the_next_epochs(
    accelerator: Any, kind: str
) -> None:
    """A state taken at the epoch's last step: the restored loader's first iteration is
    empty (the epoch is over), and each one after it is the next epoch (accelerate counts
    an iteration only once it yields, so the empty one set the same epoch again and every
    epoch after was empty)."""
    from samplers.integrations.accelerate import prepare_data_loader

    loader = prepare_data_loader(
        DataLoader(DATASET, num_workers=2, **arguments(made(kind))), accelerator
    )
    length = len(loader)
    for step, _ in enumerate(loader, start=1):
        if step == length:
            state = loader.state_dict()
    restored = prepare_data_loader(DataLoader(DATASET, **arguments(made(kind))), accelerator)
    restored.load_state_dict(state)
    passes = [[b.tolist() for b in restored] for _ in range(3)]
    assert passes[0] == []
    for epoch, batches in enumerate(passes[1:], start=1):
        fresh = made(kind)
        fresh.set_epoch(epoch)
        assert batches == [b.tolist() for b in DataLoader(DATASET, **arguments(fresh))]


def test_sharded_trainer_checks_its_sampler(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is not installed")
    import torch
    from accelerate.state import AcceleratorState, PartialState
    from transformers import TrainingArguments

    from samplers.integrations.transformers import ShardedTrainer

    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, use_cpu=True, report_to=[]
    )
    model = torch.nn.Linear(1, 1)
    try:
        refused = r"train_sampler must be a sampler of samplers \(DistributedBatchSampler"
        with pytest.raises(TypeError, match=refused):
            ShardedTrainer(
                model=model, args=args, train_dataset=DATASET, train_sampler=RandomSampler(DATASET)
            )
        wrong = DistributedBatchSampler(DATASET, 8, 2, 0)
        with pytest.raises(
            ValueError, match="batch_size is 8, but per_device_train_batch_size is 4"
        ):
            ShardedTrainer(model=model, args=args, train_dataset=DATASET, train_sampler=wrong)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()


# --- torchdata.nodes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def nodes() -> Any:
    return pytest.importorskip("torchdata.nodes", reason="torchdata is not installed")


def pipeline(nodes: Any, sampler: Any) -> Any:
    from samplers.integrations.torchdata import Loader, sampler_node

    source = sampler_node(sampler)
    if not isinstance(sampler, BATCH_SAMPLERS):
        source = nodes.Batcher(source, BATCH, drop_last=False)
    return Loader(nodes.Prefetcher(nodes.Mapper(source, list), 3))


def test_sampler_node_refuses_other_samplers(nodes: Any) -> None:
    from samplers.integrations.torchdata import sampler_node

    with pytest.raises(TypeError, match=r"sampler must be a sampler of samplers \(Distributed"):
        sampler_node(RandomSampler(DATASET))


@pytest.mark.parametrize("kind", KINDS)
def test_one_ranks_pipeline_state_resumes_on_another_world_size(nodes: Any, kind: str) -> None:
    seen: Counter[int] = Counter()
    states = []
    for rank in range(2):
        loader = pipeline(nodes, made(kind, 2, rank))
        iterator = iter(loader)
        seen.update(i for _ in range(2) for i in next(iterator))
        states.append(loader.state_dict())
    for rank in range(3):
        restored = pipeline(nodes, made(kind, 3, rank))
        restored.load_state_dict(states[1])
        seen.update(i for batch in restored for i in batch)
    assert seen == Counter(range(SIZE))


def test_a_pipeline_state_at_the_epochs_end_starts_the_next_epoch(nodes: Any) -> None:
    uninterrupted = pipeline(nodes, made("batches"))
    epochs = [list(uninterrupted) for _ in range(2)]
    loader = pipeline(nodes, made("batches"))
    iterator = iter(loader)
    assert [next(iterator) for _ in epochs[0]] == epochs[0]  # its last batch, nothing more
    restored = pipeline(nodes, made("batches"))
    restored.load_state_dict(loader.state_dict())
    # What comes next is epoch 1 (after an empty rest of epoch 0, if the loader shows it).
    assert (list(restored) or list(restored)) == epochs[1]


@pytest.mark.parametrize("kind", KINDS)
def test_a_pipeline_restored_at_an_epochs_end_saves_the_next_epochs_states(
    nodes: Any, kind: str
) -> None:
    """Restored at epoch 0's end, a state taken in epoch 1 (after 2 batches, and at its
    end) is epoch 1's: restored again, the loop gets exactly the rest of epoch 1, then
    epoch 2 (torchdata's own Loader kept returning the first restored state, so the second
    restore repeated epoch 1's first batches, or all of epoch 1)."""
    uninterrupted = pipeline(nodes, made(kind))
    epochs = [list(uninterrupted) for _ in range(3)]
    loader = pipeline(nodes, made(kind))
    assert list(loader) == epochs[0]
    at_end = loader.state_dict()
    for taken in (2, len(epochs[1])):
        restored = pipeline(nodes, made(kind))
        restored.load_state_dict(at_end)
        iterator = iter(restored)
        first = [next(iterator) for _ in range(taken)]
        again = pipeline(nodes, made(kind))
        again.load_state_dict(restored.state_dict())
        rest = list(again)
        if taken < len(epochs[1]):
            assert first + rest == epochs[1]
        else:
            assert first == epochs[1] and (rest or list(again)) == epochs[2]
    # The pipelines' prefetch threads end here, on this thread: torchdata's mapper cannot
    # join its own thread when the garbage collector happens to run on it later.
    del uninterrupted, loader, restored, iterator, again
    gc.collect()


def test_the_trainer_is_warned_when_an_epoch_has_more_batches_than_it_plans() -> None:
    """transformers' Trainer runs the first epoch's number of steps in every epoch: with a
    token sampler whose counts vary (45 or 46 batches here), ShardedTrainer's callback
    says how many batches a longer epoch leaves untrained."""
    pytest.importorskip("transformers")
    import random

    from samplers import SamplerWarning
    from samplers.integrations.transformers import epoch_batches, warn_shorter_plan

    generator = random.Random(1)
    lengths = [generator.randint(1, 300) for _ in range(500)]
    sampler = DistributedTokenBatchSampler(lengths, 1024, 2, 0)
    counts = [epoch_batches(sampler, epoch) for epoch in range(4)]
    assert counts == [45, 46, 45, 46] and sampler.epoch == 0  # counted on copies
    with pytest.warns(SamplerWarning, match="epoch 1 has 46 batches .* its last 1 are not"):
        warn_shorter_plan(sampler, 1, counts[0])
    warn_shorter_plan(sampler, 2, counts[0])  # as many as planned: nothing to say
    warn_shorter_plan(made("batches"), 1, 1)  # a fixed batch size: counts never vary
