"""Packed mixtures and documents cut into pieces, at their boundaries.

``split=``: every token of every document in exactly one piece, each piece once per epoch,
rows within ``max_length``, the collate's ``documents``/``starts`` reading the tokens back,
and a resume in the middle of a cut document. The packed mixture: its proportions (in
samples, exact at every prefix of the stream; in tokens, at the ends of passes), passes,
equal steps, ``set_weights`` at a window boundary, the state on any world size, the cost
model, the kit's guarantees, and rows filled as the packed sampler fills them.
"""

from __future__ import annotations

import warnings
from collections import Counter
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from samplers import (
    DistributedPackedBatchSampler,
    DistributedPackedMixtureSampler,
    SamplerWarning,
    TokenCost,
)
from samplers.tokens.packing import packed_in_phases, row_starts
from samplers.tokens.pieces import Pieces, piece_length_of

LENGTHS = [(i * 97) % 300 + 1 for i in range(300)]
SOURCES = [range(100), range(120), range(80)]
SPLITS = [None, "long", 32]


def tokens_of(lengths: list[int]) -> list[torch.Tensor]:
    """Documents whose tokens say where they are: document d's token t is 1000 d + t."""
    return [torch.arange(n) + 1000 * d for d, n in enumerate(lengths)]


def quiet(make: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        return make()


def mixtures(world: int, **options: Any) -> list[DistributedPackedMixtureSampler]:
    tokens = [sum(LENGTHS[a:b]) for a, b in ((0, 100), (100, 220), (220, 300))]
    options.setdefault("split", "long")
    return quiet(
        lambda: [
            DistributedPackedMixtureSampler(
                SOURCES, tokens, LENGTHS, 128, 4, world, rank, **options
            )
            for rank in range(world)
        ]
    )


def every_token() -> Counter[tuple[int, int]]:
    return Counter((d, t) for d, n in enumerate(LENGTHS) for t in range(n))


def read_back(sampler: Any, dataset: Any) -> Counter[tuple[int, int]]:
    """Every (document, token) the sampler's batches hold, read back through the collate's
    cu_seqlens and the pieces' documents and starts."""
    seen: Counter[tuple[int, int]] = Counter()
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collate_fn(pad_id=-1))
    for batch in loader:
        flat, bounds = batch["input_ids"].view(-1), batch["cu_seqlens"].long()
        sequences = [flat[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        real = [s for s in sequences if not (s.numel() and int(s[0]) == -1)]
        assert len(real) == len(batch["documents"])
        for tokens, document, start in zip(
            real, batch["documents"].tolist(), batch["starts"].tolist(), strict=True
        ):
            assert tokens.tolist() == [1000 * document + start + t for t in range(len(tokens))]
            seen.update((document, start + t) for t in range(len(tokens)))
        assert batch["input_ids"].shape[0] <= sampler.rows_per_batch
    return seen


# Pieces --------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 50), max_size=30), st.integers(1, 12))
def test_pieces_cover_every_token_once(lengths: list[int], size: int) -> None:
    pieces = Pieces(torch.tensor(lengths, dtype=torch.int64), size)
    documents, starts, counts = pieces.locate(torch.arange(len(pieces)))
    covered = Counter(
        (d, s + t)
        for d, s, n in zip(documents.tolist(), starts.tolist(), counts.tolist(), strict=True)
        for t in range(n)
    )
    assert covered == Counter((d, t) for d, n in enumerate(lengths) for t in range(n))
    pairs = zip(documents.tolist(), counts.tolist(), strict=True)
    assert all(n <= size or n == lengths[d] for d, n in pairs)
    assert documents.tolist() == sorted(documents.tolist())  # document by document


def test_split_names_what_is_wrong() -> None:
    assert piece_length_of(None, 8) is None and piece_length_of("long", 8) == 8
    with pytest.raises(ValueError, match="split must be None, 'long' or a piece length"):
        piece_length_of("short", 8)
    with pytest.raises(ValueError, match="split=9 is longer than max_length=8"):
        piece_length_of(9, 8)
    with pytest.raises(TypeError, match="split must be an integer"):
        piece_length_of(2.5, 8)


@pytest.mark.parametrize("split", SPLITS)
def test_the_packed_sampler_cuts_documents_and_hands_every_token_out_once(split: Any) -> None:
    ranks = quiet(
        lambda: [
            DistributedPackedBatchSampler(LENGTHS, 128, 4, 3, r, split=split) for r in range(3)
        ]
    )
    dataset = ranks[0].pieces_of(tokens_of(LENGTHS))
    seen = sum((read_back(sampler, dataset) for sampler in ranks), Counter())
    assert seen == every_token()
    if split is not None:  # every row fits the context
        rows = ranks[0].pieces.lengths
        assert int(rows.max()) <= 128
    assert len({len(sampler) for sampler in ranks}) == 1


def test_a_resume_in_the_middle_of_a_cut_document_hands_out_its_other_pieces() -> None:
    ranks = quiet(
        lambda: [
            DistributedPackedBatchSampler(LENGTHS, 128, 4, 2, r, split="long") for r in range(2)
        ]
    )
    pieces = ranks[0].pieces
    head = []
    iterators = [iter(sampler) for sampler in ranks]
    for _ in range(3):
        head += [i for iterator in iterators for i in next(iterator)]
    documents, _, _ = pieces.locate(torch.tensor(head))
    split_documents = {int(d) for d in documents} & {int(d) for d in pieces.cut}
    # Some cut document has pieces before the checkpoint and pieces after it.
    state = ranks[0].state_dict()
    resumed = quiet(
        lambda: [
            DistributedPackedBatchSampler(LENGTHS, 128, 4, 3, r, split="long") for r in range(3)
        ]
    )
    for sampler in resumed:
        sampler.load_state_dict(state)
    rest = [i for sampler in resumed for batch in sampler for i in batch]
    assert Counter(head + rest) == Counter(range(len(pieces)))
    after, _, _ = pieces.locate(torch.tensor(rest))
    assert split_documents & {int(d) for d in after}, "a cut document spans the checkpoint"
    assert state["split"] == "pieces of 128"


def test_a_state_of_another_split_is_refused() -> None:
    (cut,) = quiet(lambda: [DistributedPackedBatchSampler(LENGTHS, 128, 4, 1, 0, split="long")])
    (whole,) = quiet(lambda: [DistributedPackedBatchSampler(LENGTHS, 128, 4, 1, 0)])
    with pytest.raises(ValueError, match=r"'dataset_length'|'split'"):
        whole.load_state_dict(cut.state_dict())


def test_the_piece_dataset_refuses_documents_shorter_than_their_lengths() -> None:
    (sampler,) = quiet(lambda: [DistributedPackedBatchSampler([300], 128, 1, 1, 0, split="long")])
    dataset = sampler.pieces_of([torch.arange(200)])
    with pytest.raises(ValueError, match=r"dataset\[0\] has 200 tokens, but the lengths .* 300"):
        dataset[2]


# The packed mixture ------------------------------------------------------------------------------


@pytest.mark.parametrize("split", SPLITS)
def test_the_packed_mixture_weighted_by_tokens_hands_every_token_out_once(split: Any) -> None:
    ranks = mixtures(3, split=split)
    dataset = ranks[0].pieces_of(tokens_of(LENGTHS))
    assert sum((read_back(sampler, dataset) for sampler in ranks), Counter()) == every_token()
    assert len({len(sampler) for sampler in ranks}) == 1  # equal steps


def test_in_samples_every_prefix_of_the_stream_is_exact() -> None:
    (sampler,) = mixtures(1, weights_in="samples")
    sampler.set_weights([1, 2, 1])
    shares = [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)]
    assert sampler.proportions == tuple(shares)
    stream = sampler.order().stream.at(torch.arange(sampler.epoch_length)).tolist()
    offsets = [0, *torch.cumsum(torch.tensor(sampler.sizes), 0).tolist()]
    counts = [0, 0, 0]
    for k, piece in enumerate(stream, start=1):
        counts[next(d for d in range(3) if offsets[d] <= piece < offsets[d + 1])] += 1
        assert all(abs(c - k * p) < 1 for c, p in zip(counts, shares, strict=True))


def test_in_tokens_each_pass_holds_its_weight_exactly() -> None:
    """Weights 1:1:2 in tokens: the draw rates are the token weights over the mean lengths,
    so whole passes hold the weights exactly; a small source is upsampled by passes, never
    repeated within one; the batches hand out exactly the stream's draws."""
    (sampler,) = mixtures(1, split=None, epoch_length=2400)
    sampler.set_weights([1, 1, 2])
    assert sampler.token_proportions == (Fraction(1, 4), Fraction(1, 4), Fraction(1, 2))
    stream = sampler.order().stream.at(torch.arange(sampler.epoch_length)).tolist()
    assert Counter(i for batch in sampler for i in batch) == Counter(stream)
    per_source: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for index in stream:
        per_source[0 if index < 100 else 1 if index < 220 else 2].append(index)
    for d, drawn in per_source.items():
        size = sampler.sizes[d]
        assert len(drawn) >= 2 * size  # upsampled: two passes or more
        for start in range(0, len(drawn) - size + 1, size):
            assert len(set(drawn[start : start + size])) == size, d  # a whole pass, once each


#: Mixtures whose small sources end passes inside windows: sizes, weights, max_length,
#: rows per batch, lengths (one per document) and options.
PASS_CASES = {
    "5:1:1 tokens": ([3, 40, 257], [5, 1, 1], 256, 2, [(i * 37) % 200 + 1 for i in range(300)]),
    "samples, one-sample source": (
        [20, 200, 8, 1],
        [0, 3, 5, 1],
        48,
        2,
        [(i * 7919) % 40 + 1 for i in range(229)],
    ),
}


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize(
    ("case", "options"),
    [
        ("5:1:1 tokens", {"split": None}),
        ("5:1:1 tokens", {"split": "long"}),
        ("5:1:1 tokens", {"split": 32, "window": 45}),
        ("samples, one-sample source", {"weights_in": "samples", "window": 43}),
    ],
)
def test_handed_out_no_piece_repeats_within_a_pass_of_its_source(
    world: int, case: str, options: dict[str, Any]
) -> None:
    """Small sources upsampled many times over: in the order the batches are handed out
    over three epochs (each step's batches in rank order), each source's pieces cut into
    passes of its size hold no piece twice. A window holding the end of a source's pass
    and the start of its next one was packed as one, and its rows handed out in an order
    of their own, so a piece of the next pass could come before one of the pass it ends.
    (The second case caught a batch that began with a free sample and held a phase's.)"""
    sizes, weights, max_length, rows, lengths = PASS_CASES[case]
    ranks = quiet(
        lambda: [
            DistributedPackedMixtureSampler(
                [range(n) for n in sizes],
                weights,
                lengths,
                max_length,
                rows,
                world,
                rank,
                seed=7,
                **options,
            )
            for rank in range(world)
        ]
    )
    pieces = ranks[0].sizes  # each source's pieces
    bounds = torch.cumsum(torch.tensor(pieces), 0).tolist()
    handed: list[int] = []
    for epoch in range(3):
        shares = []
        for sampler in ranks:
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
        for step in range(max(len(share) for share in shares)):
            handed += [i for share in shares if step < len(share) for i in share[step]]
    passes_seen = 0
    for d, size in enumerate(pieces):
        own = [i for i in handed if (bounds[d - 1] if d else 0) <= i < bounds[d]]
        for start in range(0, len(own), size):
            one_pass = own[start : start + size]
            assert len(set(one_pass)) == len(one_pass), (d, start // size)
        passes_seen += len(own) // size
    assert passes_seen > 3 * len(pieces)  # sources read in several passes an epoch


def test_batches_stay_full_when_a_small_source_ends_passes_in_every_window() -> None:
    """The mixtures finding's sources and weights (its smallest source ends about ten
    passes in every window): the batches hold as many rows, read back, as when each window
    was packed as one (3.99 of 4 then), and the rows as full. Each phase's last batch was
    a batch of its own at first: 3.61 rows a batch, 10% more steps."""
    sizes, weights = [20, 60, 300, 1000, 3000, 10000], [3, 1, 2, 1, 2, 1]
    generator = torch.Generator().manual_seed(0)
    lengths = torch.exp(torch.randn(sum(sizes), generator=generator) + 4.0).clamp(1, 2048)
    (sampler,) = quiet(
        lambda: [
            DistributedPackedMixtureSampler(
                [range(n) for n in sizes], weights, lengths.long(), 256, 4, 1, 0, split="long"
            )
        ]
    )
    held = sampler.pieces.lengths.tolist()
    batches = list(sampler)
    rows = [len(row_starts([held[i] for i in batch], 256)) for batch in batches]
    tokens = sum(held[i] for batch in batches for i in batch)
    assert sum(rows) / len(rows) > 3.95
    assert tokens / (sum(rows) * 256) > 0.99


def test_a_state_of_the_version_before_passes_loads_at_a_window_boundary_only() -> None:
    """States written before the ``passes`` field: a window was then handed out in another
    order, so the rest of a window begun cannot be known; the rest of whole windows can."""
    (sampler,) = mixtures(1, window=64)
    iterator = iter(sampler)
    while sampler.state_dict()["position"] % 64 == 0:
        next(iterator)
    inside = {k: v for k, v in sampler.state_dict().items() if k != "passes"}
    (resumed,) = mixtures(1, window=64)
    with pytest.raises(ValueError, match=r"state field 'passes' is missing.* a multiple of 64"):
        resumed.load_state_dict(inside)
    boundary = dict(inside, position=64, finished=False)
    resumed.load_state_dict(boundary)
    assert resumed.state_dict()["position"] == 64


def test_an_order_pickled_before_phases_plans_as_it_did() -> None:
    """An order pickled by the version before phases (no ``phases`` attribute) unpickles
    without them: an iteration in progress goes on in the order it began in."""
    (sampler,) = mixtures(1)
    order = sampler.order()
    state = order.__getstate__()
    state.pop("phases")
    old = type(order).__new__(type(order))
    old.__setstate__(state)
    assert old.phases is None
    assert len(old.at(torch.arange(old.size))) == old.size


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(-1, 3)), max_size=60),
    st.integers(1, 64),
)
def test_rows_packed_in_phases_hand_phases_out_in_order_and_read_back(
    samples: list[tuple[int, int]], max_length: int
) -> None:
    """Handed out in the order opened, the rows give every phase's samples before the
    next phase's (free ones, -1, anywhere); every row is within ``max_length`` (or one
    longer sample); cut greedily, all the rows read back exactly as packed."""
    samples.sort(key=lambda sample: -sample[0])  # longest first, as a window is
    lengths = [length for length, _ in samples]
    phases = [phase for _, phase in samples]
    packed_rows, packed_places, row_phases = packed_in_phases(lengths, phases, max_length)
    rows, places = packed_rows.tolist(), packed_places.tolist()
    assert sorted(places) == list(range(len(samples)))
    members = [[i for i in places if rows[i] == row] for row in range(len(row_phases))]
    for held in members:
        assert sum(lengths[i] for i in held) <= max_length or len(held) == 1
    # Rows are opened phase after phase, the free samples' own rows last.
    assert row_phases == sorted(row_phases, key=lambda phase: (phase < 0, phase))
    handed = [i for held in members for i in held]
    phased = [phases[i] for i in handed if phases[i] >= 0]
    assert phased == sorted(phased)
    flat = [lengths[i] for i in handed]
    sizes = [len(held) for held in members]
    assert row_starts(flat, max_length) == [sum(sizes[:n]) for n in range(len(sizes))]


