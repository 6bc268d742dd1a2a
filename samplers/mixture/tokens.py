"""A mixture under a token budget: :class:`DistributedMixtureTokenBatchSampler`.

A thin adapter: the mixture's stream (:class:`~samplers.mixture.order.MixtureOrder`,
position -> (source, its draw) -> a ``ConcatDataset`` index) fills the windows of a
:class:`~samplers.tokens.order.TokenOrder` in place of the epoch permutation, and the
token machinery sorts, cuts and lays them out as for
:class:`~samplers.DistributedTokenBatchSampler` (its hooks, reused, not copied). The
mixture's state (one global position plus the weight schedule), :meth:`set_weights` and
checks are the mixture samplers'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from samplers import checks, groups
from samplers.mixture.checks import checked_datasets
from samplers.mixture.merge import EXACT, TokenMerge
from samplers.mixture.sampler import _Mixture
from samplers.mixture.schedule import fraction
from samplers.options import Tail
from samplers.plan import EpochPlan
from samplers.tokens.checks import lengths_tensor, token_tail, warn_over_budget
from samplers.tokens.cost import CostLike, TokenCost, as_cost, warn_costly
from samplers.tokens.held import HeldLengths
from samplers.tokens.order import TokenOrder, default_window, length_sum
from samplers.tokens.sampler import DistributedTokenBatchSampler

__all__ = [
    "DistributedMixtureTokenBatchSampler",
    "checked_token_parts",
    "draw_shares",
    "merged_by_tokens",
    "token_parts",
]


#: Weights whose exact parts do not fit below :data:`~samplers.mixture.merge.EXACT` are
#: rounded to parts of about this sum.
_ROUNDED = 1 << 40


def token_parts(weights: Sequence[float | int | Fraction]) -> tuple[int, ...]:
    """Checked ``weights`` as integer parts in the same ratios, in lowest terms: exactly
    (floats read as :func:`~samplers.mixture.schedule.fraction` reads them) when every
    part is below ``2**53``; else rounded to parts summing to about ``2**40`` (a positive
    weight never to 0; ties to even), each ratio then within about ``2**-40`` of the
    weights'. Parts it gives are their own parts (a state's schedule is checked so)."""
    exact = [fraction(w) for w in weights]
    common = math.lcm(*(f.denominator for f in exact))
    # In integers over the common denominator (Fraction arithmetic is many times slower).
    values = [f.numerator * (common // f.denominator) for f in exact]
    divisor = math.gcd(*values)
    found = tuple(v // divisor for v in values)
    if max(found) < EXACT:
        return found
    total = sum(found)
    rounded = [max(round(Fraction(v * _ROUNDED, total)), 1) if v else 0 for v in found]
    divisor = math.gcd(*rounded)  # in lowest terms too: a state's parts are read back
    return tuple(v // divisor for v in rounded)


#: The state field saying how the stream of a mixture whose weights count tokens is mixed.
MIXING_FIELD = "mixing"
#: Its value: the draws merged by tokens over weight (:class:`TokenMerge`).
MERGED = "merged by tokens"


def refuse_rate_state(sampler: Any, state_dict: Any) -> None:
    """``ValueError`` naming :data:`MIXING_FIELD` for a state of ``sampler``'s kind saved
    by a version that drew token weights at rates over the mean lengths (another stream:
    no position of it can be continued by the merge)."""
    if (
        isinstance(state_dict, dict)
        and state_dict.get("sampler") == type(sampler).__name__
        and MIXING_FIELD not in state_dict
    ):
        raise ValueError(
            f"state field {MIXING_FIELD!r} is missing: a state of an earlier version, which "
            "drew each source at its token weight over its mean length; this version merges "
            "the draws by their tokens (another stream), so the saved position cannot be "
            "continued (resume with the version that saved it, or start again)"
        )


def draw_shares(
    token_parts: Sequence[int | Fraction], sizes: tuple[int, ...], tokens: tuple[int, ...]
) -> tuple[Fraction, ...]:
    """Each source's expected share of the draws under token parts: its part over its
    mean length (``tokens[d] / sizes[d]``), normalised."""
    rates = [
        Fraction(a) * n / t if a else Fraction(0)
        for a, n, t in zip(token_parts, sizes, tokens, strict=True)
    ]
    return tuple(rate / sum(rates) for rate in rates)


def checked_token_parts(
    weights: Sequence[float | int | Fraction], source_tokens: Sequence[int], instead: str = ""
) -> tuple[int, ...]:
    """:func:`token_parts` of checked ``weights``; ``ValueError`` naming the weight for a
    positive one on a source whose lengths sum to 0 (``instead``: what else to give)."""
    for d, (weight, tokens) in enumerate(zip(weights, source_tokens, strict=True)):
        if weight and not tokens:
            raise ValueError(
                f"weights[{d}] is {weight!r} but the lengths of datasets[{d}] sum to 0: "
                f"a source without tokens cannot be given a share of the tokens (give it "
                f"weight 0{instead})"
            )
    return token_parts(weights)


def merged_by_tokens(sampler: Any, segments: tuple[tuple[int, tuple[int, ...]], ...]) -> TokenMerge:
    """The stream of a mixture ``sampler`` whose weights count tokens, over ``segments``:
    its sources' draws merged by their tokens over their weight (:class:`TokenMerge`)."""
    return TokenMerge(
        sampler.sizes,
        segments,
        sampler._held,
        checks.seed(sampler.seed),
        checks.as_flag("shuffle", sampler.shuffle),
        sampler.source_tokens,
    )


