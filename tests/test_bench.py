"""``dsampler bench``: options, the tidy table and its ratios, statuses, the picture.

No assertion here depends on how fast anything ran. The measurements of one small real
run (10**3 samples, one repeat) are checked for their shape and arithmetic only; the
rest uses a deterministic stand-in for the measuring process.
"""

from __future__ import annotations

import io
import json
import math
import struct
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure

import studies.bench.grid as grid_module
import studies.bench.variants as variants_module
from studies.bench import cli as bench_cli
from studies.bench.grid import COLUMNS, Grid, run_grid, skip_reason
from studies.bench.plot import draw, figure_size
from studies.bench.probe import Probe, measure, run
from studies.bench.tables import (
    constant_statuses,
    ratio_view,
    render_text,
    to_csv_text,
    to_json_text,
    value_view,
    with_ratios,
)
from studies.bench.variants import FLOOR, REFERENCE, VARIANTS, Variant
from studies.cli import build_parser, main
from studies.common.figures import DPI, render_png

NAMES = [variant.name for variant in VARIANTS]
#: Stand-in seconds per sample (first index, epoch) and bytes per sample, per variant.
FAKE = {
    "stock": (4e-8, 6e-8, 48),
    "ours": (2e-8, 9e-8, 9),
    "randperm int64": (1e-8, 5e-8, 8),
    "randperm int32": (1e-8, 4e-8, 4),
}


def fake_measure(probe: Probe, timeout: float) -> dict[str, Any]:
    """Deterministic results: feistel cannot be built, the others scale with N."""
    assert timeout > 0
    if probe.variant not in FAKE:
        return {"status": "unavailable: TypeError: no permutation argument"}
    first, epoch, per_sample = FAKE[probe.variant]
    size = probe.dataset_size
    if probe.num_workers is not None:
        return {"status": "ok", "first_s": first * size + 0.1 * probe.num_workers}
    return {
        "status": "ok",
        "first_s": first * size,
        "epoch_s": epoch * size,
        "peak_bytes": per_sample * size,
        "baseline_bytes": 10**8,
    }


def recording(calls: list[Probe]) -> Any:
    """:func:`fake_measure` that also appends each probe it is given to ``calls``."""

    def counting(probe: Probe, timeout: float) -> dict[str, Any]:
        calls.append(probe)
        return fake_measure(probe, timeout)

    return counting


def fake_frame(sizes: tuple[int, ...] = (10**3, 10**4), worlds: tuple[int, ...] = (1, 8)) -> Any:
    grid = Grid(sizes=sizes, world_sizes=worlds, repeats=2, num_workers=(0, 2))
    return run_grid(grid, available=10**12, measure_one=fake_measure)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["bench", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- options ------------------------------------------------------------------------------


def parse(*argv: str) -> dict[str, Any]:
    return bench_cli.settings(build_parser().parse_args(["bench", *argv]))


def test_defaults_and_large() -> None:
    assert parse() == {
        "sizes": (10**5, 10**6, 10**7),
        "world_sizes": (1, 8, 64),
        "repeats": 3,
        "num_workers": (0, 2),
    }
    options = parse("--sizes", "10**3", "1e4", "20000", "--large", "--world-sizes", "8", "2")
    assert options["sizes"] == (1000, 10_000, 20_000, 10**8, 10**9)
    assert options["world_sizes"] == (2, 8)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "0"], "--sizes must all be at least 1, got 0"),
        (["--sizes", "1.5e0"], "invalid size '1.5e0': 1.5 is not a whole number"),
        (["--sizes", "ten"], "argument --sizes: invalid size 'ten'"),
        (["--sizes", "1e-3"], "argument --sizes: invalid size '1e-3'"),
        (["--sizes", "2**63"], "--sizes must all be at most 10**10 (the stock sampler's"),
        (
            ["--sizes", "1e12"],
            "at most 10**10 (the stock sampler's permutation takes 8 bytes a "
            "sample), got 1000000000000",
        ),
        (["--sizes", "10", "10"], "--sizes must not repeat a value, got [10, 10]"),
        (["--world-sizes", "8", "0"], "--world-sizes must all be at least 1, got 0"),
        (["--world-sizes", "2", "2"], "--world-sizes must not repeat a value, got [2, 2]"),
        (["--repeats", "0"], "--repeats must be at least 1 and at most 20, got 0"),
        (["--repeats", "21"], "--repeats must be at least 1 and at most 20, got 21"),
        (["--world-sizes", "65537"], "--world-sizes must all be at most 65536, got 65537"),
        (["--num-workers", "17"], "--num-workers must all be at most 16, got 17"),
        (["--sizes", *map(str, range(1, 10))], "--sizes takes at most 8 values, got 9"),
        (["--timeout", "0"], "--timeout must be a number of seconds in (0, 3600], got 0.0"),
        (["--timeout", "7200"], "--timeout must be a number of seconds in (0, 3600]"),
        (["--record", "--sizes", "1000"], "--record measures the report's grid (the defaults)"),
        (["--repeats", "x"], "argument --repeats: invalid int value: 'x'"),
        (["--num-workers", "-1"], "--num-workers must all be at least 0, got -1"),
        (["--num-workers", "0", "0"], "--num-workers must not repeat a value, got [0, 0]"),
        (["--format", "xml"], "argument --format: invalid choice: 'xml'"),
    ],
)
def test_bad_options_fail_with_one_line_naming_them(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.setattr(grid_module, "measure", _never)
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, "")
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert errors[0].startswith("dsampler bench: error: ")
    assert message in errors[0]


