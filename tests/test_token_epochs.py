"""The device recorder of whole epochs (studies.tokens.epoch_timing), run on CPU: its
batches, its attention paths, the backend it records, its timing loop under a synthetic
clock (the fit and ours under it), the smoke run through the command line, and what the
token-costs finding makes of a record (studies.tokens.epoch_record). Nothing asserted
here depends on how fast this machine is."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from studies.findings import token_costs
from studies.tokens import epoch_record, epoch_timing
from studies.tokens.epoch_timing import (
    PADDED_MODES,
    SMOKE_MODEL,
    Model,
    ModelShape,
    Prepared,
    Session,
    prepare,
)

CPU = torch.device("cpu")
#: The synthetic clock's step model, at full-scale lengths: q = 1e-6 / 1e-10 = 10,000.
OVERHEAD, PER_TOKEN, PER_ATTENTION = 0.01, 1e-6, 1e-10


def synthetic_clock(scale: int):
    """Runs the step (so the backends are recorded) and returns the step model's time of
    the batch's full-scale padded shape (packed: its rows as padded rows)."""

    def timer(step, batch: Prepared) -> float:
        step()
        rows, positions = batch.tokens.shape
        length = positions * scale
        return OVERHEAD + PER_TOKEN * rows * length + PER_ATTENTION * rows * length**2

    return timer


def test_a_padded_batch_is_padded_to_its_longest_or_to_a_multiple() -> None:
    batch = prepare([40, 9, 17], False, 64, 4, 50, CPU, seed=0)
    assert batch.tokens.shape == (3, 10) and batch.shape == [3, 10]
    assert batch.cu_seqlens is None and not batch.packed
    assert [int((row != -100).sum()) for row in batch.labels] == [10, 2, 4]
    assert torch.equal(batch.labels[0], batch.tokens[0])
    wider = prepare([40, 9, 17], False, 64, 4, 50, CPU, seed=0, multiple=4)
    assert wider.tokens.shape == (3, 12) and wider.shape == [3, 12]
    assert int((wider.labels != -100).sum()) == 16  # the same samples, more padding


def test_a_packed_batch_is_its_rows_each_sequence_in_cu_seqlens() -> None:
    # Rows of 64 (16 positions at 1/4): [40, 20] [30, 30] [8], each tail its own sequence.
    batch = prepare([40, 20, 30, 30, 8], True, 64, 4, 50, CPU, seed=0)
    assert batch.tokens.shape == (3, 16) and batch.shape == [5, 3]
    assert batch.cu_seqlens is not None and batch.cu_seqlens.dtype == torch.int32
    assert batch.cu_seqlens.tolist() == [0, 10, 15, 16, 23, 30, 32, 34, 48]
    assert batch.max_seqlen == 14
    assert (batch.labels[0, 15:] == -100).all() and (batch.labels[2, 2:] == -100).all()
    assert int((batch.labels != -100).sum()) == 10 + 5 + 7 + 7 + 2


def test_packed_attention_on_cpu_equals_each_sample_alone() -> None:
    torch.manual_seed(0)
    model = Model(ModelShape(layers=1, width=16, heads=2, vocabulary=10)).eval()
    block = model.blocks[0]
    batch = prepare([12, 20, 8], True, 48, 4, 10, CPU, seed=0)  # one row: 3, 5, 2, tail 2
    x = torch.randn(1, 12, 16)
    packed, backend = block.attend(x, batch)
    assert backend is None  # the packed path records the varlen kernel, not SDPA's
    for start, end in [(0, 3), (3, 8), (8, 10)]:
        alone = prepare([(end - start) * 4], False, 48, 4, 10, CPU, seed=0)
        expected, _ = block.attend(x[:, start:end], alone)
        torch.testing.assert_close(packed[:, start:end], expected)


def test_the_varlen_causal_keyword_is_one_varlen_attn_takes() -> None:
    from torch.nn.attention.varlen import varlen_attn

    found = epoch_timing.varlen_causal()
    assert found in ({"is_causal": True}, {"window_size": (-1, 0)})
    assert set(found) <= set(inspect.signature(varlen_attn).parameters)
    assert epoch_timing.packed_backend(CPU).startswith("per-sequence sdpa")


