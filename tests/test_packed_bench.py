"""The packed benchmark (studies/bench/packed.py) at tiny sizes, and the speed finding's
tables and sentences on its record, computed from the record's rows. No assertion depends
on how fast anything ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from studies.bench import packed
from studies.findings import packed_record


def test_a_probe_in_a_fresh_process_measures_every_quantity() -> None:
    for variant in packed.VARIANTS:
        measured = packed.measure_in_fresh_process(variant, 3000, timeout=300)
        assert set(measured) == set(packed.QUANTITIES)
        assert 0 < measured["first batch (s)"] <= measured["whole epoch (s)"]
        assert measured["peak RSS above baseline (MB)"] >= 0


def test_the_inputs_are_the_documented_draws() -> None:
    drawn = packed.lengths(5000)
    assert drawn.dtype.is_floating_point is False
    assert int(drawn.min()) >= 1 and int(drawn.max()) <= packed.MAX_LENGTH
    assert packed.lengths(5000).equal(drawn)  # a function of the size and the seed
    datasets, weights = packed.sources(10**6)
    sizes = [len(d) for d in datasets]
    assert len(sizes) == len(weights) == packed.SOURCES and sum(sizes) == 10**6
    assert max(sizes) / min(sizes) > 100  # three orders of magnitude, nearly


def test_a_record_of_tiny_sizes_has_every_cell(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    def measure(variant: str, size: int) -> dict[str, float]:
        calls.append((variant, size))
        return dict.fromkeys(packed.QUANTITIES, float(len(calls)))

    made = packed.record([1000, 2000], repeats=2, measure=measure)
    # Each repeat visits every variant in turn.
    assert calls[:3] == [(v, 1000) for v in packed.VARIANTS]
    assert len(made["rows"]) == 2 * len(packed.VARIANTS) * len(packed.QUANTITIES)
    assert {row["processes"] for row in made["rows"]} == {2}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(made))
    assert packed.load(path) == made
    assert packed.load(tmp_path / "absent.json") is None


def made_up(epochs: dict[str, float], first_at_largest: dict[str, float]) -> dict[str, Any]:
    """A record at 10**6 and 10**8: each variant's epoch (s) at 10**6 as given and 100
    times that at 10**8; its first batch 0.01 s at 10**6 and as given at 10**8."""
    rows = []
    for size, scale in ((10**6, 1), (10**8, 100)):
        for variant in packed.VARIANTS:
            first = 0.01 if size == 10**6 else first_at_largest.get(variant, 0.01)
            values = {
                packed_record.FIRST: first,
                packed_record.EPOCH: epochs[variant] * scale,
                packed_record.PEAK: 1.0,
            }
            for quantity, median in values.items():
                rows.append(
                    {
                        "variant": variant,
                        "size": size,
                        "quantity": quantity,
                        "median": median,
                        "min": median,
                        "max": median,
                        "processes": 3,
                    }
                )
    return {
        "machine": {"cores": 2},
        "threads": 1,
        "world size": 8,
        "rank": 7,
        "max_length": 4096,
        "rows_per_batch": 4,
        "sources": 100,
        "rows": rows,
    }


def test_the_tables_divide_medians_of_the_record() -> None:
    record = made_up({"token": 1.0, "packed": 1.5, "packed mixture": 4.5}, {})
    record["rows"] = [r for r in record["rows"] if r["size"] == 10**6]
    epoch = packed_record.epoch_table(record)
    assert epoch["packed / token"].tolist() == [1.5]
    assert epoch["packed mixture / packed"].tolist() == [3.0]
    assert epoch["packed mixture / token"].tolist() == [4.5]
    first = packed_record.first_table(record)
    assert first["packed: first batch (ms)"].tolist() == [10.0]
    record["rows"] = [
        {**r, "median": 0.025}
        if (r["variant"], r["quantity"]) == (packed.VARIANTS[2], packed_record.FIRST)
        else r
        for r in record["rows"]
    ]
    assert packed_record.first_table(record)[packed_record.FIRST_RATIO].tolist() == [2.5]


#: The start of the sentence on the packed mixture's first batch, and the sizes it names.
FIRST_BATCH = "first batch, from building the sampler, as a multiple of the packed sampler's, was "
SIZES = "1,000,000 and 100,000,000 samples"


@pytest.mark.parametrize(
    ("epochs", "firsts", "said"),
    [
        (
            {"token": 1.0, "packed": 1.5, "packed mixture": 2.0},
            {"token": 0.1, "packed": 0.15, "packed mixture": 0.19},
            [
                "both sizes within 2 x",
                "all 3 samplers within 0.2 s",
                f"{FIRST_BATCH}1.00 x and 1.27 x at {SIZES} (both sizes within 2 x)",
            ],
        ),
        (
            {"token": 1.0, "packed": 2.5, "packed mixture": 7.5},
            {"token": 0.1, "packed": 0.3, "packed mixture": 0.4},
            [
                "none of the 2 sizes within 2 x",
                "1 of the 3 samplers within 0.2 s",
                f"{FIRST_BATCH}1.00 x and 1.33 x at {SIZES} (both sizes within 2 x)",
            ],
        ),
        (
            {"token": 1.0, "packed": 1.5, "packed mixture": 2.0},
            {"token": 0.1, "packed": 0.1, "packed mixture": 0.25},
            [
                "both sizes within 2 x",
                "2 of the 3 samplers within 0.2 s",
                f"{FIRST_BATCH}1.00 x and 2.50 x at {SIZES} (1 of the 2 sizes within 2 x)",
            ],
        ),
    ],
)
def test_the_sentences_count_against_the_targets(
    epochs: dict[str, float], firsts: dict[str, float], said: list[str]
) -> None:
    text = packed_record.prose(made_up(epochs, firsts))
    for words in said:
        assert words in text
    assert "100,000,000 samples" in text


def test_without_a_record_the_finding_says_not_yet_recorded() -> None:
    assert "not yet recorded" in packed_record.prose(None)
    assert packed_record.COMMAND in packed_record.prose(None)
    assert packed_record.tables(None) == ()


def test_the_shared_epoch_timer_times_first_and_last_and_refuses_a_prepared_peak() -> None:
    """``studies.bench.probe.timed_epoch``, which the token and packed probes share: the
    first item comes no later than the last; with a slack far below 0 the high-water mark
    always stands above the baseline plus the slack, so it refuses, naming why."""
    from studies.bench.probe import timed_epoch

    first, whole, peak = timed_epoch(lambda: iter(range(1000)))
    assert 0 <= first <= whole and peak >= 0
    with pytest.raises(RuntimeError, match="the peak would be the preparation's"):
        timed_epoch(lambda: iter(range(3)), slack=-(1 << 40))


def test_the_documented_record_command_runs(tmp_path: Path) -> None:
    """``python -m studies.bench.packed --record`` (narrowed to a tiny size), as a user
    runs it: each probe starts this module by name in a fresh interpreter."""
    import subprocess
    import sys

    out = tmp_path / "packed.json"
    command = [sys.executable, "-m", "studies.bench.packed", "--record", "--sizes", "2000"]
    command += ["--variants", "token", "packed", "--repeats", "1", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    made = json.loads(out.read_text())
    assert {(row["variant"], row["size"]) for row in made["rows"]} == {
        ("token", 2000),
        ("packed", 2000),
    }
