"""``group=``, ``seed=None`` and ``check_consistent`` on a real 2 x 2 mesh (4 gloo ranks).

Every test here starts real processes (CPU, gloo on 127.0.0.1, each launch bounded by its
timeout, the group destroyed at the end) through :func:`studies.engines.local_ranks.
launch`. The ranks arrange themselves as ``init_device_mesh("cpu", (2, 2),
mesh_dim_names=("dp", "tp"))``: global ranks 0 and 1 are data-parallel rank 0, ranks 2
and 3 data-parallel rank 1, and ``(0, 1)``, ``(2, 3)`` are the tensor-parallel groups.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import SequentialSampler
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import (
    DistributedBatchSampler,
    DistributedSampler,
    DistributedSamplerWrapper,
)
from studies.engines import mesh_runs
from studies.engines.local_ranks import launch
from studies.findings import mesh_sharding

pytestmark = pytest.mark.processes

SIZE = 20
LAUNCH_TIMEOUT = 120.0

KINDS: dict[str, Callable[..., Any]] = {
    "sampler": lambda **options: DistributedSampler(range(SIZE), **options),
    "batch sampler": lambda **options: DistributedBatchSampler(range(SIZE), 2, **options),
    "wrapper": lambda **options: DistributedSamplerWrapper(
        SequentialSampler(range(SIZE)), **options
    ),
}


def _outcome(action: Callable[[], Any]) -> Any:
    """``("ok", result)`` or ``(exception type name, message)``."""
    try:
        return ("ok", action())
    except Exception as error:
        return (type(error).__name__, str(error))


def _read(sampler: Any) -> list[int]:
    return [index for item in sampler for index in (item if isinstance(item, list) else [item])]


def _in_a_mesh(_: object) -> dict[str, Any]:
    """Rank work: placements, errors, checks, seeds and copies on the 2 x 2 mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_coordinate()
    result: dict[str, Any] = {"rank": dist.get_rank(), "dp": dp, "tp": tp}
    groups = {
        "mesh": mesh["dp"],
        "process group": mesh["dp"].get_group(),
        "flattened": mesh["dp", "tp"]._flatten(),
        "world": dist.group.WORLD,
    }
    for name, group in groups.items():
        for kind, build in KINDS.items():
            sampler = build(group=group)
            result[f"placement {name} {kind}"] = (sampler.num_replicas, sampler.rank)
            result[f"reads {name} {kind}"] = _read(sampler)
    agreeing = DistributedSampler(range(SIZE), num_replicas=2, rank=dp, group=mesh["dp"])
    result["explicit values that agree"] = (agreeing.num_replicas, agreeing.rank)
    lone = dist.new_group([0])  # a collective: every rank calls it; 1..3 are not members
    errors = {
        "2-D mesh": {"group": mesh},
        "num_replicas disagrees": {"num_replicas": 4, "group": mesh["dp"]},
        "rank disagrees": {"rank": 1 - dp, "group": mesh["dp"]},
        "not a member": {"group": lone},
    }
    for label, options in errors.items():
        for kind, build in KINDS.items():
            result[f"error {label} {kind}"] = _outcome(lambda b=build, o=options: b(**o))

    tensor_parallel = mesh["tp"]
    for kind, build in KINDS.items():
        defaults, sharded = build(), build(group=mesh["dp"])
        result[f"defaults alone {kind}"] = _outcome(defaults.check_consistent)
        result[f"defaults with replicas {kind}"] = _outcome(
            lambda s=defaults: s.check_consistent(replicas=tensor_parallel)
        )
        result[f"sharded with replicas {kind}"] = _outcome(
            lambda s=sharded: s.check_consistent(replicas=tensor_parallel)
        )
        result[f"sharded over the job {kind}"] = _outcome(
            lambda s=sharded: s.check_consistent(dist.group.WORLD)
        )
    wide = DistributedSampler(range(SIZE), num_replicas=8, rank=dist.get_rank())
    result["num_replicas beyond the job"] = _outcome(wide.check_consistent)
    odd_seed = DistributedSampler(range(SIZE), seed=int(dist.get_rank() == 3), group=mesh["dp"])
    result["one seed differs"] = _outcome(
        lambda: odd_seed.check_consistent(replicas=tensor_parallel)
    )

    agreed = {kind: build(seed=None, group=mesh["dp"]) for kind, build in KINDS.items()}
    result["agreed seeds"] = {kind: sampler.seed for kind, sampler in agreed.items()}
    result["agreed reads"] = _read(agreed["sampler"])

    original = DistributedSampler(range(SIZE), seed=3, group=mesh["dp"])
    copies = [copy.deepcopy(original), pickle.loads(pickle.dumps(original))]
    result["copies keep the group"] = [
        twin.group == original.group and twin.group.process_group is groups["process group"]
        for twin in copies
    ]
    result["copies read the same"] = [_read(twin) == _read(original) for twin in copies]
    result["copies check"] = [
        _outcome(lambda t=twin: t.check_consistent(replicas=tensor_parallel)) for twin in copies
    ]
    return result