def test_set_weights_takes_effect_at_the_next_window_and_a_resume_reproduces_it() -> None:
    four = mixtures(4, window=64)
    iterators = [iter(sampler) for sampler in four]
    head = [i for _ in range(2) for iterator in iterators for i in next(iterator)]
    for sampler in four:
        with pytest.warns(SamplerWarning, match="keeps the old weights"):
            sampler.set_weights([0, 1, 1])
    state = four[0].state_dict()
    assert state["schedule"][-1][0] % 64 == 0  # a window boundary
    reference = [i for sampler in four for batch in sampler for i in batch]
    three = mixtures(3, window=64)
    for sampler in three:
        sampler.load_state_dict(state)
    rest = [i for sampler in three for batch in sampler for i in batch]
    assert Counter(rest) == Counter(reference)
    assert three[0].proportions == four[0].proportions
    stream = three[0].order().stream.at(torch.arange(three[0].epoch_length)).tolist()
    assert Counter(head + rest) == Counter(stream)  # nothing lost or repeated


def test_a_cost_model_orders_the_batches_and_a_padded_one_is_refused() -> None:
    summed = mixtures(2, cost=TokenCost("sum", quadratic=64))
    assert sum(len(list(sampler)) for sampler in summed) > 0
    assert summed[0].state_dict()["cost"] == "sum, quadratic=64"
    with pytest.raises(ValueError, match="cost must be summed for packed rows"):
        mixtures(1, cost="padded")
    with pytest.raises(ValueError, match="weights_in must be one of 'tokens', 'samples'"):
        mixtures(1, weights_in="documents")


