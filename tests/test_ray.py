"""samplers.integrations.ray: in one process, and in real TorchTrainer runs on a local cluster.

The real runs (``@pytest.mark.processes``) start one local Ray cluster per run, shut it
down whatever happens, and check that no Ray process is left.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import (
    DistributedBatchSampler,
    DistributedMixtureBatchSampler,
    DistributedMixtureSampler,
    DistributedMixtureTokenBatchSampler,
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
    DistributedTokenBatchSampler,
)

pytest.importorskip("ray")
integration = pytest.importorskip("samplers.integrations.ray")
import ray  # noqa: E402
import ray.train  # noqa: E402
import ray.train.torch  # noqa: E402

from studies.engines import ray_record, ray_resized, ray_runs  # noqa: E402
from studies.findings import engines  # noqa: E402

# Ray Data's configuration warns of its own deprecated options when Ray Train imports it.
pytestmark = pytest.mark.filterwarnings(r"ignore:`use_\w+` is deprecated:DeprecationWarning")

SIZE = 43
DATASET = list(range(SIZE))


#: A mixture of the dataset's two halves, weighted by their sizes: each sample once an epoch.
HALVES = [DATASET[:20], DATASET[20:]]


def built(kind: str, world: int, rank: int) -> DataLoader[Any]:
    lengths = ray_runs.LENGTHS
    sampler: Any
    if kind == "batches":
        return DataLoader(
            DATASET, batch_sampler=DistributedBatchSampler(DATASET, 4, world, rank, tail="uneven")
        )
    if kind == "tokens":
        sampler = DistributedTokenBatchSampler(lengths, 16, world, rank)
        return DataLoader(DATASET, batch_sampler=sampler)
    if kind == "packed":
        sampler = DistributedPackedBatchSampler(lengths, 16, 2, world, rank, window=16)
        return DataLoader(DATASET, batch_sampler=sampler)
    if kind == "mixture":
        sampler = DistributedMixtureSampler(HALVES, [20, 23], world, rank, tail="uneven")
        return DataLoader(sampler.dataset, batch_size=4, sampler=sampler)
    if kind == "mixture batches":
        sampler = DistributedMixtureBatchSampler(HALVES, [20, 23], 4, world, rank, tail="uneven")
        return DataLoader(sampler.dataset, batch_sampler=sampler)
    if kind == "mixture tokens":
        halves = [sum(lengths[:20]), sum(lengths[20:])]
        sampler = DistributedMixtureTokenBatchSampler(HALVES, halves, lengths, 16, world, rank)
        return DataLoader(sampler.dataset, batch_sampler=sampler)
    if kind == "packed mixture":
        halves = [sum(lengths[:20]), sum(lengths[20:])]
        sampler = DistributedPackedMixtureSampler(HALVES, halves, lengths, 16, 2, world, rank)
        return DataLoader(sampler.dataset, batch_sampler=sampler)
    if kind == "wrapper":
        sampler = DistributedSamplerWrapper(RandomSampler(DATASET), world, rank, tail="uneven")
    else:
        sampler = DistributedSampler(DATASET, world, rank, tail="uneven")
    return DataLoader(DATASET, batch_size=4, sampler=sampler)


def prepared(kind: str, world: int, rank: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    place = {"num_replicas": world, "rank": rank}
    monkeypatch.setattr(integration, "placement", lambda: place)
    return integration.prepare_data_loader(built(kind, world, rank), move_to_device=False)


KINDS = (
    "indices",
    "batches",
    "tokens",
    "wrapper",
    "packed",
    "mixture",
    "mixture batches",
    "mixture tokens",
    "packed mixture",
)


def our_sampler_of(loader: DataLoader[Any]) -> Any:
    from samplers.integrations.loop import our_sampler

    return our_sampler(loader)[0]


class _Context:
    """What Ray's ``prepare_data_loader`` asks of ``ray.train.get_context()``."""

    def __init__(self, world: int, rank: int) -> None:
        self.world, self.rank = world, rank

    def get_world_size(self) -> int:
        return self.world

    def get_world_rank(self) -> int:
        return self.rank


