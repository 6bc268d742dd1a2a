"""The mixture benchmark: a probe in a fresh process, the record's tables and the speed
finding's sentences on it, computed from its rows. No assertion depends on how fast
anything ran."""

from __future__ import annotations

from typing import Any

import pytest

from studies.findings import mixture_record as mixture
from studies.mixtures import bench as mixture_bench
from studies.mixtures import ways as mixture_ways


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
        (
            [0.5, 2.0],
            [
                "on 1 rank (rank 0) 0.50 x and 2.00 x at 1,000,000 and 10,000,000 "
                "samples, 1 of the 2 sizes at most its time"
            ],
        ),
        ([0.5, 0.9], ["both sizes at most its time"]),
        (
            [1.5, 1.1, 0.7, 1.0],
            [
                "on 8 ranks (rank 7) 0.70 x and 1.00 x at 1,000,000 and 10,000,000 samples, "
                "both sizes at most its time; on 1 rank (rank 0) 1.50 x and 1.10 x",
                "none of the 2 sizes at most its time",
            ],
        ),
        (
            [1.5, 1.1, 1.2],
            [
                "none of the 2 sizes",
                "on 8 ranks (rank 7) 1.20 x at 1,000,000 "
                "samples, none of the 1 sizes at most its time",
            ],
        ),
    ],
)
def test_the_prose_quantifies_from_the_table(ours: list[float], said: list[str]) -> None:
    """Every cell's ratio is listed, per world size (the largest first), with how many
    sizes were at most the stock sampler's time."""
    text = mixture.prose(made_up(ours), "cores 2")
    for words in said:
        assert words in text
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
    assert all(f"{ratio:.2f} x" in finding.prose for ratio in epoch["ours / stock"])
    assert {"ours", "stock", "floor"} == {row["variant"] for row in record["rows"]}


def made_up_ways(first_ms: dict[str, float], skipped: tuple[str, ...] = ()) -> dict[str, Any]:
    """A record of ways of mixing at 100 and 1,000 samples on rank 7 of 8: each way's
    first index as given (ms) at 100 and ten times it at 1,000, its peak one tenth of its
    first index (MB); the ``skipped`` ways skipped at 1,000 (over 30 s)."""
    rows: list[dict[str, Any]] = []
    for total, scale in ((100, 1), (1000, 10)):
        for name, ms in first_ms.items():
            common = {"variant": name, "total": total, "world size": 8}
            if total == 1000 and name in skipped:
                rows.append({**common, "quantity": mixture.SKIPPED, "timeout (s)": 30.0})
                continue
            for quantity, median in ((mixture.FIRST, ms * scale / 1e3), (mixture.PEAK, ms / 10)):
                rows.append(
                    {**common, "quantity": quantity, "median": median, "min": median}
                    | {"max": median, "processes": 3}
                )
    return {"machine": {"cores": 2}, "threads": 1, "processes": 3, "ways": rows}


def test_the_ways_table_reads_medians_and_marks_the_skipped() -> None:
    table = mixture.ways_table(made_up_ways({"ours": 2.0, "b": 1.0, "c": 50.0}, ("c",)))
    assert table[mixture.WAY].tolist() == ["ours", "b", "c"]
    assert table[mixture.first_index_column(100)].tolist() == ["2.00", "1.00", "50.00"]
    assert table[mixture.peak_column(100)].tolist() == ["0.20", "0.10", "5.00"]
    assert table[mixture.first_index_column(1000)].tolist() == [
        "20.00",
        "10.00",
        "over 30 s (skipped)",
    ]
    assert table[mixture.peak_column(1000)].tolist()[2] == mixture.skipped_cell(30.0)


@pytest.mark.parametrize(
    ("first_ms", "skipped", "said"),
    [
        (
            {"ours": 2.0, "b": 1.0, "c": 50.0},
            ("c",),
            [
                "At 100 samples ours came after 2.00 ms, peaking 0.2 MB above the baseline; "
                "1 of the 2 other ways measured came sooner; they took from 1.00 ms (b) to "
                "50.00 ms (c), peaking up to 5.0 MB (c).",
                "At 1,000 samples ours came after 20.00 ms",
                "the 1 other ways measured came sooner",
                "1 of the 3 ways took over 30 s and was skipped: c.",
            ],
        ),
        (
            {"ours": 0.5, "b": 1.0, "c": 3.0},
            (),
            ["none of the 2 other ways measured came sooner", "on cores 2, rank 7 of 8"],
        ),
        (
            {"ours": 9.0, "b": 1.0, "c": 3.0},
            ("b", "c"),
            [
                "90.00 ms, peaking 0.9 MB above the baseline; 2 of the 3 ways took over 30 s "
                "and were skipped: b and c."
            ],
        ),
    ],
)
def test_the_ways_prose_quantifies_from_the_table(
    first_ms: dict[str, float], skipped: tuple[str, ...], said: list[str]
) -> None:
    text = mixture.ways_prose(made_up_ways(first_ms, skipped), "ours")
    for part in said:
        assert part in text


def test_the_scaled_sources_keep_the_finding_s_proportions() -> None:

    assert mixture_bench.scaled(sum(mixture_ways.SIZES)) == mixture_ways.SIZES
    assert mixture_bench.WAY_SIZES[0] == sum(mixture_ways.SIZES)
    large = mixture_bench.scaled(10**6)
    assert sum(large) == 10**6 and len(large) == len(mixture_ways.SIZES)
    assert all(
        abs(n / 10**6 - m / sum(mixture_ways.SIZES)) < 1e-5
        for n, m in zip(large, mixture_ways.SIZES, strict=True)
    )
    warm = mixture_bench.scaled(mixture_bench.WAY_WARM_UP)
    assert min(warm) >= mixture_ways.SHARDS  # a streamed source splits into SHARDS shards


def test_every_way_of_the_finding_is_recorded_at_every_size() -> None:

    record = mixture_bench.load()
    table = mixture.ways_table(record)
    assert table[mixture.WAY].tolist() == list(mixture_ways.BUILDERS)
    for total in mixture_bench.WAY_SIZES:
        for column in (mixture.first_index_column(total), mixture.peak_column(total)):
            assert table[column].notna().all(), column


def test_a_way_probed_in_a_fresh_process_reaches_its_first_index() -> None:

    for name in (mixture_ways.OURS, mixture_ways.HF_STREAM):
        measured = mixture_bench.measure_way_in_fresh_process(name, 14_380, 2, timeout=120)
        assert set(measured) == {mixture_bench.QUANTITIES[0], mixture_bench.QUANTITIES[2]}
        assert measured[mixture_bench.QUANTITIES[0]] > 0
        assert measured[mixture_bench.QUANTITIES[2]] >= 0


def test_a_way_over_the_timeout_is_recorded_skipped_and_its_probe_killed() -> None:
    import psutil

    rows = mixture_bench.ways(sizes=(20_000,), repeats=1, timeout=0.5, names=(mixture_ways.OURS,))
    assert rows == [
        {
            "variant": mixture_ways.OURS,
            "total": 20_000,
            "world size": mixture_bench.WORLD,
            "quantity": mixture_bench.SKIPPED,
            "timeout (s)": 0.5,
        }
    ]
    probes = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if "--probe-way" in line and "20000" in line and process.status() != "zombie":
            probes.append(process.pid)
    assert not probes  # the probe was killed with its launcher
