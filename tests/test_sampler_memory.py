"""What each sampler holds per rank (``studies.core.sampler_memory``), against measurements,
and ``explain --summary`` flagging what no machine can hold."""

from __future__ import annotations

import json

import pytest
from torch.utils.data.distributed import DistributedSampler as StockDistributedSampler

from samplers import DistributedSampler
from studies.cli import main
from studies.core.cases import Case
from studies.core.sampler_memory import (
    NO_MACHINE,
    SAMPLERS,
    beyond_any_machine,
    memory_per_rank,
    memory_problem,
    python_int_list,
)
from studies.core.simulate import IndexDataset
from studies.findings.memory import python_heap, tensor_bytes

N = 100_000


@pytest.mark.parametrize("world", [1, 4])
def test_the_stock_samplers_bound_is_what_it_allocates(world: int) -> None:
    stock, _, _ = memory_per_rank(Case(N, world, 8))
    dataset = IndexDataset(N)
    made = StockDistributedSampler(dataset, num_replicas=world, rank=world - 1)
    assert tensor_bytes(made).largest == dict(stock.parts)["randperm(N) int64"] == 8 * N
    made = StockDistributedSampler(dataset, num_replicas=world, rank=world - 1)
    peak = python_heap(made).peak_to_first
    listed = dict(stock.parts)["list of N Python ints"]
    # The bound is what tracemalloc sees at least; it also sees the rank's slice (a list
    # of N / W slots) and the interpreter's own small allocations: a third more at one rank.
    assert listed <= peak <= 1.5 * listed


@pytest.mark.parametrize("world", [1, 4])
def test_our_randperm_bound_is_what_it_allocates(world: int) -> None:
    _, ours, _ = memory_per_rank(Case(N, world, 8, implementation="samplers"))
    made = DistributedSampler(IndexDataset(N), num_replicas=world, rank=0)
    used = tensor_bytes(made)
    assert used.largest == dict(ours.parts)["randperm(N) int32"] == 4 * N
    shared = dict(ours.parts).get("the rank's share int32", 0)
    assert shared == (0 if world == 1 else 4 * N // world)
    assert ours.bytes <= used.to_first
    made = DistributedSampler(IndexDataset(N), num_replicas=world, rank=0)
    assert python_heap(made).peak_to_first < python_int_list(N) / 20  # no list of N ints


def test_feistel_holds_nothing_that_grows_with_the_dataset() -> None:
    largest = []
    for size in (2**21 + 1, 2**22 + 1):  # above the domains it may hold whole
        made = DistributedSampler(IndexDataset(size), num_replicas=2, rank=0, permutation="feistel")
        largest.append(tensor_bytes(made).largest)
    assert largest[0] == largest[1] < 8 * 2**21
    assert memory_per_rank(Case(2**22 + 1, 2, 8)).pop().bytes == 0


def test_python_int_lists_count_slots_and_uncached_ints() -> None:
    assert python_int_list(0) == 0
    assert python_int_list(257) == 8 * 257  # 0..256 are cached
    assert python_int_list(258) == 8 * 258 + 28
    assert python_int_list(2**30 + 1) - python_int_list(2**30) == 8 + 32


def test_no_machine_is_a_rule_on_the_cases_own_sampler() -> None:
    # The smallest dataset whose stock sampler holds more than the rule: flagged there,
    # not one sample below; ours at that size is below the rule and is not flagged.
    low, high = 1, 10**12
    while low < high:
        middle = (low + high) // 2
        if beyond_any_machine(memory_per_rank(Case(middle, 8, 32))[0]):
            high = middle
        else:
            low = middle + 1
    assert memory_per_rank(Case(low, 8, 32))[0].bytes > NO_MACHINE
    assert memory_problem(Case(low, 8, 32)) is not None
    assert memory_problem(Case(low - 1, 8, 32)) is None
    assert memory_problem(Case(low, 8, 32, implementation="samplers")) is None
    assert memory_problem(Case(low, 8, 32, implementation="none", shuffle=False)) is None


def test_explain_summary_flags_a_sampler_no_machine_can_hold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # It said "No problems found" for the stock sampler's randperm(10**12) on every rank.
    argv = ["explain", "--dataset-size", "1e12", "--world-size", "8", "--batch-size", "32"]
    assert main([*argv, "--summary", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "No problems found" not in out
    assert "- [memory-beyond-any-machine] The torch DistributedSampler holds at least" in out
    assert "randperm(N) int64 7.28 TiB + list of N Python ints 36.4 TiB" in out
    assert 'Fix: Use ours with permutation="feistel": it holds nothing' in out
    for sampler in SAMPLERS:
        assert f"\n{sampler} " in out

    assert main([*argv, "--summary", "--epochs", "1", "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [entry["sampler"] for entry in found["memory"]] == list(SAMPLERS)
    expected = [held.bytes for held in memory_per_rank(Case(10**12, 8, 32))]
    assert [entry["bytes_at_least"] for entry in found["memory"]] == expected
    assert [v["name"] for v in found["verdicts"]] == ["memory-beyond-any-machine"]

    # Ours unshuffled holds nothing of the dataset's size: nothing to flag.
    assert main([*argv, "--summary", "--tail", "pad", "--no-shuffle", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdicts"] == []