@contextlib.contextmanager
def ray_worker(world: int, rank: int, store: Path) -> Any:
    """Ray's context answered as worker ``rank`` of ``world`` (no cluster), in a gloo group
    of this process alone (the stock sampler Ray builds reads the default group)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ray.train, "get_context", lambda: _Context(world, rank))
            yield
    finally:
        dist.destroy_process_group()


def test_importing_the_integration_leaves_rays_own_function_as_it_is(tmp_path: Path) -> None:
    import importlib

    rays = ray.train.torch.prepare_data_loader
    importlib.reload(integration)
    assert ray.train.torch.prepare_data_loader is rays
    assert rays.__module__.startswith("ray.train.") and not hasattr(rays, "__wrapped__")
    # Ray's function, unpatched, still takes what it took: a loader over our index sampler
    # (a torch DistributedSampler) or, with add_dist_sampler=False, over any sampler.
    with ray_worker(2, 0, tmp_path / "store"):
        for kind in KINDS:
            loader = built(kind, 2, 0)
            kept = ray.train.torch.prepare_data_loader(
                loader, add_dist_sampler=False, move_to_device=False
            )
            assert kept is loader
        # A loader ours prepared keeps our sampler under Ray's default call too.
        prepared_loader = ray.train.torch.prepare_data_loader(
            integration.prepare_data_loader(built("indices", 2, 0), move_to_device=False),
            move_to_device=False,
        )
        assert isinstance(prepared_loader, integration.PreparedDataLoader)


@pytest.mark.parametrize("kind", ["batches", "tokens", "wrapper", "mixture", "mixture batches"])
def test_rays_own_function_replaces_any_other_sampler_of_ours(kind: str, tmp_path: Path) -> None:
    """What the Ray guide warns of, measured: ours is the supported path."""
    ours = our_sampler_of(built(kind, 2, 0))
    with ray_worker(2, 0, tmp_path / "store"):
        rebuilt = ray.train.torch.prepare_data_loader(built(kind, 2, 0), move_to_device=False)
    assert isinstance(rebuilt.sampler, StockSampler)
    assert type(ours) not in {type(rebuilt.sampler), type(rebuilt.batch_sampler)}


@pytest.mark.parametrize("kind", KINDS)
def test_prepared_loader_counts_epochs_and_resumes_on_another_world_size(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaders = [prepared(kind, 2, rank, monkeypatch) for rank in range(2)]
    assert all(isinstance(loader.sampler, StockSampler) for loader in loaders)
    epochs = []
    for _ in range(2):
        assert {loader.epoch for loader in loaders} == {len(epochs)}
        epochs.append([[i for b in loader for i in b.tolist()] for loader in loaders])
    for seen in epochs:
        assert Counter(i for part in seen for i in part) == Counter(DATASET)
    assert epochs[0] != epochs[1]  # epoch 1 reshuffled without a set_epoch call
    # Epoch 2: one step, then its state continues on 3 ranks.
    iterators = [iter(loader) for loader in loaders]
    first = [next(iterator) for iterator in iterators]
    state = loaders[0].state_dict()
    assert state == loaders[1].state_dict()
    resumed = [prepared(kind, 3, rank, monkeypatch) for rank in range(3)]
    for loader in resumed:
        loader.load_state_dict(state)
        assert loader.epoch == 2
    rest = [i for loader in resumed for b in loader for i in b.tolist()]
    seen = [i for b in first for i in b.tolist()] + rest
    assert Counter(seen) == Counter(DATASET)
    assert {loader.epoch for loader in resumed} == {3}


def test_prepared_loader_takes_the_epoch_set_on_loader_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loader = prepared("batches", 2, 0, monkeypatch)
    loader.sampler.set_epoch(5)  # as Ray's guide writes it
    assert loader.epoch == 5
    list(loader)
    assert loader.epoch == 6
    loader._position.sampler.set_epoch(9)  # on the sampler itself
    list(loader)
    assert loader.epoch == 10


def test_save_and_load_state_through_a_ray_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = prepared("indices", 2, 0, monkeypatch)
    iterator = iter(loader)
    taken = [next(iterator) for _ in range(2)]
    integration.save_state(tmp_path, loader)
    fresh = prepared("indices", 2, 0, monkeypatch)
    assert integration.load_state(fresh, ray.train.Checkpoint.from_directory(str(tmp_path)))
    whole = [b.tolist() for b in prepared("indices", 2, 0, monkeypatch)]
    assert [b.tolist() for b in taken] + [b.tolist() for b in fresh] == whole
    with pytest.raises(FileNotFoundError, match=r"dsampler-other\.json"):
        integration.load_state(
            fresh, ray.train.Checkpoint.from_directory(str(tmp_path)), name="other"
        )


def _rays_moving_loader(kind: str, workers: int) -> tuple[Any, Any]:
    """Rank 0 of 2's loader of ``kind`` (``workers`` DataLoader workers) as Ray's own
    ``prepare_data_loader(add_dist_sampler=False)`` returns it with its default
    ``move_to_device=True`` (a wrapper that fetches a batch ahead), and our sampler in it."""
    base = built(kind, 2, 0)
    loader = DataLoader(base.dataset, batch_sampler=base.batch_sampler, num_workers=workers)
    moved = ray.train.torch.prepare_data_loader(loader, add_dist_sampler=False)
    assert type(moved).__name__ == "_WrappedDataLoader"  # the wrapper this is about
    return moved, our_sampler_of(loader)


@pytest.mark.parametrize("epoch", [0, 1])
@pytest.mark.parametrize(
    ("kind", "workers"), [(kind, 0) for kind in KINDS] + [("indices", 2), ("packed", 2)]
)
def test_rays_own_call_that_moves_batches_ahead_keeps_our_state_at_the_loop(
    kind: str, workers: int, epoch: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's wrapper holds the next batch before the loop asks for it; our sampler's
    state_dict() taken in the loop is still the loop's step (the DataLoader's count less
    the batch held), so a restart from it continues exactly, at the first step, in the
    middle and after the last, in the first epoch and in the next one through the same
    wrapper. (A TorchTrainer run does the same: the engines finding.)"""
    # The device a Ray worker would be given: this process's CPU.
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cpu"))
    with ray_worker(2, 0, tmp_path / "store"):
        moved, sampler = _rays_moving_loader(kind, workers)
        sampler.set_epoch(epoch)
        whole = [ray_runs._indices(batch) for batch in moved]
        assert len(whole) >= 3
        for stop in (0, 1, len(whole) // 2, len(whole)):
            moved, sampler = _rays_moving_loader(kind, workers)
            if epoch:  # the epoch before, to its end, through the same wrapper
                sampler.set_epoch(epoch - 1)
                assert sum(1 for _ in moved) >= 3
            sampler.set_epoch(epoch)
            iterator = iter(moved)
            received = [ray_runs._indices(next(iterator)) for _ in range(stop)]
            state = sampler.state_dict()
            if stop == len(whole):
                assert next(iterator, None) is None  # the wrapper is its own iterator
                assert sampler.state_dict() == state
            again, resumed_sampler = _rays_moving_loader(kind, workers)
            resumed_sampler.load_state_dict(state)
            resumed_sampler.set_epoch(epoch)  # after the last step: an empty pass, intended
            rest = [ray_runs._indices(batch) for batch in again]
            assert received + rest == whole, (kind, epoch, stop)


def test_prepare_data_loader_names_what_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integration, "placement", lambda: {"num_replicas": 2, "rank": 1})
    with pytest.raises(ValueError, match=r"rank=0, but this Ray Train worker is rank 1 of 2"):
        integration.prepare_data_loader(built("indices", 2, 0))
    with pytest.raises(TypeError, match="it holds RandomSampler"):
        integration.prepare_data_loader(DataLoader(DATASET, batch_size=4, shuffle=True))
    with pytest.raises(TypeError, match="loader must come from"):
        integration.save_state(".", built("indices", 2, 1))


