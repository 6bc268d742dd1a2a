"""A cost model fitted to measured step times: :func:`fit_cost` and :class:`FittedCost`.

Guarantee: the fit is the same on every machine for the same batches, times and ``seed``,
and the cost it hands the sampler (:attr:`FittedCost.cost`) is an exact integer model
(linear, or quadratic with an integer ``q``) that is never cheaper than the fit: every
batch that costs at most :meth:`FittedCost.max_tokens` ``(seconds)`` under it has a fitted
step time (:meth:`FittedCost.predict`) of at most ``seconds`` (except a sample that costs
more alone, which the sampler puts in a batch of its own).

**The model.** One step over a batch takes ``overhead + a·T + b·A`` seconds, where

* ``kind="padded"`` (a batch padded to its longest length ``L``): ``T = count·L`` tokens,
  ``A = count·L²`` (attention over every padded row);
* ``kind="sum"`` (packed or padding-free batches): ``T = Σ d``, ``A = Σ d²`` (attention
  within each sample).

**The fit.** The batches are split at random (from ``seed``) into ``holdout`` of them
(rounded, at least one) held out and the rest (at least three) fitted: least squares with
``overhead``, ``a`` and ``b`` all at least 0 (non-negative least squares, solved exactly
by solving the unconstrained problem on every subset of the three unknowns, in float64
with the columns scaled, and keeping the best whose coefficients are all non-negative; a
larger subset is kept only where it lowers the squared error by more than
:data:`IMPROVEMENT` of the times' sum of squares). The coefficients are the fitted part's,
and :class:`HeldOutCheck` says how well they predict the held-out batches.

**As the sampler's cost.** ``a·d + b·d² = a·(d + d²/q)`` for ``q = a/b``, which
:class:`~samplers.tokens.cost.TokenCost` counts exactly for an integer ``q``. So ``q`` is
``a/b`` rounded to the nearest integer, at least 1 and at most :data:`QUADRATIC_LIMIT`
(where the fit found attention cheaper than ``a·d²/2**24``, it is counted at that: at
most ``d / 2**24`` of a sample's cost more), and a token of the cost is priced
``max(a, b·q)`` seconds (:attr:`FittedCost.unit_seconds`): then ``max(a, b·q)·(d + d²/q)``
is at least ``a·d + b·d²`` (never cheaper); where ``a/b`` is at least 1 the price is at
most ``a + b/2``. ``b = 0`` gives the linear cost, priced ``a``.
:meth:`FittedCost.max_tokens` is ``floor((seconds - overhead) / unit_seconds)``, computed
exactly from the floats.

**The checkpoint.** The cost is a :class:`FittedTokenCost`, a ``TokenCost`` whose label
(what a sampler's state records) ends in ``", fitted"``: ``"padded, quadratic=6144,
fitted"``. A state saved under it is refused by a sampler under any other model (a
hand-written ``TokenCost`` of the same ``q`` included) and loads under
``FittedTokenCost(kind, quadratic=q)``, which the label spells out. No float enters the
state: the integer model is ``(kind, q)``, and ``max_tokens`` is recorded as it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

import torch

from samplers.checks import as_int
from samplers.tokens.checks import length_ints
from samplers.tokens.cost import COSTS, Cost, TokenCost

__all__ = [
    "IMPROVEMENT",
    "QUADRATIC_LIMIT",
    "FittedCost",
    "FittedTokenCost",
    "HeldOutCheck",
    "fit_cost",
]

#: The largest ``q`` of a fitted quadratic cost (``2**24``): with it, any ``max_tokens``
#: below ``2**38`` keeps the budget in cost units below ``2**62``.
QUADRATIC_LIMIT = 1 << 24
#: A larger subset of the unknowns is kept only where it lowers the squared error by more
#: than this fraction of the times' sum of squares (so exact data without attention
#: fits ``b = 0``, not a rounding error's ``b``).
IMPROVEMENT = 1e-12
#: The unknowns: overhead, a (per token), b (per unit of attention).
_UNKNOWNS = 3


@dataclass(frozen=True)
class FittedTokenCost(TokenCost):
    """A :class:`~samplers.tokens.cost.TokenCost` made by a fit (:attr:`FittedCost.cost`):
    the same integer model, with ``", fitted"`` at the end of its label, so a checkpoint
    records that the cost was fitted (``FittedTokenCost("padded", quadratic=6144)`` rebuilds
    the one labelled ``"padded, quadratic=6144, fitted"``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.per_sample is not None:
            raise ValueError(
                f"FittedTokenCost is linear or quadratic, got per_sample={self.per_sample!r}"
            )

    @property
    def label(self) -> str:
        """The model as a checkpoint records it: ``TokenCost``'s label and ``", fitted"``."""
        return f"{super().label}, fitted"


@dataclass(frozen=True)
class HeldOutCheck:
    """How well a fit's coefficients predict the batches it was not fitted to."""

    #: The held-out batches' indices in :func:`fit_cost`'s ``batches``, ascending.
    held_out: tuple[int, ...]
    #: How many batches the coefficients were fitted to (all the others).
    fitted_on: int
    #: R² on the held-out batches: ``1 - Σ(predicted - measured)² / Σ(measured - their
    #: mean)²`` (1 is a perfect prediction); ``None`` when their times are all equal.
    r2: float | None
    #: The largest ``|predicted - measured| / measured`` over the held-out batches.
    max_relative_error: float
    #: The mean of ``|predicted - measured| / measured`` over the held-out batches.
    mean_relative_error: float

    @property
    def batches(self) -> int:
        """How many batches were held out."""
        return len(self.held_out)


def _seconds_value(name: str, value: Any, *, positive: bool) -> float:
    """``value`` as a finite float (at least 0, or above 0 when ``positive``), or an error
    naming ``name`` and the value."""
    if isinstance(value, (bool, str, bytes)) or _is_boolean(value):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        least = "above 0" if positive else "at least 0"
        raise ValueError(f"{name} must be a finite number {least}, got {value!r}")
    return number


def _is_boolean(value: Any) -> bool:
    """A numpy bool or a bool tensor (``float()`` of which is 0 or 1)."""
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _lengths(name: str, batch: Any) -> list[int]:
    """A batch's lengths as Python ints (a sequence, array or tensor of non-negative
    integers, not empty), or an error naming ``name``."""
    if hasattr(batch, "tolist"):
        batch = batch.tolist()
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Iterable):
        raise TypeError(f"{name} must be a sequence of lengths, got {type(batch).__name__}")
    values = length_ints(batch, name)
    if not values:
        raise ValueError(f"{name} is an empty batch: a measured step needs samples")
    return values