@pytest.fixture(scope="module")
def mesh_results() -> list[dict[str, Any]]:
    return launch(_in_a_mesh, None, 4, timeout=LAUNCH_TIMEOUT)


def assert_peers_alike_and_shards_split(reads: list[list[int]]) -> None:
    """Global ranks 0 and 1 (2 and 3) read the same; the two shards split the dataset."""
    assert reads[0] == reads[1] and reads[2] == reads[3], reads
    assert sorted(reads[0] + reads[2]) == list(range(SIZE)), reads


def _stock_share(num_replicas: int, rank: int, seed: int = 0) -> list[int]:
    return list(StockSampler(range(SIZE), num_replicas=num_replicas, rank=rank, seed=seed))


@pytest.mark.timeout(200)
def test_placement_comes_from_the_group(mesh_results: list[dict[str, Any]]) -> None:
    for result in mesh_results:
        rank, dp = result["rank"], result["dp"]
        assert (dp, result["tp"]) == divmod(rank, 2)  # the mesh is row-major
        for kind in KINDS:
            for name in ("mesh", "process group"):
                assert result[f"placement {name} {kind}"] == (2, dp), (rank, name, kind)
            for name in ("flattened", "world"):
                assert result[f"placement {name} {kind}"] == (4, rank), (rank, name, kind)
        assert result["reads mesh sampler"] == _stock_share(2, dp)
        assert result["reads flattened sampler"] == _stock_share(4, rank)
        assert result["explicit values that agree"] == (2, dp)


@pytest.mark.timeout(200)
def test_tensor_parallel_peers_read_the_same_and_data_parallel_ranks_split(
    mesh_results: list[dict[str, Any]],
) -> None:
    for kind in KINDS:
        for key in (f"reads mesh {kind}", f"reads process group {kind}"):
            assert_peers_alike_and_shards_split([result[key] for result in mesh_results])


@pytest.mark.timeout(200)
def test_a_group_that_cannot_be_sharded_over_raises_naming_what_to_pass(
    mesh_results: list[dict[str, Any]],
) -> None:
    for result in mesh_results:
        rank, dp = result["rank"], result["dp"]
        for kind in KINDS:
            name, message = result[f"error 2-D mesh {kind}"]
            assert name == "ValueError"
            assert "2-D DeviceMesh with dimensions ('dp', 'tp') of shape (2, 2)" in message
            assert "group=mesh['dp']" in message and "mesh['dp', 'cp']._flatten()" in message
            assert result[f"error num_replicas disagrees {kind}"] == (
                "ValueError",
                "num_replicas=4 disagrees with group, which has 2 ranks (global ranks "
                f"{[result['tp'], result['tp'] + 2]}): leave num_replicas out, it comes from "
                "group",
            )
            name, message = result[f"error rank disagrees {kind}"]
            assert name == "ValueError"
            assert message.startswith(
                f"rank={1 - dp} disagrees with group: this process is rank {dp}"
            )
            outcome = result[f"error not a member {kind}"]
            if rank == 0:
                assert outcome[0] == "ok"
            else:
                assert outcome[0] == "ValueError"
                assert outcome[1].startswith("group is GroupMember.NON_GROUP_MEMBER (-100)")