class DistributedMixtureTokenBatchSampler(_Mixture, DistributedTokenBatchSampler):
    """Batches under a token budget from several datasets mixed by weight counted in
    tokens, the same number of batches on every rank.

    Guarantees (over all ranks together, whatever the world size):

    * **proportions in tokens at every prefix of the stream**: the stream merges the
      sources' draws by their tokens so far over their weight
      (:class:`~samplers.mixture.merge.TokenMerge`), so after any prefix of it there is
      a level ``L`` with every source ``d`` within half of its longest sample of ``L *
      w_d`` tokens (``w_d`` its weight's share, :attr:`token_proportions`, exact), and
      ``|X_d - w_d * X| <= (max_d + w_d * (sum of the others' max_e)) / 2`` for its
      tokens ``X_d`` of the prefix's ``X`` (up to the keys' rounding, a relative
      ``2**-52``). Its draws follow: :attr:`proportions` gives each source's expected
      share of them (its weight over its mean length), not an exact one. With weights
      proportional to the sources' token totals every pass ends at the same level, so an
      epoch of the default length is every sample exactly once. The batches hand out
      the stream a **window** at a time, each window sorted by length and cut (as the
      token sampler's), so after any step the bound holds plus the tokens of the part
      of one window handed out (at most ``window * max_d``). Not per step: a step's
      batches are neighbours in a window sorted by length and can come from one source.
      Measured in tests/test_mixture_tokens.py (3 sources, mean lengths 25 to 1045, 4
      ranks, window 1125): the token shares' largest deviation from the weights over
      prefixes of a window or more is 0.121 (0.031 in the second epoch), per step 0.70;
    * **once per pass**: each source is read in passes, each a shuffle seeded from
      ``(seed, source, pass)``; each window holds exactly the stream's draws there, so a
      sample is handed out twice only in two passes of its source;
    * **the budget**: every batch costs at most ``max_tokens`` under ``cost``, except a
      sample longer than that alone, as for :class:`DistributedTokenBatchSampler`, and
      every rank yields the same number of batches (``tail`` as there);
    * **resume on any world size** from one number plus the weight schedule
      (:meth:`state_dict`; a state of another mixture, lengths, budget, cost or window
      is refused naming the field), and :meth:`set_weights` mid-run repeats nothing
      and is reproduced by a resume. New weights take effect from the **next window
      boundary** of the epoch (the window in progress keeps its samples and order).

    Epochs are windows of one stream, ``epoch_length`` positions each (default: the
    sources' total size), so the passes continue across epochs. With token weights
    proportional to the sources' token totals, every source is drawn in proportion to
    its size, and an epoch of the default length is every sample exactly once
    (``tail="uneven"``), as the token sampler over ``ConcatDataset(datasets)``.

    Example::

        >>> lengths = [4] * 6 + [1] * 12        # source 0: 6 samples of 4, source 1: 12 of 1
        >>> sampler = DistributedMixtureTokenBatchSampler([range(6), range(12)], [1, 1],
        ...     lengths, 8, num_replicas=1, rank=0, epoch_length=10)
        >>> sampler.proportions                 # draws: 1 long per 4 short, equal tokens
        (Fraction(1, 5), Fraction(4, 5))
        >>> batches = list(sampler)
        >>> sum(lengths[i] for b in batches for i in b if i < 6), sum(
        ...     lengths[i] for b in batches for i in b if i >= 6)
        (8, 8)

    Args:
        datasets: the sources, a sequence of sized datasets or a ``ConcatDataset``; the
            batches index ``ConcatDataset(datasets)`` (also :attr:`dataset`).
        weights: one non-negative number per source, not all 0 (0 pauses a source): the
            shares of the **tokens**; only their ratios matter. A source whose lengths
            sum to 0 cannot have a positive weight.
        lengths: each sample's length in ``ConcatDataset(datasets)`` (a sequence, numpy
            array or tensor of non-negative integers, ``sum(len(d) for d in datasets)``).
        max_tokens: as for :class:`DistributedTokenBatchSampler`.
        num_replicas: as for :class:`DistributedTokenBatchSampler`.
        rank: as for :class:`DistributedTokenBatchSampler`.
        shuffle: as for :class:`DistributedMixtureSampler` (``False`` reads each pass in
            order; the windows are still sorted by length).
        seed: as for :class:`DistributedMixtureSampler`.
        epoch_length: positions (samples) per epoch; default: the sum of the sources' sizes.
        tail: as for :class:`DistributedTokenBatchSampler` (default ``"uneven"``).
        cost: as for :class:`DistributedTokenBatchSampler`.
        auto_epoch: as for :class:`DistributedTokenBatchSampler`.
        window: positions sorted together; default: the token sampler's default for
            ``lengths`` and ``max_tokens``, at most ``epoch_length``. Smaller windows keep
            the tokens' proportions closer per step and pad more.
        group: as for :class:`DistributedTokenBatchSampler`.
    """

    def __init__(
        self,
        datasets: Any,
        weights: Any,
        lengths: Any,
        max_tokens: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        *,
        epoch_length: int | None = None,
        tail: Tail = "uneven",
        cost: CostLike = "padded",
        auto_epoch: bool = False,
        window: int | None = None,
        group: groups.Group = None,
    ) -> None:
        self._held = HeldLengths.copied(lengths_tensor(lengths))
        held = self._held.owned()
        self.max_tokens = checks.positive("max_tokens", max_tokens)
        tail = token_tail(tail)  # the token sampler's tails: no None
        _, sizes = checked_datasets(datasets, weights)
        if self._held.size != sum(sizes):
            raise ValueError(
                f"lengths must hold one length per sample of ConcatDataset(datasets) "
                f"({sum(sizes)} samples in sources of sizes {list(sizes)}), got "
                f"{self._held.size}"
            )
        starts = [sum(sizes[:d]) for d in range(len(sizes))]
        #: Each source's total length (its tokens).
        self.source_tokens = tuple(
            length_sum(held[start : start + size], longest=self._held.longest)
            for start, size in zip(starts, sizes, strict=True)
        )
        model = as_cost(cost)
        model.checked_budget(self.max_tokens, count=self._held.size, longest=self._held.longest)
        self.cost = model.kind if model == TokenCost(model.kind) else model
        self.length_sum = sum(self.source_tokens)
        self._init_mixture(
            datasets,
            weights,
            num_replicas,
            rank,
            shuffle,
            seed,
            epoch_length,
            tail,
            auto_epoch,
            group,
        )
        if not model.linear:  # first: a named function runs over every length
            warn_costly(held, self.max_tokens, model)
        self.window = (
            min(default_window(held, self.max_tokens, self.length_sum, model), self.epoch_length)
            if window is None
            else checks.positive("window", window)
        )
        self._order: tuple[tuple[Any, ...], TokenOrder] | None = None
        self._layouts = {}
        self._warned_unequal = False
        self._length_digest: str | None = None
        if model.linear:
            warn_over_budget(held, self.max_tokens, self.tail, self._held.longest)

    # Weights in tokens --------------------------------------------------------------------

    def _parts(self, weights: tuple[float | int | Fraction, ...]) -> tuple[int, ...]:
        return checked_token_parts(weights, self.source_tokens)

    def _schedule_of(self, segments: tuple[tuple[int, tuple[int, ...]], ...]) -> TokenMerge:
        """The sources' draws merged by their tokens over their weight (:class:`TokenMerge`)."""
        return merged_by_tokens(self, segments)

    def set_weights(self, weights: Any) -> None:
        """Share the **tokens** in proportion to ``weights`` from the next window boundary
        of the epoch on (the window in progress keeps its samples and its order; at a
        boundary, from there).

        Otherwise as :meth:`DistributedMixtureSampler.set_weights`: every source's pass
        stays where it is, the change is in the state and a resume reproduces it, a
        ``SamplerWarning`` during an iteration, and a ``ValueError`` naming the weight for
        a negative, NaN or infinite weight, the wrong count, all zero, or a positive
        weight on a source whose lengths sum to 0.
        """
        super().set_weights(weights)

    def _reweight_position(self, position: int) -> int:
        """The next window boundary of the epoch (or its end): the windows before it,
        one of which is partly handed out, keep their samples and their order."""
        window = checks.positive("window", self.window)
        epoch, within = divmod(position, self.epoch_length)
        boundary = min(-(-within // window) * window, self.epoch_length)
        return epoch * self.epoch_length + boundary

    @property
    def token_proportions(self) -> tuple[Fraction, ...]:
        """Each source's expected share of the tokens from the current position on: its
        share of the draws (:attr:`proportions`) times its mean length, normalised."""
        current = self.schedule.segments[-1][1]
        return tuple(Fraction(a, sum(current)) for a in current)

    @property
    def proportions(self) -> tuple[Fraction, ...]:
        """Each source's expected share of the draws from the current position on: its
        token weight over its mean length, normalised."""
        pending = self._pending_weights
        current = self.schedule.segments[-1][1] if pending is None else pending[1]
        return draw_shares(current, self.sizes, self.source_tokens)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As :meth:`DistributedMixtureSampler.load_state_dict`, and the state must be of
        the same lengths, ``max_tokens``, cost and window (each refused naming the field);
        :attr:`weights` become the exact token shares the loaded schedule draws. A state
        of a version before the merge by tokens is refused naming its missing field."""
        refuse_rate_state(self, state_dict)
        super().load_state_dict(state_dict)
        self.weights = self.token_proportions

    # Hooks: the token sampler's, over the mixture's stream ---------------------------------

    def order(self) -> TokenOrder:
        """The current epoch's order: the mixture's window of the stream, sorted and cut
        by the token machinery (kept while the settings and the schedule stay the same)."""
        stream = self._mixture_order()
        key = (
            stream.epoch,
            stream.seed,
            stream.shuffle,
            stream.schedule,
            stream.length,
            self.max_tokens,
            self.cost,
            self.window,
        )
        if self._order is None or self._order[0] != key:
            order = TokenOrder(
                self._held.owned(),
                self.max_tokens,
                self.cost,
                checks.positive("window", self.window),
                shuffle=stream.shuffle,
                seed=stream.seed,
                epoch=stream.epoch,
                permutation="feistel",
                stream=stream,
            )
            self._order, self._layouts = (key, order), {}
        return self._order[1]

    def _plan(self, start: int) -> EpochPlan:
        return DistributedTokenBatchSampler._plan(self, start)

    def _order_fields(self) -> dict[str, int | str]:
        return {
            **_Mixture._order_fields(self),
            **DistributedTokenBatchSampler._order_fields(self),
            MIXING_FIELD: MERGED,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(sizes={list(self.sizes)}, weights={list(self.weights)}, "
            f"max_tokens={self.max_tokens}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
            f"tail={self.tail!r}, cost={self.cost!r}, window={self.window}, "
            f"epoch_length={self.epoch_length}, epoch={self.epoch})"
        )