def _kind(kind: Any) -> Cost:
    if not isinstance(kind, str) or kind not in COSTS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, COSTS))}, got {kind!r}")
    return kind


def _features(kind: Cost, lengths: Sequence[int]) -> tuple[int, int]:
    """``(T, A)`` of a batch, exact: tokens and attention under ``kind``."""
    if kind == "padded":
        longest = max(lengths)
        return len(lengths) * longest, len(lengths) * longest * longest
    return sum(lengths), sum(d * d for d in lengths)


@dataclass(frozen=True)
class FittedCost:
    """Step time ``overhead + per_token·T + per_attention·A`` (see the module for ``T``
    and ``A``), fitted by :func:`fit_cost` or built from known coefficients, and what the
    sampler needs of it: :attr:`cost` and :meth:`max_tokens`.

    Example::

        >>> fitted = FittedCost("padded", overhead=0.01, per_token=3e-6, per_attention=1e-9)
        >>> fitted.quadratic, fitted.label   # 3e-6 · (d + d² / 3000)
        (3000, 'padded, quadratic=3000, fitted')
        >>> fitted.max_tokens(0.5)           # floor((0.5 - 0.01) / 3e-6)
        163333
        >>> round(fitted.predict([1000, 600]), 6)   # 0.01 + 3e-6·2·1000 + 1e-9·2·1000²
        0.018
    """

    #: ``"padded"`` (count x the longest) or ``"sum"`` (summed over the samples).
    kind: Cost
    #: Seconds per step whatever the batch (at least 0).
    overhead: float
    #: Seconds per token of ``T`` (``a``, at least 0).
    per_token: float
    #: Seconds per unit of attention ``A`` (``b``, at least 0; one unit is one token²).
    per_attention: float
    #: How the coefficients predicted the batches held out of the fit; ``None`` for a
    #: model built from known coefficients.
    check: HeldOutCheck | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _kind(self.kind))
        for field in ("overhead", "per_token", "per_attention"):
            value = _seconds_value(f"FittedCost {field}", getattr(self, field), positive=False)
            object.__setattr__(self, field, value)
        if self.per_token == 0 and self.per_attention == 0:
            raise ValueError(
                "FittedCost needs per_token or per_attention above 0 (a step time that "
                f"grows with the tokens), got per_token={self.per_token!r}, "
                f"per_attention={self.per_attention!r}"
            )
        if self.check is not None and not isinstance(self.check, HeldOutCheck):
            raise TypeError(
                f"FittedCost check must be a HeldOutCheck or None, got {type(self.check).__name__}"
            )

    @property
    def quadratic(self) -> int | None:
        """``q`` of the cost ``d + d²/q``: ``per_token / per_attention`` rounded to the
        nearest integer, at least 1 and at most :data:`QUADRATIC_LIMIT`; ``None`` (linear)
        when ``per_attention`` is 0."""
        if self.per_attention == 0:
            return None
        ratio = Fraction(self.per_token) / Fraction(self.per_attention)
        return max(1, min(round(ratio), QUADRATIC_LIMIT))

    def _unit(self) -> Fraction:
        """:attr:`unit_seconds`, exact."""
        q = self.quadratic
        if q is None:
            return Fraction(self.per_token)
        return max(Fraction(self.per_token), Fraction(self.per_attention) * q)

    @property
    def unit_seconds(self) -> float:
        """Seconds per token of :attr:`cost`: ``max(per_token, per_attention·q)`` (rounded
        up to a float), so that the cost never prices a batch below its fitted time."""
        exact = self._unit()
        value = float(exact)
        return value if Fraction(value) >= exact else math.nextafter(value, math.inf)

    @property
    def cost(self) -> FittedTokenCost:
        """The sampler's ``cost=``: ``FittedTokenCost(kind, quadratic=q)``, or
        ``FittedTokenCost(kind)`` (linear) when ``per_attention`` is 0."""
        return FittedTokenCost(self.kind, quadratic=self.quadratic)

    @property
    def label(self) -> str:
        """What a sampler's checkpoint records of :attr:`cost`, e.g. ``"padded,
        quadratic=6144, fitted"``."""
        return self.cost.label

    @property
    def summary(self) -> str:
        """The model and its held-out check in one line, for a log."""
        text = (
            f"{self.label}: {self.overhead:.4g} s + {self.per_token:.4g} s x tokens + "
            f"{self.per_attention:.4g} s x attention"
        )
        check = self.check
        if check is not None:
            r2 = "n/a" if check.r2 is None else f"{check.r2:.4f}"
            text += (
                f"; held out {check.batches} batches (fitted on {check.fitted_on}): "
                f"R² {r2}, largest relative error {check.max_relative_error:.1%}"
            )
        return text

    def max_tokens(self, seconds: float) -> int:
        """The budget (tokens of :attr:`cost`) of a step of ``seconds``:
        ``floor((seconds - overhead) / unit_seconds)``, exact; ``ValueError`` when
        ``seconds`` leaves no room for one token beyond the overhead."""
        step = _seconds_value("seconds", seconds, positive=True)
        room = Fraction(step) - Fraction(self.overhead)
        if room <= 0:
            raise ValueError(
                f"seconds={seconds!r} is not longer than the fitted overhead="
                f"{self.overhead!r} seconds per step: no batch fits in it"
            )
        budget = math.floor(room / self._unit())
        if budget < 1:
            raise ValueError(
                f"seconds={seconds!r} leaves {float(room)!r} seconds beyond the overhead="
                f"{self.overhead!r}, less than one token's {self.unit_seconds!r}"
            )
        return budget

    def predict(self, lengths: Any) -> float:
        """The fitted seconds of a step over a batch of these lengths (not empty),
        computed exactly from the coefficients and rounded once."""
        tokens, attention = _features(self.kind, _lengths("lengths", lengths))
        exact = (
            Fraction(self.overhead)
            + Fraction(self.per_token) * tokens
            + Fraction(self.per_attention) * attention
        )
        return float(exact)


