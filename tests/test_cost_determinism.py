"""The cost finding's numbers are the same on every run: fresh interpreters without
address-space randomisation (Linux), and the median of several, so one odd process
cannot move a number."""

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
    monkeypatch.setattr(cost, "_fresh_rows", lambda sizes: next(runs))
    assert cost.measure_in_fresh_process(SIZES, processes=3) == usual


def test_every_number_is_the_median_of_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def row(value: int) -> list[dict[str, Any]]:
        return [{"dataset size": 10, "implementation": "torch", "heap held at first index": value}]

    runs = iter([row(7), row(3), row(5)])
    monkeypatch.setattr(cost, "_fresh_rows", lambda sizes: next(runs))
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
    """Bounded: 2 measurements of the sizes where a process once measured 67 bytes
    apart; a longer check repeats :func:`cost.measure_in_fresh_process` many times."""
    first = cost.measure_in_fresh_process(SIZES, processes=1)
    assert cost.measure_in_fresh_process(SIZES, processes=1) == first