def test_the_recorded_backend_is_sdpas_choice_under_the_mode() -> None:
    q = torch.randn(2, 2, 8, 4)
    with sdpa_kernel(SDPBackend.MATH):
        assert epoch_timing.sdpa_choice(q, q, q) == "MATH"
    with epoch_timing.mode_context("flash"):
        assert epoch_timing.sdpa_choice(q, q, q) == "FLASH_ATTENTION"
    torch.manual_seed(0)
    model = Model(SMOKE_MODEL)
    with sdpa_kernel(SDPBackend.MATH):
        model.loss(prepare([64, 32], False, 128, 32, 64, CPU, seed=0))
    assert model.last_backend == "MATH"
    model.loss(prepare([64, 32], True, 128, 32, 64, CPU, seed=0))
    assert model.last_backend is None


def test_the_model_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="width must be a multiple of heads, got 10 and 4"):
        ModelShape(layers=1, width=10, heads=4, vocabulary=8)
    with pytest.raises(ValueError, match="layers must be a positive integer, got 0"):
        ModelShape(layers=0, width=8, heads=2, vocabulary=8)


def test_an_epoch_times_every_rank_of_every_step_and_marks_new_shapes() -> None:
    session = Session(SMOKE_MODEL, CPU, 4096, 32, timer=synthetic_clock(32))
    values = [4096, 2048, 2048, 1000, 100]
    shares = [[[0], [1, 2]], [[3, 4]]]  # rank 1 has no batch at step 1
    timed = session.epoch(shares, values, packed=False, mode="default")
    assert timed["shapes"] == [[[1, 128], [2, 31]], [[2, 64], []]]
    assert timed["seconds"][1][1] == 0.0 and timed["backend"][1][1] == -1
    expected = OVERHEAD + PER_TOKEN * 2 * 2048 + PER_ATTENTION * 2 * 2048**2
    assert timed["seconds"][1][0] == pytest.approx(expected)
    assert session.backends == ["FLASH_ATTENTION"]  # what SDPA picks on CPU
    assert timed["new shape"] == [[1, 1], [1, 0]]
    again = session.epoch(shares, values, packed=False, mode="flash")
    assert again["new shape"] == [[0, 0], [0, 0]]  # the same backend has seen them
    rounded = session.epoch(shares, values, packed=False, mode=PADDED_MODES[2])
    # 128 positions at 1/32: a multiple of 4.
    assert rounded["shapes"] == [[[1, 128], [2, 32]], [[2, 64], []]]


@pytest.fixture(scope="module")
def synthetic_record() -> dict:
    """A record of a few samplers on one distribution under the synthetic clock."""
    return epoch_timing.record(
        CPU,
        SMOKE_MODEL,
        48,
        32,
        smoke=True,
        samplers=["padded", "quadratic", "packed", "fixed"],
        data=["lognormal"],
        timer=synthetic_clock(32),
    )


def test_the_record_fits_the_flash_steps_and_times_ours_under_the_fit(synthetic_record) -> None:
    recorded = synthetic_record
    assert recorded[epoch_timing.MARK[0]] == epoch_timing.MARK[1] and recorded["smoke"]
    fit = recorded["fits"]["lognormal"]
    assert fit["label"] == "padded, quadratic=10000, fitted"
    assert fit["held-out R2"] == pytest.approx(1.0)
    assert fit["overhead (s)"] == pytest.approx(OVERHEAD)
    runs = {(run["sampler"], run["mode"]) for run in recorded["runs"]}
    for sampler in ("padded", "quadratic", "fixed", "fitted"):
        assert {(sampler, mode) for mode in PADDED_MODES} <= runs
    assert ("packed", "varlen") in runs and ("packed", "flash") not in runs
    assert recorded["device"]["type"] == "cpu" and recorded["ranks"] == epoch_timing.RANKS
    for key in ("load before", "load after", "model", "clock", "packed attention", "backends"):
        assert recorded[key]
    assert recorded["model"]["parameters"] == sum(
        p.numel() for p in Model(SMOKE_MODEL).parameters()
    )
    # The text is the record, one run per line.
    text = epoch_timing.record_text(recorded)
    assert json.loads(text) == json.loads(json.dumps(recorded))
    assert text.count("\n    {") == len(recorded["runs"])


