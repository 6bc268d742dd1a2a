"""The CPU timing of the token-costs finding's batches: batch shapes, the packed
attention, the timing loop on a tiny model, and the measured-against-simulated reduction."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from studies.tokens import timing as token_timing
from studies.tokens.costing import simulated_step
from studies.tokens.timing import (
    Batch,
    TinyTransformer,
    chosen_steps,
    compared,
    scaled_batch,
    stale,
    time_batch,
)


def test_a_padded_batch_is_its_samples_padded_to_the_longest() -> None:
    batch = scaled_batch(False, [40, 9, 17], context=64, scale=4)
    assert (batch.rows, batch.length, batch.samples) == (3, 10, 3)
    assert batch.spans == [[(0, 10)]] * 3


def test_a_packed_batch_is_its_rows_with_each_sample_a_span() -> None:
    # Rows of 64 as row_starts tells them apart: [40, 20] [30, 30] [8].
    batch = scaled_batch(True, [40, 20, 30, 30, 8], context=64, scale=4)
    assert (batch.rows, batch.length, batch.samples) == (3, 16, 5)
    assert batch.spans == [[(0, 10), (10, 15)], [(0, 7), (7, 14)], [(0, 2)]]


def test_scaling_keeps_every_sample_at_least_one_position() -> None:
    assert scaled_batch(True, [1, 2, 3], context=64, scale=4).spans == [[(0, 1), (1, 2), (2, 3)]]
    assert scaled_batch(False, [], context=64).rows == 0
    with pytest.raises(ValueError, match="scale must be at least 1, got 0"):
        scaled_batch(False, [4], context=64, scale=0)


def test_packed_attention_equals_each_sample_alone() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(layers=1, width=16, heads=2).eval()
    batch = Batch(8, [[(0, 3), (3, 7)]])  # two samples and one unused position
    x = torch.randn(1, 8, 16)
    packed = model(x, batch, packed=True)
    for a, b in batch.spans[0]:
        alone = model(x[:, a:b], Batch(b - a, [[(0, b - a)]]), packed=False)
        torch.testing.assert_close(packed[:, a:b], alone)
    # Attention is causal within a sample: the first position sees only itself.
    block = model.blocks[0]
    q, k, v = block.qkv(block.norm1(x[:, :1])).view(1, 1, 3, 2, 8).permute(2, 0, 3, 1, 4)
    seen = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, 1, 16)
    first = x[:, :1] + block.out(seen)
    first = first + block.down(F.gelu(block.up(block.norm2(first))))
    torch.testing.assert_close(packed[:, :1], first)


def test_time_batch_runs_forward_and_backward_and_drops_the_gradients() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(layers=1, width=16, heads=2)
    assert time_batch(model, Batch(0, []), packed=False) == 0.0
    assert time_batch(model, Batch(8, [[(0, 3), (3, 8)]]), packed=True) > 0
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="width must be a multiple of heads, got 10 and 4"):
        TinyTransformer(width=10, heads=4)


def test_chosen_steps_spread_over_the_epoch() -> None:
    assert chosen_steps(100, 4) == [12, 37, 62, 87]
    assert chosen_steps(3, 4) == [0, 1, 2]


def test_measure_times_every_rank_of_every_step_on_a_tiny_model() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(layers=1, width=16, heads=2)
    chosen = [
        ("tiny", 2, "padded", False, 5, [1, 3], [[[40, 12], [8]], [[20], []]]),
        ("tiny", 2, "packed", True, 2, [0, 1], [[[40, 20], [64]], [[8, 8], [30]]]),
    ]
    messages: list[str] = []
    rows = token_timing.measure(
        chosen, context=64, repeats=3, model=model, progress=messages.append
    )
    assert len(messages) == 3 * 2  # each repeat, each timed step of every run
    assert messages[1].startswith("repeat 1/3, timed step 2/2 of every run")
    assert [row["sampler"] for row in rows] == ["padded", "packed"]
    for row, run in zip(rows, chosen, strict=True):
        assert row["steps"] == run[5] and row["batches"] == run[6]
        for step, least, most in zip(row["seconds"], row["least"], row["most"], strict=True):
            assert len(step) == 2
            assert all(lo <= s <= hi for s, lo, hi in zip(step, least, most, strict=True))
    assert rows[0]["seconds"][1][1] == 0.0  # no batch: no time
    assert rows[0]["seconds"][0][0] > 0
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        token_timing.measure(chosen, context=64, repeats=0, model=model)


def _record() -> dict:
    batches = [[[4096], [100, 100]], [[2000, 2000], [1000]]]

    def run(sampler: str, seconds: list[list[float]]) -> dict:
        return {
            "data": "d",
            "ranks": 2,
            "sampler": sampler,
            "epoch steps": 9,
            "steps": [2, 6],
            "batches": batches,
            "seconds": seconds,
        }

    return {
        "runs": [run("padded", [[3.0, 1.0], [2.0, 2.0]]), run("fixed", [[6.0, 2.0], [4.0, 4.0]])]
    }


def test_compared_reduces_measured_and_simulated_alike() -> None:
    padded, fixed = compared(_record(), context=4096)
    assert padded["samples"] == 6
    assert padded["per sample, measured"] == (3.0 + 2.0) / 6
    assert padded["straggler ratio, measured"] == (3.0 + 2.0) / (2.0 + 2.0)
    steps = [
        [simulated_step("padded", b, 4096) for b in step]
        for step in _record()["runs"][0]["batches"]
    ]
    slowest = max(steps[0]) + max(steps[1])
    assert padded["per sample, simulated"] == slowest / 6
    assert padded["straggler ratio, simulated"] == slowest / (sum(steps[0]) / 2 + sum(steps[1]) / 2)
    assert fixed["per sample / padded, measured"] == 2.0
    assert padded["per sample / padded, simulated"] == 1.0


def test_stale_names_the_runs_whose_batches_changed() -> None:
    values = [4096, 100, 100, 2000, 2000, 1000, 7]
    first, second = [[6] for _ in range(9)], [[6] for _ in range(9)]
    first[2], first[6], second[2], second[6] = [0], [3, 4], [1, 2], [5]
    current = {("d", 2, "padded"): ([first, second], values)}  # "fixed": not installed
    assert stale(_record(), current) == []
    second[6] = [6]  # rank 1 takes a sample of 7 tokens at step 6, not 1000
    assert stale(_record(), current) == ["d, 2, padded"]
    second[6] = [5]
    shorter = {("d", 2, "padded"): ([first[:8], second[:8]], values)}
    assert stale(_record(), shorter) == ["d, 2, padded"]  # the same steps, a shorter epoch