def _nonnegative_least_squares(x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """The coefficients (all at least 0) that minimise ``|x @ c - y|²``: the best of the
    unconstrained least-squares solutions on each subset of the columns that are all
    non-negative (the optimum is one of them), in float64, columns scaled to at most 1."""
    scale = x.abs().amax(dim=0)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    scaled = x / scale
    total = float(y @ y)
    best = torch.zeros(x.shape[1], dtype=torch.float64)
    best_error = total
    for size in range(1, x.shape[1] + 1):
        for subset in combinations(range(x.shape[1]), size):
            columns = list(subset)
            solution = torch.linalg.lstsq(
                scaled[:, columns], y.unsqueeze(1), driver="gelsd"
            ).solution.squeeze(1)
            if not bool(torch.isfinite(solution).all()) or bool((solution < 0).any()):
                continue
            candidate = torch.zeros_like(best)
            candidate[columns] = solution
            error = float((scaled @ candidate - y).square().sum())
            if error < best_error - IMPROVEMENT * total:
                best, best_error = candidate, error
    return (best / scale).tolist()


def _held_out_count(batches: int, holdout: float) -> int:
    held = max(1, math.floor(holdout * batches + 0.5))
    if batches - held < _UNKNOWNS:
        raise ValueError(
            f"fit_cost needs at least {_UNKNOWNS} batches to fit (overhead, per token, "
            f"per attention) besides at least 1 held out: len(batches)={batches} with "
            f"holdout={holdout!r} holds out {held} and leaves {batches - held}"
        )
    return held


def fit_cost(
    batches: Sequence[Any],
    seconds: Sequence[Any],
    kind: Cost = "padded",
    *,
    holdout: float = 0.25,
    seed: int = 0,
) -> FittedCost:
    """Fit ``overhead + a·T + b·A`` (see the module) to measured step times.

    Args:
        batches: each measured step's batch, as its samples' lengths (a sequence, array or
            tensor of non-negative integers, not empty), e.g. from the sampler's batches
            mapped through the lengths.
        seconds: each step's measured time in seconds (finite, above 0), one per batch:
            from a profiler, CPU or GPU (synchronise before reading a GPU's clock).
        kind: ``"padded"`` (batches padded to their longest sample) or ``"sum"`` (packed
            or padding-free batches).
        holdout: the fraction of the batches held out of the fit to check it, in
            ``(0, 1)``; rounded, at least one, leaving at least three to fit.
        seed: which batches are held out (``torch.randperm`` from this seed).

    Returns:
        The :class:`FittedCost`, its :attr:`~FittedCost.check` computed on the held-out
        batches only.

    Example::

        >>> batches = [[n] * c for n, c in [(100, 8), (400, 2), (50, 20), (200, 4), (300, 3)]]
        >>> seconds = [0.01 + 1e-5 * len(b) * b[0] + 2e-8 * len(b) * b[0] ** 2 for b in batches]
        >>> fitted = fit_cost(batches, seconds, holdout=0.2)
        >>> fitted.label, fitted.check.batches, fitted.check.fitted_on   # 1e-5 / 2e-8 = 500
        ('padded, quadratic=500, fitted', 1, 4)
    """
    model = _kind(kind)
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)):
        raise TypeError(f"holdout must be a fraction in (0, 1), got {type(holdout).__name__}")
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must be a fraction in (0, 1), got {holdout!r}")
    seed = as_int("seed", seed)
    batches, seconds = list(batches), list(seconds)
    if len(batches) != len(seconds):
        raise ValueError(
            "fit_cost needs one measured time per batch: got len(batches)="
            f"{len(batches)} and len(seconds)={len(seconds)}"
        )
    held = _held_out_count(len(batches), holdout)
    lengths = [_lengths(f"batches[{i}]", batch) for i, batch in enumerate(batches)]
    times = [
        _seconds_value(f"seconds[{i}]", value, positive=True) for i, value in enumerate(seconds)
    ]
    features = [_features(model, values) for values in lengths]
    x = torch.tensor([[1.0, float(t), float(a)] for t, a in features], dtype=torch.float64)
    y = torch.tensor(times, dtype=torch.float64)
    order = torch.randperm(len(times), generator=torch.Generator().manual_seed(seed))
    held_out = sorted(order[:held].tolist())
    fitted = sorted(order[held:].tolist())
    overhead, per_token, per_attention = _nonnegative_least_squares(x[fitted], y[fitted])
    if per_token == 0 and per_attention == 0:
        raise ValueError(
            f"fit_cost: the measured times do not grow with the batches' tokens (the best "
            f"fit is a constant overhead={overhead:.6g} seconds), so no token budget follows "
            "from them; measure batches of more varied sizes"
        )
    coefficients = FittedCost(model, overhead, per_token, per_attention)
    predicted = [coefficients.predict(lengths[i]) for i in held_out]
    measured = [times[i] for i in held_out]
    relative = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True)]
    mean = sum(measured) / len(measured)
    spread = sum((m - mean) ** 2 for m in measured)
    squared = sum((p - m) ** 2 for p, m in zip(predicted, measured, strict=True))
    check = HeldOutCheck(
        held_out=tuple(held_out),
        fitted_on=len(fitted),
        r2=None if spread == 0 else 1 - squared / spread,
        max_relative_error=max(relative),
        mean_relative_error=sum(relative) / len(relative),
    )
    return FittedCost(model, overhead, per_token, per_attention, check)
