"""The packed mixtures' ways and measures (studies/mixtures/{corpus,packing,token_measures}):
each measure on hand-made rows, Megatron's rule on its own documented example, the
Megatron-style samples' layout, ours' rows the same on any world size, and TRL's packing
doing to long documents what the finding says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studies.mixtures import packing
from studies.mixtures.corpus import MAX_LENGTH, Corpus, corpus, epoch_rows
from studies.mixtures.token_measures import (
    Stream,
    beyond_even_spread,
    lost_and_repeated,
    prefix_deviation,
    repeated_within_passes,
    step_deviation,
)


def tiny() -> Corpus:
    """Source 0: documents of 3 and 2 tokens (ids 0-2, 3-4); source 1: one of 4 (5-8)."""
    lengths = torch.tensor([3, 2, 4])
    starts = np.array([0, 3, 5, 9])
    return Corpus(lengths, starts, np.array([0, 2, 3]), starts[[0, 2, 3]])


def made(rows: list[tuple[list[int], tuple[int, ...]]], steps: list[int]) -> Stream:
    return Stream.of(tiny(), [(np.array(t), s) for t, s in rows], steps)


def test_the_token_measures_on_hand_made_rows() -> None:
    # Step 0: rows [0 1 2 | 5 6] and [3 4]; step 1: row [7 8 0] (8 tokens in rows of 4).
    stream = made([([0, 1, 2, 5, 6], (3, 2)), ([3, 4], (2,)), ([7, 8, 0], (3,))], [0, 2])
    assert stream.efficiency(4) == pytest.approx(10 / (5 + 4 + 4))
    assert stream.rows_over(4) == 1
    documents, lengths = stream.pieces()
    # Pieces: [0 1 2], [5 6], [3 4], [7 8] and [0] (a new document in the third row's span).
    assert documents.tolist() == [0, 2, 1, 2, 0] and lengths.tolist() == [3, 2, 2, 2, 1]
    assert stream.documents_cut() == 2  # documents 2 (in two pieces) and 0 (its first token)
    assert stream.mean_piece() == pytest.approx(2)
    assert stream.attention() == 9 + 4 + 4 + 9
    assert stream.mixed_spans() == 1  # the third row's span holds documents 2 and 0
    # Shares 1/2 each: source 0 has 3, then 3, 5, 5 and 6 of 3, 5, 7, 9 and 10 tokens.
    assert prefix_deviation(stream, (1, 1)) == pytest.approx(1.5)
    # Step 0 holds 5 tokens of source 0 and 2 of source 1; step 1, 1 and 2.
    assert step_deviation(stream, (1, 1)) == pytest.approx(1.5)
    # Source 0's 5 tokens are one pass; token 0 comes again in the next one.
    assert repeated_within_passes(stream) == 0
    assert beyond_even_spread(stream) == 0  # 6 tokens over 5: each at most twice
    again = made([([0, 0, 1], (1, 1, 1))], [0])
    assert repeated_within_passes(again) == 1
    assert beyond_even_spread(again) == 1  # 3 tokens over 5: none more than once
    assert lost_and_repeated(stream, again) == (7, 0)  # tokens 2 to 8; 0 is twice in both
    assert lost_and_repeated(again, stream) == (0, 7)


def test_megatrons_rule_on_its_documented_example() -> None:
    """megatron/core/datasets/readme.md: weights 1/2, 1/4, 1/4 and size 4 give the
    dataset index [0, 1, 2, 0] and the dataset sample index [0, 0, 0, 1]."""
    sources, samples = packing.megatron_blend((2, 1, 1), 4)
    assert sources.tolist() == [0, 1, 2, 0]
    assert samples.tolist() == [0, 0, 0, 1]


def test_the_megatron_style_samples_are_full_rows_of_whole_epochs() -> None:
    data = corpus()
    first, last = (int(v) for v in data.source_documents[:2])
    per_epoch = int(data.lengths[first:last].sum())
    wanted = 3 * per_epoch // MAX_LENGTH  # three epochs of the smallest source
    chunks, dropped = packing.megatron_chunks(0, wanted)
    assert len(chunks) >= wanted
    assert all(sum(s[2] for s in chunk) == MAX_LENGTH for chunk in chunks)
    assert len(chunks) * MAX_LENGTH + dropped == 3 * per_epoch
    counts = np.zeros(last - first, dtype=np.int64)
    for chunk in chunks:
        for document, start, length in chunk:
            assert first <= document < last and start >= 0
            assert start + length <= int(data.lengths[document])
            if start == 0:
                counts[document - first] += 1
    assert counts.max() <= 3


def test_ours_rows_are_the_same_on_any_world_size() -> None:
    """The rows table measures ours' other splits on one rank."""
    ours = packing.Ours("long")
    one, _ = epoch_rows(ours.epoch(1))
    eight, _ = epoch_rows(ours.epoch(8))
    assert len(one) == len(eight) == packing.ours_rows()
    assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(one, eight, strict=True))


def test_trl_truncates_with_its_default_and_splits_when_asked() -> None:
    pytest.importorskip("trl")
    default = packing.HuggingFaceTrl("first_exhausted", "bfd").packed()
    for row in range(len(default.spans)):
        tokens, spans = default.row(row)
        assert len(tokens) == sum(spans) <= MAX_LENGTH
    # What "bfd" drops is exactly what lies beyond the first MAX_LENGTH tokens of each
    # document of the mix; "bfd_split" drops nothing.
    beyond = np.maximum(default.mixed - MAX_LENGTH, 0).sum()
    assert default.tokens_in - len(default.values) == beyond > 0
    split = packing.HuggingFaceTrl("first_exhausted", "bfd_split").packed()
    assert split.tokens_in == len(split.values)