@pytest.mark.timeout(200)
def test_the_replica_check_catches_the_defaults_under_tensor_parallelism_on_every_rank(
    mesh_results: list[dict[str, Any]],
) -> None:
    for kind in KINDS:
        raised = [result[f"defaults with replicas {kind}"] for result in mesh_results]
        assert {name for name, _ in raised} == {"InconsistentRanksError"}, kind
        assert len({message for _, message in raised}) == 1, kind  # the same on every rank
        message = raised[0][1]
        assert "ranks [0, 1] are replicas, which must read the same samples, but rank " in message
        assert "rank differs (ranks [0]: 0; ranks [1]: 1)" in message
        assert "rank differs (ranks [2]: 2; ranks [3]: 3)" in message
        assert message.endswith(
            "build the samplers with group= the data-parallel group (e.g. group=mesh['dp']), "
            "so that replicas share one shard"
        )
        for result in mesh_results:
            # Without replicas the defaults look like a sound 4-way split.
            assert result[f"defaults alone {kind}"] == ("ok", None)
            assert result[f"sharded with replicas {kind}"] == ("ok", None)


@pytest.mark.timeout(200)
def test_the_data_parallel_check_catches_wrong_world_sizes_and_ranks_on_every_rank(
    mesh_results: list[dict[str, Any]],
) -> None:
    for kind in KINDS:
        outcomes = {result[f"sharded over the job {kind}"] for result in mesh_results}
        assert len(outcomes) == 1
        ((name, message),) = outcomes
        assert name == "InconsistentRanksError"
        assert "the samplers on ranks [0, 1, 2, 3] have ranks [0, 0, 1, 1]" in message
    assert {result["num_replicas beyond the job"] for result in mesh_results} == {
        (
            "InconsistentRanksError",
            "the ranks' samplers disagree: the samplers use num_replicas=8, but the group "
            "they shard over has 4 processes (ranks [0, 1, 2, 3]): build them with "
            "num_replicas=4, or leave num_replicas out",
        )
    }
    # Rank 3's seed differs: its data-parallel group and its replicas see it, and every
    # rank raises the same error.
    assert {result["one seed differs"] for result in mesh_results} == {
        (
            "InconsistentRanksError",
            "the ranks' samplers disagree: over the group of ranks [1, 3]: seed differs "
            "(ranks [1]: 0; ranks [3]: 1); ranks [2, 3] are replicas, which must read the "
            "same samples, but seed differs (ranks [2]: 0; ranks [3]: 1)",
        )
    }


@pytest.mark.timeout(200)
def test_seed_none_is_agreed_over_the_whole_job(mesh_results: list[dict[str, Any]]) -> None:
    seeds = [result["agreed seeds"] for result in mesh_results]
    assert all(list(entry) == list(KINDS) for entry in seeds)
    for kind in KINDS:
        assert len({entry[kind] for entry in seeds}) == 1, kind
    assert_peers_alike_and_shards_split([result["agreed reads"] for result in mesh_results])


@pytest.mark.timeout(200)
def test_copies_and_pickles_keep_the_group(mesh_results: list[dict[str, Any]]) -> None:
    for result in mesh_results:
        assert result["copies keep the group"] == [True, True]
        assert result["copies read the same"] == [True, True]
        assert result["copies check"] == [("ok", None), ("ok", None)]


def _two_processes_saying_four(_: object) -> Any:
    """Rank work: a 2-process job whose samplers say num_replicas=4 (issue 15)."""
    sampler = DistributedSampler(range(8), num_replicas=4, rank=dist.get_rank(), shuffle=False)
    return list(sampler), _outcome(sampler.check_consistent)


@pytest.mark.timeout(150)
def test_a_two_process_job_sharding_four_ways_fails_the_check() -> None:
    results = launch(_two_processes_saying_four, None, 2, timeout=LAUNCH_TIMEOUT)
    assert sorted(index for read, _ in results for index in read) == [0, 1, 4, 5]
    assert {outcome for _, outcome in results} == {
        (
            "InconsistentRanksError",
            "the ranks' samplers disagree: the samplers use num_replicas=4, but the group they "
            "shard over has 2 processes (ranks [0, 1]): build them with num_replicas=2, or "
            "leave num_replicas out",
        )
    }


# --- the finding ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured() -> mesh_runs.Measured:
    return mesh_runs.measure(timeout=LAUNCH_TIMEOUT)


def _epoch_order(epoch: int, seed: int = 0) -> list[int]:
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(SIZE, generator=generator).tolist()