def test_the_record_reduces_to_epochs_slowdowns_and_the_goal(synthetic_record) -> None:
    frame = epoch_record.epochs(synthetic_record)
    assert len(frame) == len(synthetic_record["runs"])
    first = synthetic_record["runs"][0]
    slowest = sum(max(step) for step in first["seconds"])
    mean = sum(sum(step) / len(step) for step in first["seconds"])
    assert frame.loc[0, "whole epoch (s)"] == pytest.approx(slowest)
    assert frame.loc[0, "straggler ratio"] == pytest.approx(slowest / mean)
    assert frame.loc[0, "backends"].startswith("FLASH_ATTENTION x")
    slow = epoch_record.slowdown(frame)
    assert set(slow["sampler"]) == {"padded", "quadratic", "fixed", "fitted"}
    # Under the synthetic clock the default and flash epochs are the same batches' times.
    assert (slow["default / flash"] == 1.0).all()
    goal = epoch_record.goal(frame)
    assert list(goal["data"]) == ["lognormal"]
    peers = frame[(frame["mode"] == "flash") & frame["sampler"].isin(["fixed"])]
    best = peers.loc[peers["whole epoch (s)"].idxmin()]
    assert goal.loc[0, "best padded peer"] == best["sampler"]
    ours = frame[(frame["sampler"] == "fitted") & (frame["mode"] == "flash")].iloc[0]
    shorter = 1 - ours["whole epoch (s)"] / best["whole epoch (s)"]
    assert goal.loc[0, "ours fitted shorter by"] == pytest.approx(shorter)
    met = ours["straggler ratio"] <= 1.03 and shorter >= 0.03
    assert goal.loc[0, "goal met"] == ("yes" if met else "no")


def test_the_finding_renders_a_device_record_and_names_its_hardware(synthetic_record) -> None:
    prose, tables = token_costs.device_section("studies/data/x.json", synthetic_record)
    assert "On a device: " in prose and "`studies/data/x.json`" in prose
    assert "lognormal: padded, quadratic=10000, fitted" in prose
    assert f"torch {torch.__version__}" in prose
    goal = tables[1].frame
    met = int((goal["goal met"] == "yes").sum())
    assert f"met the goal in {token_costs.count_of(met, len(goal), 'distributions')}" in prose
    assert set(tables[0].frame["sampler"]) <= {*token_costs.NAMES.values(), "ours, fitted cost"}


