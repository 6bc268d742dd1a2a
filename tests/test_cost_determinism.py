"""The cost finding's numbers are the same on every run: fresh interpreters (each with
its own hash seed) without address-space randomisation (Linux), CPython's type cache
emptied before tracing, and the median of several, so one odd process cannot move a
number."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from studies.findings import cost

SIZES = (100, 300)


def test_one_odd_process_cannot_move_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    usual = [{"dataset size": 300, "implementation": "samplers", "heap peak to first index": 5523}]
    odd = [{"dataset size": 300, "implementation": "samplers", "heap peak to first index": 5456}]
    runs = iter([usual, odd, usual])
    seeds: list[int] = []
    monkeypatch.setattr(cost, "_fresh_rows", lambda sizes, seed: seeds.append(seed) or next(runs))
    assert cost.measure_in_fresh_process(SIZES, processes=3) == usual
    assert seeds == [0, 1, 2]  # each process its own hash seed


def test_every_number_is_the_median_of_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def row(value: int) -> list[dict[str, Any]]:
        return [{"dataset size": 10, "implementation": "torch", "heap held at first index": value}]

    runs = iter([row(7), row(3), row(5)])
    monkeypatch.setattr(cost, "_fresh_rows", lambda sizes, seed: next(runs))
    assert cost.measure_in_fresh_process(SIZES, processes=3)[0]["heap held at first index"] == 5
    assert cost.PROCESSES >= 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="setarch is Linux's")
def test_the_fresh_interpreters_run_without_address_randomisation() -> None:
    command = cost._command(SIZES)
    if command[0] == sys.executable:
        pytest.skip("setarch is not installed")
    assert command[2] == "-R" and command[3] == sys.executable
    assert command[-2:] == ["100", "300"]


@pytest.mark.timeout(600)
def test_repeated_measurements_of_the_small_sizes_are_identical() -> None:
    """Bounded: fresh interpreters with 4 hash seeds at the sizes where ours' heap held at
    the first index once moved by 67 bytes with the seed (and the checkout's path)."""
    first, *others = (cost._fresh_rows((10, *SIZES), seed) for seed in range(4))
    assert [row["dataset size"] for row in first] == [10, 10, 100, 100, 300, 300]
    assert all(row["heap held at first index"] > 0 for row in first)
    for rows in others:
        assert rows == first