@pytest.mark.timeout(200)
def test_mesh_sharding_finding_holds(measured: mesh_runs.Measured) -> None:
    run = measured.run
    assert run.dataset_size == SIZE
    # What the ranks read is the stock sampler's shard: of 4 with the defaults, of 2 with
    # group=mesh["dp"] (tensor-parallel peers alike).
    for _, row in measured.reads.iterrows():
        rank, dp, epoch = int(row["global rank"]), int(row["dp"]), int(row["epoch"])
        if row["variant"] == "defaults":
            stock = StockSampler(range(SIZE), num_replicas=4, rank=rank, seed=0)
        elif row["variant"] == 'group=mesh["dp"]':
            stock = StockSampler(range(SIZE), num_replicas=2, rank=dp, seed=0)
        else:
            continue  # seed=None: a random seed, checked through the tables below
        stock.set_epoch(epoch)
        assert row["samples"] == list(stock), (row["variant"], rank, epoch)

    evidence = mesh_sharding.evidence(measured)
    replicas, checks, resumed = (table.frame for table in evidence.tables)
    by_variant = replicas.set_index("samplers built with")
    # Claim: with the defaults the members of every TP group read different samples.
    defaults = by_variant.loc["defaults"]
    assert defaults["TP groups whose members read different samples"] == defaults["TP groups"]
    assert defaults["fraction of TP groups"] == 1 and defaults["num_replicas"] == 4
    assert defaults["samples per process, per epoch"] == SIZE // 4
    # Claim: with group=mesh["dp"] (seed 0 or None) the members read the same samples.
    for variant in ('group=mesh["dp"]', 'group=mesh["dp"], seed=None'):
        sharded = by_variant.loc[variant]
        assert sharded["TP groups whose members read different samples"] == 0, variant
        assert sharded["num_replicas"] == 2 and sharded["samples per process, per epoch"] == 10
    assert (replicas["distinct samples the job reads, per epoch"] == SIZE).all()
    # Claim: check_consistent(replicas=mesh["tp"]) raises on every process for the
    # defaults, on none with group=mesh["dp"]; check_consistent() passes the defaults.
    raised = checks.set_index(["samplers built with", "call"])["processes that raised"]
    with_replicas, alone = 'check_consistent(replicas=mesh["tp"])', "check_consistent()"
    assert raised["defaults", with_replicas] == 4
    assert raised["defaults", alone] == 0
    assert raised['group=mesh["dp"]', with_replicas] == raised['group=mesh["dp"]', alone] == 0
    assert raised['group=mesh["dp"], seed=None', with_replicas] == 0
    # Claim: resumed on DP 1 x TP 2, every sample of the epoch exactly once per TP rank.
    assert set(resumed["mesh"]) == {"DP 2 x TP 2", "DP 1 x TP 2"}
    assert mesh_sharding.peers_agree(resumed)
    for tp in (0, 1):
        own = resumed[resumed["TP rank"] == tp]
        assert Counter(i for cell in own["samples"] for i in json.loads(cell)) == Counter(
            range(SIZE)
        )
    # Independently: the epoch's order, read 2 steps of 2 by each of 2 ranks, then the rest.
    order = _epoch_order(run.resume_epoch)
    before = resumed[resumed["phase"] == mesh_sharding.PHASES["saved"]]
    consumed = run.resume_steps * run.batch_size
    for _, row in before.iterrows():
        assert json.loads(row["samples"]) == order[int(row["DP rank"]) :: 2][:consumed]
    after = resumed[resumed["phase"] == mesh_sharding.PHASES["resumed"]]
    assert all(json.loads(cell) == order[2 * consumed :] for cell in after["samples"])
    assert "every one of the 20 samples exactly once" in evidence.prose
    # The claim says what these tables show, no more.
    assert "read different samples in every one of the 2 tensor-parallel groups" in (evidence.claim)
    assert "they read different samples in none of the 2 tensor-parallel groups (in none" in (
        evidence.claim
    )
    assert "raises on every process with one message for the defaults and passes on every" in (
        evidence.claim
    )
    assert "every one of the 20 samples exactly once that epoch." in evidence.claim


@pytest.mark.timeout(200)
def test_every_rank_saves_the_same_state(measured: mesh_runs.Measured) -> None:
    saved = measured.resume[measured.resume["phase"] == "saved"]["state"]
    assert len({json.dumps(state, sort_keys=True) for state in saved}) == 1