def test_a_run_that_fails_is_recorded_with_its_error_and_the_rest_goes_on() -> None:
    clock = synthetic_clock(32)

    def failing(step, batch: Prepared) -> float:
        if batch.packed:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore detail")
        return clock(step, batch)

    recorded = epoch_timing.record(
        CPU,
        SMOKE_MODEL,
        32,
        32,
        smoke=True,
        samplers=["padded", "packed", "fixed"],
        data=["lognormal"],
        timer=failing,
    )
    errors = [run for run in recorded["runs"] if "error" in run]
    assert [(run["sampler"], run["mode"]) for run in errors] == [("packed", "varlen")]
    assert errors[0]["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert recorded["fits"]["lognormal"]["label"].endswith(", fitted")  # the rest went on
    frame = epoch_record.epochs(recorded)
    assert "packed" not in set(frame["sampler"]) and "fitted" in set(frame["sampler"])
    assert epoch_record.failed(recorded) == [
        "lognormal, packed, varlen: RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    ]
    prose, _ = token_costs.device_section("x.json", recorded)
    assert prose.endswith(
        "Runs that failed, left out of the tables: lognormal, packed, varlen: RuntimeError: "
        "CUDA out of memory. Tried to allocate 2 GiB."
    )


def test_newest_is_the_latest_marked_record_that_is_not_a_smoke_run(tmp_path: Path) -> None:
    assert epoch_record.newest(tmp_path) is None
    base = {epoch_timing.MARK[0]: epoch_timing.MARK[1], "runs": []}
    for name, when, smoke in [
        ("a", "2026-01-02T00:00:00+00:00", False),
        ("b", "2026-03-01T00:00:00+00:00", False),
        ("c", "2026-05-01T00:00:00+00:00", True),
    ]:
        text = json.dumps({**base, "recorded at": when, "smoke": smoke, "name": name})
        (tmp_path / f"token-epochs-{name}.json").write_text(text)
    path, found = epoch_record.newest(tmp_path)
    assert path.name == "token-epochs-b.json" and found["name"] == "b"
    (tmp_path / "token-epochs-d.json").write_text(json.dumps({"runs": []}))
    with pytest.raises(ValueError, match=r"token-epochs-d\.json is not a recorded epoch timing"):
        epoch_record.newest(tmp_path)


def test_the_smoke_run_records_on_cpu_through_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    epoch_timing.main(
        [
            "--smoke",
            "--out",
            str(out),
            "--samples",
            "24",
            "--data",
            "lognormal",
            "--samplers",
            "padded",
            "packed",
        ]
    )
    recorded = epoch_record.load(out)
    assert recorded["smoke"] is True and recorded["device"]["type"] == "cpu"
    assert recorded["scale"] == epoch_timing.SMOKE_SCALE and recorded["samples"] == 24
    modes = [
        (run["sampler"], run["mode"]) for run in recorded["runs"] if run["sampler"] != "fitted"
    ]
    assert modes == [("padded", mode) for mode in PADDED_MODES] + [("packed", "varlen")]
    for run in recorded["runs"]:
        for shapes, seconds in zip(run["shapes"], run["seconds"], strict=True):
            assert all((t > 0) == bool(s) for s, t in zip(shapes, seconds, strict=True))
    assert any(name.startswith("per-sequence sdpa") for name in recorded["backends"])
    assert epoch_record.newest(tmp_path) is None  # a smoke record is never rendered


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "pass exactly one of --record"),
        (["--record", "--smoke"], "pass exactly one of --record"),
        (["--smoke"], "--smoke writes only where --out says"),
    ],
)
def test_the_command_line_refuses_what_it_cannot_do(argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        epoch_timing.main(argv)
    assert message in capsys.readouterr().err


def test_without_a_gpu_the_device_run_is_refused(capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(SystemExit):
        epoch_timing.main(["--record", "--device", "cuda"])
    assert "torch sees no CUDA device" in capsys.readouterr().err


def test_the_subset_is_seeded_and_drawn_without_replacement() -> None:
    lengths = torch.arange(100)
    first, second = epoch_timing.subset(lengths, 10), epoch_timing.subset(lengths, 10)
    assert torch.equal(first, second) and len(set(first.tolist())) == 10
    assert epoch_timing.subset(lengths, 1000).numel() == 100


def test_default_path_names_the_device_and_the_date() -> None:
    recorded = {"device": {"name": "NVIDIA H200"}, "recorded at": "2026-01-02T03:04:05+00:00"}
    path = epoch_timing.default_path(recorded, Path("/x"))
    assert path == Path("/x/token-epochs-nvidia-h200-2026-01-02.json")


def test_fit_padded_reads_each_shape_at_full_scale() -> None:
    shapes = [[[1, 128], [2, 32]], [[4, 16], []]]
    seconds = [
        [OVERHEAD + PER_TOKEN * c * L * 32 + PER_ATTENTION * c * (L * 32) ** 2 for c, L in s]
        + ([0.0] if len(s) == 1 else [])
        for s in ([(1, 128), (2, 32)], [(4, 16)])
    ]
    more = [[[c, L]] for c, L in [(3, 8), (1, 64), (8, 4), (2, 100), (5, 20)]]
    more_seconds = [
        [OVERHEAD + PER_TOKEN * c * L * 32 + PER_ATTENTION * c * (L * 32) ** 2] for [[c, L]] in more
    ]
    fitted = epoch_timing.fit_padded(
        [{"shapes": shapes + more, "seconds": seconds + more_seconds}], 32
    )
    assert fitted.quadratic == 10000
    assert fitted.predict([128 * 32]) == pytest.approx(seconds[0][0])


def test_sdpa_on_cpu_falls_back_to_one_call_per_sequence_and_equals_a_mask() -> None:
    """The CPU fallback is the block-diagonal causal attention varlen_attn computes."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(10, 2, 4) for _ in range(3))
    sizes = [3, 5, 2]
    mask = torch.zeros(10, 10, dtype=torch.bool)
    start = 0
    for size in sizes:
        mask[start : start + size, start : start + size] = torch.ones(size, size).tril().bool()
        start += size
    whole = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
    ).transpose(0, 1)
    block = Model(ModelShape(layers=1, width=8, heads=2, vocabulary=4)).blocks[0]
    block.qkv = Fixed(torch.cat([q, k, v], dim=1).reshape(1, 10, 24))  # q, k, v as given
    cu = torch.tensor([0, 3, 8, 10], dtype=torch.int32)
    batch = Prepared(torch.zeros(1, 10, dtype=torch.long), torch.zeros(1, 10), True, cu, 5, [3, 1])
    out, _ = block.attend(torch.zeros(1, 10, 8), batch)
    torch.testing.assert_close(out.reshape(10, 2, 4), whole)


class Fixed(torch.nn.Module):
    """A layer that returns the same tensor whatever its input."""

    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.value = value

    def forward(self, _: torch.Tensor) -> torch.Tensor:
        return self.value