def test_rows_fill_as_the_packed_sampler_fills_them_on_one_source() -> None:
    """One source: the same best-fit decreasing over windows of the same size, from
    another shuffle. Per seed the efficiencies differ by the shuffle (up to about 0.6%
    here); over eight seeds the packed mixture's mean is within 0.2% of the packed
    sampler's, or above it."""
    lengths = [(i * 7919) % 490 + 20 for i in range(3000)]

    def efficiency(samplers: list[Any]) -> float:
        real = rows = 0
        for sampler in samplers:
            for batch in sampler:
                sizes = [lengths[i] for i in batch]
                real += sum(sizes)
                rows += len(row_starts(sizes, 512))
        return real / (rows * 512)

    packed, mixed = [], []
    for seed in range(8):
        packed.append(
            efficiency(
                [DistributedPackedBatchSampler(lengths, 512, 4, 2, r, seed=seed) for r in range(2)]
            )
        )
        ours = [
            DistributedPackedMixtureSampler([range(3000)], [1], lengths, 512, 4, 2, r, seed=seed)
            for r in range(2)
        ]
        assert ours[0].window == DistributedPackedBatchSampler(lengths, 512, 4, 1, 0).window
        mixed.append(efficiency(ours))
    assert sum(mixed) / 8 >= sum(packed) / 8 - 0.002


def test_the_state_names_a_mixture_of_other_pieces() -> None:
    (cut,) = mixtures(1)
    (other,) = mixtures(1, split=32)
    with pytest.raises(ValueError, match="state field"):
        other.load_state_dict(cut.state_dict())
    (by_samples,) = mixtures(1, weights_in="samples")
    with pytest.raises(ValueError, match="state field"):
        by_samples.load_state_dict(cut.state_dict())


def test_a_state_saved_before_the_merge_by_tokens_is_refused_in_tokens_only() -> None:
    """Weights in tokens merge the draws by tokens: a state without the ``mixing`` field
    (an earlier version's, another stream) is refused naming it; in samples the stream
    is the one it was, and such a state loads."""
    (sampler,) = mixtures(1, window=64)
    state = sampler.state_dict()
    assert state["mixing"] == "merged by tokens"
    del state["mixing"]
    with pytest.raises(ValueError, match="state field 'mixing' is missing"):
        mixtures(1, window=64)[0].load_state_dict(state)
    (by_samples,) = mixtures(1, window=64, weights_in="samples")
    saved = by_samples.state_dict()
    assert "mixing" not in saved
    mixtures(1, window=64, weights_in="samples")[0].load_state_dict(saved)