def test_prepared_loader_moves_nested_batches() -> None:
    batch = {"x": torch.zeros(2), "pair": (torch.ones(1), [torch.ones(1)]), "n": 3}
    moved = integration._moved(batch, torch.device("cpu"))
    assert moved["n"] == 3 and isinstance(moved["pair"], tuple)
    assert torch.equal(moved["pair"][1][0], torch.ones(1))


# Real TorchTrainer runs --------------------------------------------------------------------


def ray_processes(since: float) -> list[str]:
    """Ray's processes (GCS, raylet, workers) started since ``since``."""
    found = []
    for process in psutil.process_iter(["name", "cmdline", "create_time"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        named = process.info["name"] in ("raylet", "gcs_server") or cmdline.startswith("ray::")
        if not named or process.info["create_time"] < since:
            continue
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {cmdline[:60]}")
    return found


@pytest.fixture(scope="module")
def observed() -> engines.Observed:
    started = time.time()
    result = ray_record.observe()
    deadline = time.time() + 120  # a loaded machine takes a while to stop them
    while ray_processes(started) and time.time() < deadline:
        time.sleep(1)
    assert ray_processes(started) == []
    assert not ray.is_initialized()
    return result


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_every_sampler_we_ship_sees_every_sample_once_reshuffled_in_a_torch_trainer(
    observed: engines.Observed,
) -> None:
    """Through samplers.integrations.ray, and through Ray's own call that keeps the
    sampler: each sampler of ours, every sample exactly once in every epoch."""
    table = engines.cases_table(observed.cases)
    ours = [ray_runs.SAMPLERS[name] for name in ray_runs.OURS]
    assert len(ours) == 9
    for path in (engines.OURS, engines.KEPT, engines.UNMOVED):
        rows = table[table[engines.PREPARED] == path]
        assert list(rows[engines.SAMPLER]) == ours, path
        assert (rows[engines.STARTED] == engines.YES).all(), path
        assert (rows[engines.EXACT] == engines.YES).all(), path
        assert (rows[engines.RESHUFFLED] == engines.YES).all(), path
        assert rows[engines.ITERATES].str.endswith("(ours)").all(), path


def _last_epoch(rank: ray_runs.Seen) -> tuple[list[Any], list[Any]]:
    """The last epoch's batches before the restart (all of them), and after it."""
    last = ray_runs.EPOCHS - 1
    return [b for e, b in rank.before if e == last], [b for e, b in rank.after if e == last]


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_a_restart_from_a_ray_checkpoint_continues_exactly(observed: engines.Observed) -> None:
    """Every sampler we ship: the restart from the loader's state (ours), or from the
    sampler's own state when Ray's call kept it and hands back the loader as it was
    (move_to_device=False), continues exactly where the checkpoint was taken."""
    steps = ray_runs.CHECKPOINT_STEP
    continued = {"ours": "state", "ray-unmoved": "sampler state"}
    cases = [case for case in ray_runs.CASES if case.path in continued]
    assert {case.sampler for case in cases} == set(ray_runs.OURS)
    for case in cases:
        for rank in observed.cases[case.name]:
            whole, resumed = _last_epoch(rank)
            assert rank.restart == continued[case.path], case.name
            assert len(whole) > steps, case.name
            assert whole[:steps] + resumed == whole, case.name


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_rays_call_that_keeps_the_sampler_and_moves_batches_ahead_restarts_exactly(
    observed: engines.Observed,
) -> None:
    """add_dist_sampler=False alone: Ray's loader holds a batch fetched ahead when the loop
    saves the sampler's state, which leaves that batch out, so the restart continues
    exactly where the loop was."""
    steps = ray_runs.CHECKPOINT_STEP
    cases = [case for case in ray_runs.CASES if case.path == "ray-kept"]
    assert {case.sampler for case in cases} == set(ray_runs.OURS)
    for case in cases:
        for rank in observed.cases[case.name]:
            whole, resumed = _last_epoch(rank)
            assert rank.restart == "sampler state", case.name
            assert len(whole) > steps + 1, case.name
            assert whole[:steps] + resumed == whole, case.name


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_the_record_is_what_the_torch_trainer_runs_observe(observed: engines.Observed) -> None:
    """The engines finding renders studies/data/ray-runs.json: the runs, made again here,
    observe exactly what it holds (re-measure: python -m studies.engines.ray_record)."""
    recorded = ray_record.load()
    machine, versions = ray_record.machine_and_versions()
    assert {"CPU", "cores", "memory"} <= set(machine)
    from importlib.metadata import version

    assert versions["ray"] == version("ray") and versions["torch"] == version("torch"), (
        f"the record was made with other versions: re-measure it with {ray_record.COMMAND}"
    )
    assert dict(observed.cases) == dict(recorded.cases), ray_record.COMMAND
    assert tuple(observed.resized) == tuple(recorded.resized), ray_record.COMMAND
    assert engines.evidence(observed).claim == engines.evidence(recorded).claim


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_a_restart_on_fewer_workers_sees_every_sample_exactly_once(
    observed: engines.Observed,
) -> None:
    table = engines.resized_table(observed.resized)
    assert list(table[engines.EPOCH]) == list(range(ray_resized.RESIZED_EPOCHS))
    first, second = ray_resized.RESIZED_WORKERS
    assert list(table[engines.WORLD]) == [str(first), f"{first} then {second}", str(second)]
    assert (table[engines.EPOCH_NEVER] == 0).all()
    assert (table[engines.EPOCH_REPEATED] == 0).all()


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_engines_claims_hold_in_a_torch_trainer(observed: engines.Observed) -> None:
    table = engines.cases_table(observed.cases)
    resized = engines.resized_table(observed.resized)
    ray_path = table[table[engines.PREPARED] == engines.RAY].set_index(engines.SAMPLER)
    samplers = ray_runs.SAMPLERS
    # Ray replaced every sampler of ours but DistributedSampler with a stock sampler of its
    # own; the loaders of the batch samplers failed at their first batch.
    replaced = [name for name in ray_runs.OURS if name != "ours"]
    for name in replaced:
        assert ray_path.loc[samplers[name], engines.ITERATES] == "torch DistributedSampler"
    batch_samplers = ("batches", "tokens", "packed", "mixture-batches", "mixture-tokens")
    for name in (*batch_samplers, "packed-mixture"):
        assert ray_path.loc[samplers[name], engines.STARTED].startswith("no: "), name
    for name in ("wrapper", "mixture"):
        assert ray_path.loc[samplers[name], engines.STARTED] == engines.YES, name
    assert ray_path.loc[samplers["ours"], engines.ITERATES] == "DistributedSampler (ours)"
    # Every restart through Ray's path lost or repeated samples but ours', whose state,
    # saved in the loop, leaves out the batch Ray's loader fetched ahead.
    ran = ray_path[ray_path[engines.STARTED] == engines.YES]
    inexact = (ran[engines.RESTART_NEVER] > 0) | (ran[engines.RESTART_REPEATED] > 0)
    assert list(ran.index[~inexact]) == [samplers["ours"]]
    ours = table[table[engines.PREPARED] == engines.OURS]
    assert (ours[engines.RESTART_NEVER] == 0).all() and (ours[engines.RESTART_REPEATED] == 0).all()
    # Ray's call that keeps the sampler: the restart exact, batches moved ahead or not.
    kept = table[table[engines.PREPARED] == engines.KEPT]
    unmoved = table[table[engines.PREPARED] == engines.UNMOVED]
    for rows in (kept, unmoved):
        assert (rows[engines.RESTART_NEVER] == 0).all()
        assert (rows[engines.RESTART_REPEATED] == 0).all()
    evidence = engines.evidence(observed)
    assert evidence.claim == engines.claim(table, resized)
    count = len(ray_runs.OURS)
    assert f"replaced {count - 1} of the {count} samplers of ours" in evidence.claim
    assert f"kept all {count} samplers of ours" in evidence.claim
    assert "lost samples" not in evidence.claim.split("add_dist_sampler=False")[1]
    assert evidence.claim.count(f"continued exactly in all {count} loaders") == 3
    assert "in all 3 epochs" in evidence.claim


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_elastic_training_that_loses_a_node_sees_every_sample_exactly_once(
    tmp_path: Path,
) -> None:
    started = time.time()
    out, storage = tmp_path / "out", tmp_path / "storage"
    out.mkdir()
    storage.mkdir()
    result = ray_resized.elastic(out=str(out), storage=str(storage))
    assert result.error is None
    table = engines.resized_table(ray_resized.resized_seen(str(out)))
    first, second = ray_resized.RESIZED_WORKERS
    assert list(table[engines.WORLD]) == [str(first), f"{first} then {second}", str(second)]
    assert (table[engines.EPOCH_NEVER] == 0).all()
    assert (table[engines.EPOCH_REPEATED] == 0).all()
    deadline = time.time() + 120  # a loaded machine takes a while to stop them
    while ray_processes(started) and time.time() < deadline:
        time.sleep(1)
    assert ray_processes(started) == []