def test_output_never_replaces_a_file(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(grid_module, "measure", fake_measure)
    small = ["--sizes", "1000", "--world-sizes", "2", "--repeats", "1", "--num-workers", "0"]
    code, out, _ = cli(capsys, *small, "--format", "csv", "--output", str(tmp_path / "new"))
    assert code == 0
    assert (tmp_path / "new" / "bench.csv").read_text() == out
    assert (tmp_path / "new" / "bench.png").read_bytes().startswith(b"\x89PNG")

    code, out, err = cli(capsys, *small, "--format", "csv", "--output", str(tmp_path / "new"))
    assert (code, out) == (2, "")
    assert f"--output {tmp_path / 'new'} already holds {tmp_path / 'new' / 'bench.csv'}" in err
    assert (tmp_path / "new" / "bench.csv").read_text().startswith("quantity,")

    (tmp_path / "file").write_text("mine")
    code, _, err = cli(capsys, *small, "--output", str(tmp_path / "file"))
    assert code == 2 and f"--output must be a directory, got the file {tmp_path / 'file'}" in err
    assert (tmp_path / "file").read_text() == "mine"


def test_output_is_checked_before_measuring(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(grid_module, "measure", _never)
    (tmp_path / "file").write_text("mine")
    inside_a_file = tmp_path / "file" / "results"
    code, out, err = cli(capsys, "--output", str(inside_a_file))
    assert (code, out) == (2, "")
    assert (
        f"--output {inside_a_file} cannot be created: {tmp_path / 'file'} is not a directory" in err
    )
    assert not inside_a_file.exists()


def _never(probe: Probe, timeout: float) -> dict[str, Any]:
    raise AssertionError(f"nothing may be measured for bad options, got {probe}")


# --- the grid, the tables and their ratios ------------------------------------------------


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    """One real run: 10**3 samples, 2 ranks, 1 repeat, num_workers 0 (fresh processes)."""
    grid = Grid(sizes=(1000,), world_sizes=(2,), repeats=1, num_workers=(0,))
    return run_grid(grid)


def test_ratios_divide_medians_of_one_run(measured: pd.DataFrame) -> None:
    assert list(measured.columns) == list(COLUMNS)
    quantities = ["first index", "epoch", "peak RSS above baseline", "first batch"]
    assert sorted(set(measured["quantity"])) == sorted(quantities)
    assert len(measured) == 4 * len(VARIANTS)  # 3 sampler quantities + first batch each
    for name in ("stock", "ours", "randperm int64", "randperm int32"):
        mine = measured[measured["variant"] == name]
        assert set(mine["status"]) == {"ok"}, mine
        assert (mine["repeats"] == 1).all()
        assert (mine["median"] == mine["min"]).all() and (mine["median"] == mine["max"]).all()
    peaks = measured[measured["quantity"] == "peak RSS above baseline"]
    assert all(isinstance(value, int) for value in peaks["median"].dropna())

    table = with_ratios(measured)
    for quantity in quantities:
        rows = table[table["quantity"] == quantity].set_index("variant")
        stock, floor = rows.loc[REFERENCE, "median"], rows.loc[FLOOR, "median"]
        ours = rows.loc["ours", "median"]
        if stock > 0 and floor > 0:
            assert rows.loc["ours", "/ stock"] == pytest.approx(ours / stock)
            assert rows.loc["ours", "/ floor"] == pytest.approx(ours / floor)
            assert rows.loc[FLOOR, "/ floor"] == 1.0 and rows.loc[REFERENCE, "/ stock"] == 1.0
    feistel = table[table["variant"] == "feistel"]
    if (feistel["status"] != "ok").all():  # before the feistel permutation exists
        assert feistel["/ stock"].isna().all() and feistel["/ floor"].isna().all()


def test_ratio_arithmetic_on_known_medians() -> None:
    frame = fake_frame()
    table = with_ratios(frame).set_index(["quantity", "dataset size", "world size", "variant"])
    cell = ("peak RSS above baseline", 10**4, 8)
    assert table.loc[(*cell, "stock"), "/ floor"] == 6.0  # 48 / 8 bytes per sample
    assert table.loc[(*cell, "ours"), "/ stock"] == pytest.approx(9 / 48)
    assert table.loc[(*cell, "randperm int32"), "/ floor"] == 0.5
    assert math.isnan(table.loc[(*cell, "feistel"), "/ floor"])
    loader = with_ratios(frame)
    loader = loader[(loader["quantity"] == "first batch") & (loader["dataset size"] == 10**4)]
    by = loader.set_index(["num_workers", "variant"])
    assert by.loc[(2, "ours"), "/ stock"] == pytest.approx((2e-4 + 0.2) / (4e-4 + 0.2))
    assert set(loader["world size"]) == {8}  # the DataLoader runs at the largest world size

    # A divisor that is missing or not positive gives no ratio.
    zero = frame.copy()
    zero.loc[(zero["variant"] == FLOOR) & (zero["quantity"] == "epoch"), "median"] = 0.0
    assert with_ratios(zero).query("quantity == 'epoch'")["/ floor"].isna().all()


def test_views_and_formats_show_the_tidy_numbers() -> None:
    frame = fake_frame()
    values = value_view(frame, "first index", drop=("feistel",))
    assert list(values.columns) == [
        "dataset size",
        "world size",
        "stock (ms)",
        "ours (ms)",
        "randperm int64 (ms)",
        "randperm int32 (ms)",
    ]
    assert values["stock (ms)"].tolist()[-1] == "0.400 (0.400..0.400)"  # 4e-8 s x 10**4
    ratios = ratio_view(frame, "peak RSS above baseline", drop=("feistel",))
    assert list(ratios.columns) == [
        "dataset size",
        "world size",
        "ours / stock",
        "stock / floor",
        "ours / floor",
        "randperm int32 / floor",
    ]
    assert ratios["stock / floor"].tolist() == [6.0] * 4

    records = json.loads(to_json_text(frame))
    assert list(records[0]) == [*COLUMNS, "/ stock", "/ floor"]
    assert len(records) == len(frame)
    parsed = pd.read_csv(io.StringIO(to_csv_text(frame)))
    assert list(parsed.columns) == [*COLUMNS, "/ stock", "/ floor"]
    assert parsed["median"].tolist()[:2] == [
        pytest.approx(value) for value in frame["median"].tolist()[:2]
    ]


# --- statuses: unavailable and skipped ----------------------------------------------------


def test_a_variant_that_cannot_be_built_is_reported_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any) -> Any:
        raise TypeError("unexpected keyword argument 'permutation'")

    monkeypatch.setattr(variants_module, "VARIANTS", (*VARIANTS, Variant("broken", broken, 0)))
    result = run(Probe("broken", 1000, 2, 0))
    assert result == {"status": "unavailable: TypeError: unexpected keyword argument 'permutation'"}

    frame = fake_frame()
    feistel = frame[frame["variant"] == "feistel"]
    assert len(feistel) == len(frame) // len(VARIANTS)  # one row per cell, never dropped
    assert set(feistel["status"]) == {"unavailable: TypeError: no permutation argument"}
    assert feistel["median"].isna().all() and (feistel["repeats"] == 0).all()
    assert constant_statuses(frame) == {"feistel": feistel["status"].iloc[0]}
    text = render_text(frame, "header")
    assert "feistel: unavailable: TypeError: no permutation argument" in text
    assert "feistel (ms)" not in text  # named once, not as a column of identical cells


def test_an_unavailable_variant_is_measured_once_per_cell() -> None:
    calls: list[Probe] = []
    counting = recording(calls)
    grid = Grid(sizes=(1000,), world_sizes=(2,), repeats=3, num_workers=(0,))
    run_grid(grid, available=10**12, measure_one=counting)
    counts = {name: sum(call.variant == name for call in calls) for name in NAMES}
    assert counts == {"stock": 6, "ours": 6, "randperm int64": 6, "randperm int32": 6, "feistel": 2}


def test_variants_that_cannot_fit_are_skipped_and_never_attempted() -> None:
    assert (
        skip_reason("stock", 10**9, 25 * 10**9)
        == "skipped: needs ~48 GB, over 4/5 of the 25 GB available"
    )
    assert skip_reason("ours", 10**9, 25 * 10**9) is None  # 8 GB
    assert skip_reason("ours", 10**9, 10 * 10**9) is None  # exactly 4/5
    assert skip_reason("ours", 10**9, 10 * 10**9 - 1) is not None
    assert (
        skip_reason("ours", 10**9, 9 * 10**9)
        == "skipped: needs ~8 GB, over 4/5 of the 9 GB available"
    )
    assert skip_reason("feistel", 10**9, 10**9) is None

    calls: list[Probe] = []
    counting = recording(calls)
    grid = Grid(sizes=(1000, 10**9), world_sizes=(8,), repeats=1, num_workers=(0,))
    frame = run_grid(grid, available=25 * 10**9, measure_one=counting)
    assert not any(call.variant == "stock" and call.dataset_size == 10**9 for call in calls)
    stock = frame[(frame["variant"] == "stock") & (frame["dataset size"] == 10**9)]
    assert set(stock["status"]) == {"skipped: needs ~48 GB, over 4/5 of the 25 GB available"}
    assert len(stock) == 4  # three sampler quantities and the first batch
    text = render_text(frame, "header")
    assert "skipped: needs ~48 GB, over 4/5 of the 25 GB available" in text


def test_a_crashing_measurement_is_a_failed_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    result = measure(Probe("no such variant", 10, 1, 0), timeout=120)
    assert result["status"].startswith("failed: KeyError")

    def flaky(probe: Probe, timeout: float) -> dict[str, Any]:
        if probe.variant == "ours" and probe.num_workers is None:
            return {"status": "failed: timed out after 60 s"}
        return fake_measure(probe, timeout)

    grid = Grid(sizes=(1000,), world_sizes=(2,), repeats=2, num_workers=(0,))
    frame = run_grid(grid, available=10**12, measure_one=flaky)
    ours = frame[(frame["variant"] == "ours") & (frame["quantity"] != "first batch")]
    assert set(ours["status"]) == {"failed: timed out after 60 s"}
    assert ours["median"].isna().all()


# --- the picture --------------------------------------------------------------------------


def png_size(content: bytes) -> tuple[int, int]:
    assert content.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", content[16:24])
    return width, height


def test_plot_renders_deterministically_sized() -> None:
    frame = fake_frame(sizes=(10**3, 10**4, 10**5), worlds=(1, 8, 64))
    size = figure_size(3)
    first = render_png(lambda figure: draw(figure, frame), size)
    assert first == render_png(lambda figure: draw(figure, frame), size)
    assert png_size(first) == (round(size[0] * DPI), round(size[1] * DPI))
    assert figure_size(1)[0] < figure_size(3)[0]

    figure = Figure(figsize=size)
    draw(figure, frame)
    axes = figure.axes
    assert len(axes) == 9  # three quantities x three world sizes
    assert all(panel.get_xscale() == "log" and panel.get_yscale() == "log" for panel in axes)
    assert [panel.get_ylabel() for panel in axes[::3]] == [
        "time to first index (s)",
        "time for the rank's epoch (s)",
        "peak RSS above baseline (MB)",
    ]
    assert all(panel.get_xlabel() == "dataset size N (samples)" for panel in axes[6:])
    styles = {(line.get_marker(), line.get_linestyle()) for line in axes[0].get_lines()}
    assert len(styles) == len(VARIANTS)  # every line can be told apart where they overlap
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == [*NAMES[:-1], "feistel (not measured)"]


# --- the finding --------------------------------------------------------------------------


def test_the_speed_prose_quotes_its_run() -> None:
    """The prose reads its numbers from the run's table (here: the stand-in's)."""
    from studies.findings import speed

    grid = Grid(sizes=(10**7,), world_sizes=(1, 8, 64), repeats=2, num_workers=(0, 2))
    frame = run_grid(grid, available=10**12, measure_one=fake_measure)
    facts = {"cores": "2", "torch": "x"}
    prose = speed._prose(frame, grid, facts, constant_statuses(frame))
    assert prose.startswith("Recorded on: cores 2, torch x. At 10,000,000 samples on 8 ranks")
    assert "the time to the first index is 400 ms for the stock sampler, 200 ms for ours" in prose
    assert "So ours takes 2.00 x its int32 floor and the stock sampler 4.00 x its int64" in prose
    assert "the int64 draw itself took from 100 to 100 ms" in prose
    assert "480 MB for the stock sampler, 90 MB for ours, 80 MB for the int64 draw" in prose
    assert "40 MB for the int32 draw (ours / int32 draw 2.25, stock / int64 draw 6.00)" in prose
    assert "takes ours 1.50 x the stock sampler's time" in prose
    assert "after 400 ms (stock) and 200 ms (ours) with `num_workers=0`" in prose
    assert "The feistel variant was not measured anywhere: unavailable: TypeError" in prose
    claim = speed._claim(frame, grid, facts)
    assert "ours took 2.00 x the time of its own draw" in claim
    assert "the stock sampler 4.00 x the int64 draw it makes" in claim


def test_the_speed_claim_quotes_the_recorded_run() -> None:
    """The claim's ratios are those of the committed record's medians."""
    from studies.bench.record import load
    from studies.findings import build, speed

    recorded = load()
    frame = recorded.frame
    finding = build(speed)

    def median(quantity: str, variant: str) -> float:
        rows = frame[
            (frame["quantity"] == quantity)
            & (frame["dataset size"] == max(recorded.grid.sizes))
            & (frame["world size"] == speed.QUOTED_WORLD_SIZE)
            & (frame["variant"] == variant)
        ]
        assert (rows["status"] == "ok").all()
        return float(rows["median"].iloc[0])

    first = median("first index", "ours") / median("first index", speed.OURS_FLOOR)
    assert f"ours took {first:.2f} x the time of its own draw" in finding.claim
    stock = median("first index", "stock") / median("first index", "randperm int64")
    assert f"the stock sampler {stock:.2f} x the int64 draw it makes" in finding.claim
    assert all(value in finding.claim for value in recorded.machine.values())


def test_the_speed_prose_compares_every_cell_with_the_stock_sampler() -> None:
    """The sentence on ours and feistel against the stock sampler is computed from the
    table: its largest ratios, and every cell above the stock sampler's median, of every
    quantity (times, peak memory, the DataLoader's first batch), listed (or none), on the
    committed record and on made-up runs."""
    from studies.bench.record import load
    from studies.bench.tables import with_ratios
    from studies.findings import build, speed

    frame = load().frame
    text = speed.against_stock(frame)
    assert text in build(speed).prose
    worse = speed.worse_than_stock(frame)
    # Every cell of ours and feistel in the whole table above 1 x the stock sampler's,
    # whatever its quantity: in the committed record, feistel's first index and whole
    # epoch on 1 rank at 10^5 samples.
    rows = with_ratios(frame)
    above = rows[rows["variant"].isin(["ours", "feistel"]) & (rows["/ stock"] > 1)]
    assert len(worse) == len(above) == 2
    assert set(above["quantity"]) == {"first index", "epoch"}
    for _, row in above.iterrows():
        assert speed.cell_words(row) in text
        assert f"({row['/ stock']:.2f} x)" in text
    assert f"{len(above)} cells:" in text
    assert "time to the first index at 100,000 samples on 1 rank (1.02 x)" in text
    assert "whole epoch at 100,000 samples on 1 rank (1.45 x)" in text
    assert ("No cell of either" in text) == worse.empty

    grid = Grid(sizes=(10**3, 10**4), world_sizes=(1, 8), repeats=1, num_workers=(0,))
    made_up = run_grid(grid, available=10**12, measure_one=fake_measure)
    text = speed.against_stock(made_up)  # ours' epoch is 1.5 x the stock sampler's
    assert "to the first index, ours 0.50 (1,000 samples, 1 rank)" in text
    assert "feistel not measured" in text
    assert text.count("ours, whole epoch at") == 4 and text.count("(1.50 x)") == 4
    epochs = (made_up["variant"] == "ours") & (made_up["quantity"] == "epoch")
    made_up.loc[epochs, "median"] = made_up.loc[epochs, "median"] / 3
    text = speed.against_stock(made_up)
    assert "whole epoch, ours 0.50" in text
    assert ("No cell of either" in text) == speed.worse_than_stock(made_up).empty
    memory = (made_up["variant"] == "ours") & (made_up["quantity"] == "peak RSS above baseline")
    made_up.loc[memory, "median"] = made_up.loc[memory, "median"] * 100
    text = speed.against_stock(made_up)  # now ours' memory is above the stock sampler's
    assert "ours, peak memory at 1,000 samples on 1 rank" in text


def test_a_record_reads_back_exactly(tmp_path: Path) -> None:
    from studies.bench.record import RecordError, load, record_text, save

    grid = Grid(sizes=(10**3, 10**4), world_sizes=(1, 8), repeats=2, num_workers=(0, 2))
    frame = run_grid(grid, available=10**12, measure_one=fake_measure)
    path = tmp_path / "record.json"
    save(record_text(frame, grid, {"cores": "2"}), path)
    again = load(path)
    assert again.grid == grid and again.machine == {"cores": "2"}
    pd.testing.assert_frame_equal(again.frame, frame)
    assert [type(v) for v in again.frame["median"]] == [type(v) for v in frame["median"]]
    save(record_text(frame, grid, {"cores": "4"}), path)  # its own file: replaced
    assert load(path).machine == {"cores": "4"}
    mine = tmp_path / "mine.json"
    mine.write_text("{}")
    with pytest.raises(RecordError, match="is not a recorded bench run: not replaced"):
        save(record_text(frame, grid, {}), mine)
    assert mine.read_text() == "{}"
    with pytest.raises(RecordError, match="no 'generated_by' mark"):
        load(mine)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_sigterm_stops_the_measuring_processes(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    root = Path(__file__).resolve().parents[1]
    environment = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "studies.cli", "bench", "--sizes", "1e7"]
    command += ["--world-sizes", "1", "--repeats", "3", "--num-workers", "0"]
    bench = subprocess.Popen(
        command, env=environment, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        parent = psutil.Process(bench.pid)
        deadline = time.monotonic() + 120
        measuring: list[psutil.Process] = []
        while time.monotonic() < deadline and not measuring:
            measuring = [
                child
                for child in parent.children(recursive=True)
                if "studies.bench.probe" in " ".join(child.cmdline())
            ]
            time.sleep(0.2)
        assert measuring, "no measuring process started"
        family = parent.children(recursive=True)
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
        assert bench.returncode == 143, err
        assert b"interrupted" in err
        _, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, alive
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.communicate()


def test_the_default_timeout_is_capped_at_the_documented_3600_seconds() -> None:
    from studies.bench import cli, grid

    assert grid.MAX_TIMEOUT == cli.MAX_TIMEOUT == 3600
    assert grid._timeout(10**6) == 65
    assert grid._timeout(10**12) == 3600  # was 5,000,060 s: an OverflowError in poll()
    assert grid._timeout(cli.MAX_SIZE) == 3600
