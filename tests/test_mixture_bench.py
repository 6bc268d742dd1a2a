"""The mixture benchmark: a probe in a fresh process, the record's tables and the speed
finding's sentences on it, computed from its rows. No assertion depends on how fast
anything ran."""

from __future__ import annotations

from typing import Any

import pytest

from studies import mixture_bench
from studies.bench import mixture


def made_up(ours: list[float]) -> dict[str, Any]:
    """A record with stock 1 s and floor 0.1 s per cell, ours as given, cells at 10**6 and
    10**7 on 1 rank, and a first index of 5 ms at 10**6 and 8 ms at 10**9."""
    rows: list[dict[str, Any]] = []
    cells = [(10**6, 1), (10**7, 1), (10**6, 8), (10**7, 8)][: len(ours)]
    for (total, world), value in zip(cells, ours, strict=True):
        for variant, median in (("ours", value), ("stock", 1.0), ("floor", 0.1)):
            rows.append(
                {
                    "variant": variant,
                    "total": total,
                    "world size": world,
                    "quantity": mixture.EPOCH,
                    "median": median,
                    "min": median,
                    "max": median,
                    "processes": 3,
                }
            )
    for total, first, peak in ((10**6, 0.005, 1.5), (10**9, 0.008, 2.0)):
        for quantity, median in ((mixture.FIRST, first), (mixture.PEAK, peak)):
            rows.append(
                {
                    "variant": "ours",
                    "total": total,
                    "world size": 8,
                    "quantity": quantity + mixture.FIRST_ONLY,
                    "median": median,
                    "min": median,
                    "max": median,
                    "processes": 3,
                }
            )
    return {"machine": {}, "threads": 1, "sources": 100, "processes": 3, "rows": rows}


def test_the_tables_divide_medians_of_the_record() -> None:
    record = made_up([0.5, 2.0])
    epoch = mixture.epoch_table(record)
    assert epoch["ours / stock"].tolist() == [0.5, 2.0]
    assert epoch["stock / floor"].tolist() == [10.0, 10.0]
    assert epoch["ours / floor"].tolist() == [5.0, 20.0]
    first = mixture.first_index_table(record)
    assert first["first index (ms)"].tolist() == [5.0, 8.0]
    assert first["peak RSS above baseline (MB)"].tolist() == [1.5, 2.0]


@pytest.mark.parametrize(
    ("ours", "said"),
    [
        ([0.5, 2.0], "1 of the 2 cells was at most"),
        ([0.5, 0.9], "both cells were at most"),
        ([0.5, 0.9, 0.7, 1.0], "all 4 cells were at most"),
        ([1.5, 1.1, 1.2], "none of the 3 cells were at most"),
    ],
)
def test_the_prose_quantifies_from_the_table(ours: list[float], said: str) -> None:
    text = mixture.prose(made_up(ours), "cores 2")
    assert said in text
    assert f"from {min(ours):.2f} x" in text and f"to {max(ours):.2f} x" in text
    assert "came after 5.0 ms at 1,000,000 samples and 8.0 ms at 1,000,000,000" in text


def test_the_speed_finding_quotes_the_recorded_mixture_run() -> None:
    from studies.findings import build, speed

    record = mixture_bench.load()
    finding = build(speed)
    epoch = mixture.epoch_table(record)
    assert (
        mixture.prose(
            record, speed._machine({name: str(value) for name, value in record["machine"].items()})
        )
        in finding.prose
    )
    assert f"from {epoch['ours / stock'].min():.2f} x" in finding.prose
    assert {"ours", "stock", "floor"} == {row["variant"] for row in record["rows"]}


def test_a_probe_in_a_fresh_process_measures_every_quantity() -> None:
    measured = mixture_bench.measure_in_fresh_process("ours", 3000, 2, True, timeout=120)
    assert set(measured) == set(mixture_bench.QUANTITIES)
    first, whole, peak = (measured[quantity] for quantity in mixture_bench.QUANTITIES)
    assert 0 < first <= whole and peak >= 0
    alone = mixture_bench.measure_in_fresh_process("stock", 3000, 2, False, timeout=120)
    assert set(alone) == {mixture_bench.QUANTITIES[0], mixture_bench.QUANTITIES[2]}
