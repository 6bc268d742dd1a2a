"""The cost models of token-budgeted batches: :class:`TokenCost` and :func:`as_cost`.

Guarantee: every cost is an exact integer, computed the same way on every rank from the
lengths alone, so the batches cut under it are the same whatever the world size.

A batch's cost is made of a *per-sample cost* ``c(d)`` of a length ``d``, combined in one
of two ways (``kind``):

* ``"padded"``: ``count x c(L)`` for the batch's longest length ``L`` (a batch padded to
  its longest sample: every row costs what the longest does);
* ``"sum"``: the sum of ``c(d)`` over the batch's samples (packed or padding-free
  batches: each sample costs what it costs alone).

The per-sample cost is one of:

* linear (the default): ``c(d) = d``, tokens. ``"padded"`` and ``"sum"`` are these;
* quadratic (``quadratic=q``, an integer ``q >= 1``): ``c(d) = d + d² / q``, lhotse's
  ``quadratic_duration`` (attention's share of the work grows with the length; lhotse
  suggests ``q`` of 15 to 40 seconds of audio; for tokens, about ``6 x`` the model width
  is where attention costs as much as the linear layers). Kept exact by counting in
  units of ``1 / q``: a batch fits when ``q * d + d²`` (summed or padded) is at most
  ``q * max_tokens``, with no rounding;
* a callable (``per_sample=f, name=...``): ``f`` takes an int64 tensor of lengths and
  returns a tensor of the same shape of non-negative integer costs, one per sample,
  elementwise (``f(lengths)[i]`` depends on ``lengths[i]`` only); compared with
  ``max_tokens`` as it is. ``name`` is required: it is what a checkpoint records of the
  model (a function cannot be saved), so a resume with another ``name`` is refused, and
  two different functions must not share a name.

A sample whose own cost exceeds ``max_tokens`` forms a batch of its own.

Exact integers end to end: the budget in cost units (``max_tokens`` times :attr:`TokenCost.
scale`) must be below :data:`BUDGET_LIMIT` (``2**62``; :meth:`TokenCost.checked_budget`
refuses more, naming the values, unless no batch of the data can cost that much, as with
``max_tokens=sys.maxsize`` for "no limit"), and the batches are cut from each sample's cost capped
at the budget plus one (:meth:`TokenCost.capped_costs`: a sample above the budget is
above it either way), summed without int64 overflow
(:func:`~samplers.tokens.arrays.reach_within`). So a cost in FLOPs (``6 * 70e9`` per
token, a budget of ``16 * 2048`` tokens' worth) cuts exactly the batches that cost in
tokens would, and every batch stays within the budget.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from samplers.checks import SamplerWarning
from samplers.tokens.checks import length_ints

__all__ = ["BUDGET_LIMIT", "COSTS", "Cost", "CostLike", "TokenCost", "as_cost", "warn_costly"]

#: How a batch's per-sample costs are combined: ``"padded"`` = count x the longest's,
#: ``"sum"`` = their sum.
Cost = Literal["padded", "sum"]
COSTS: tuple[Cost, ...] = get_args(Cost)
#: A budget in cost units must be below this: costs are cut and summed in int64, each
#: capped at the budget plus one (see the module docstring).
BUDGET_LIMIT = 1 << 62
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class TokenCost:
    """A batch cost model (see the module): ``kind`` combines a per-sample cost, linear,
    quadratic (``quadratic=q``: ``d + d² / q``) or a named callable (``per_sample=f``).

    Example::

        >>> TokenCost("padded", quadratic=32).batch([100, 80])   # 2 x (100 + 100² / 32)
        825.0
        >>> TokenCost("sum", quadratic=32).batch([100, 80])      # 100 + 312.5 + 80 + 200
        692.5
    """

    #: How a batch's per-sample costs combine: ``"padded"`` (the count times the
    #: costliest sample's cost) or ``"sum"`` (the sum of the samples' costs).
    kind: Cost = "padded"
    #: ``q`` of the quadratic per-sample cost ``d + d² / q`` (an integer of at least 1),
    #: or ``None``.
    quadratic: int | None = None
    #: A per-sample cost function (int64 lengths in, non-negative integer costs of the
    #: same shape out, elementwise), or ``None``; needs :attr:`name`.
    per_sample: Callable[[torch.Tensor], torch.Tensor] | None = None
    #: The name a checkpoint records for :attr:`per_sample` (a function cannot be saved).
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in COSTS:
            raise ValueError(
                f"TokenCost kind must be one of {', '.join(map(repr, COSTS))}, got {self.kind!r}"
            )
        if self.quadratic is not None:
            quadratic = self.quadratic
            try:  # integer-likes (numpy.int64, a 0-d integer tensor) count as integers
                whole = None if isinstance(quadratic, bool) else operator.index(quadratic)
            except TypeError:
                whole = None
            if whole is None or whole < 1:
                raise ValueError(
                    f"TokenCost quadratic must be an integer of at least 1, got {quadratic!r}"
                )
            object.__setattr__(self, "quadratic", whole)
            if self.per_sample is not None:
                raise ValueError("TokenCost takes quadratic= or per_sample=, not both")
        if self.per_sample is not None:
            if not callable(self.per_sample):
                raise TypeError(
                    f"TokenCost per_sample must be callable, got {type(self.per_sample).__name__}"
                )
            if not isinstance(self.name, str) or not self.name:
                raise ValueError(
                    "TokenCost(per_sample=...) needs name= (a non-empty string): a checkpoint "
                    f"records the name, as a function cannot be saved; got name={self.name!r}"
                )
        elif self.name is not None:
            raise ValueError(f"TokenCost name= is for a per_sample callable, got {self.name!r}")

    @property
    def scale(self) -> int:
        """Cost units per token: ``q`` for the quadratic model (exact in ``1 / q``), else 1."""
        return self.quadratic or 1

    @property
    def label(self) -> str:
        """The model as a checkpoint records it: ``"padded"``, ``"sum"``,
        ``"padded, quadratic=32"`` or ``"sum, name=flops"``."""
        if self.quadratic is not None:
            return f"{self.kind}, quadratic={self.quadratic}"
        if self.name is not None:
            return f"{self.kind}, name={self.name}"
        return self.kind

    @property
    def linear(self) -> bool:
        """Whether the per-sample cost is the length itself."""
        return self.quadratic is None and self.per_sample is None

    def budget(self, max_tokens: int) -> int:
        """``max_tokens`` in cost units (:attr:`scale` per token)."""
        return max_tokens * self.scale

    def checked_budget(
        self, max_tokens: int, name: str = "max_tokens", *, count: int = 0, longest: int = 0
    ) -> int:
        """:meth:`budget`, refused with ``ValueError`` (naming ``name``, its value and the
        scale) when it is :data:`BUDGET_LIMIT` or more, unless no batch of ``count``
        samples of at most ``longest`` can cost that much (linear and quadratic costs:
        such a budget cuts as ``BUDGET_LIMIT - 1`` does, every window one batch)."""
        budget = self.budget(max_tokens)
        no_batch_reaches = count * self.cost_of(longest) < BUDGET_LIMIT - 1
        if budget >= BUDGET_LIMIT and self.per_sample is None and no_batch_reaches:
            return budget
        if budget >= BUDGET_LIMIT:
            scaled = f" x quadratic={self.quadratic} = {budget}" if self.scale > 1 else ""
            raise ValueError(
                f"{name}={max_tokens}{scaled} cost units is too large a budget: it must be "
                f"below 2**62 ({BUDGET_LIMIT}) so that costs add up exactly in int64; "
                "scale the costs down (e.g. count in GFLOPs rather than FLOPs)"
            )
        return budget

    def cost_of(self, length: int) -> int:
        """One length's cost in cost units, as an exact Python integer."""
        if self.quadratic is not None:
            return self.quadratic * length + length * length
        if self.per_sample is None:
            return length
        return int(self.sample_costs(torch.tensor([length], dtype=torch.int64))[0])

    def _quadratic_limit(self, cap: int) -> int:
        """The least length whose quadratic cost exceeds ``cap``."""
        q = self.scale
        # d * (q + d) > cap: from d = (sqrt(q² + 4 cap) - q) / 2, stepped to the exact one.
        d = max((math.isqrt(q * q + 4 * cap) - q) // 2, 0)
        while q * d + d * d <= cap:
            d += 1
        while d and q * (d - 1) + (d - 1) * (d - 1) > cap:
            d -= 1
        return d

    def capped_costs(self, lengths: torch.Tensor, budget: int) -> torch.Tensor:
        """Each length's cost (int64), exact where it is at most ``budget`` (below
        :data:`BUDGET_LIMIT`) and ``budget + 1`` where it is more: what cutting batches
        under ``budget`` needs, never overflowing int64 (a quadratic cost is computed on
        lengths clamped where it passes the budget)."""
        values = lengths.to(torch.int64)
        if self.quadratic is not None:
            values = values.clamp(max=self._quadratic_limit(budget))
            costs = self.quadratic * values + values * values
        elif self.per_sample is None:
            costs = values
        else:
            costs = self.sample_costs(values)
        return costs.clamp(max=budget + 1)

    def sample_costs(self, lengths: torch.Tensor) -> torch.Tensor:
        """Each length's cost alone, in cost units (int64); ``ValueError`` naming the
        longest when a quadratic cost would not fit int64."""
        values = lengths.to(torch.int64)
        if self.quadratic is not None:
            if values.numel() and int(values.max()) >= self._quadratic_limit(_INT64_MAX):
                longest = int(values.max())
                raise ValueError(
                    f"TokenCost quadratic={self.quadratic}: length {longest} costs "
                    f"{self.cost_of(longest)} units, more than int64 holds (2**63 - 1)"
                )
            return self.quadratic * values + values * values
        if self.per_sample is None:
            return values
        found = self.per_sample(values.clone())
        if not isinstance(found, torch.Tensor) or found.shape != values.shape:
            shape = tuple(found.shape) if isinstance(found, torch.Tensor) else type(found)
            raise ValueError(
                f"TokenCost {self.name!r}: per_sample must return a tensor of shape "
                f"{tuple(values.shape)} (one cost per length), got {shape}"
            )
        if found.is_floating_point() or found.is_complex() or found.dtype == torch.bool:
            raise TypeError(
                f"TokenCost {self.name!r}: per_sample must return integer costs (scale and "
                f"round them, e.g. to microseconds), got dtype {found.dtype}"
            )
        found = found.to(torch.int64)
        if found.numel() and int(found.min()) < 0:
            where = int(torch.argmin(found))
            raise ValueError(
                f"TokenCost {self.name!r}: per_sample must return costs of at least 0, got "
                f"{int(found[where])} for length {int(values[where])}"
            )
        return found

    def costs(self, lengths: torch.Tensor, batch: torch.Tensor, batches: int) -> torch.Tensor:
        """The cost (int64, cost units) of ``batches`` batches; ``batch[i]`` is the batch
        number of the sample of length ``lengths[i]``."""
        result = torch.zeros(batches, dtype=torch.int64)
        if lengths.numel() == 0:
            return result
        if self.kind == "sum":
            return result.index_add_(0, batch, self.sample_costs(lengths))
        longest = torch.zeros(batches, dtype=torch.int64)
        longest.scatter_reduce_(0, batch, lengths.to(torch.int64), reduce="amax")
        counts = torch.bincount(batch, minlength=batches)
        return self.sample_costs(longest) * counts

    def batch(self, lengths: Any) -> float:
        """One batch's cost in tokens (cost units / :attr:`scale`), for reports. Summed
        exactly in Python integers (a float only at the end); ``lengths`` must be integers
        of at least 0 (``TypeError`` or ``ValueError`` naming the first that is not)."""
        values = length_ints(lengths)
        if not values:
            return 0.0
        if self.kind == "padded":
            total = len(values) * self.cost_of(max(values))
        elif self.per_sample is None:
            total = sum(self.cost_of(value) for value in values)
        else:  # the named function's costs, computed together
            total = sum(self.sample_costs(torch.tensor(values, dtype=torch.int64)).tolist())
        return total / self.scale


#: What ``cost=`` accepts: ``"padded"``, ``"sum"``, a :class:`TokenCost`, or a mapping of
#: its fields (e.g. ``{"kind": "sum", "quadratic": 32}`` from a config file).
CostLike = Cost | TokenCost | Mapping[str, Any]


def as_cost(cost: Any, name: str = "cost") -> TokenCost:
    """``cost`` as a :class:`TokenCost`, or an error naming ``name`` and the value."""
    if isinstance(cost, TokenCost):
        return cost
    if isinstance(cost, str):
        if cost not in COSTS:
            raise ValueError(
                f"{name} must be one of {', '.join(map(repr, COSTS))}, got {cost!r} (or a "
                "TokenCost, see samplers.tokens.cost)"
            )
        return TokenCost(cost)
    if isinstance(cost, Mapping):
        unknown = sorted(set(map(str, cost)) - {"kind", "quadratic", "per_sample", "name"})
        if unknown:
            raise ValueError(
                f"{name} as a mapping takes kind, quadratic, per_sample and name, got "
                f"{unknown[0]!r}"
            )
        return TokenCost(**cost)
    if callable(cost):
        raise TypeError(
            f"{name}: pass a callable as TokenCost('padded' or 'sum', per_sample=f, "
            f"name='...'), got {cost!r:.60}"
        )
    raise TypeError(
        f"{name} must be 'padded', 'sum', a TokenCost or a mapping, got {type(cost).__name__}"
    )


def warn_costly(lengths: torch.Tensor, max_tokens: int, model: TokenCost) -> None:
    """Warn when some samples cost more than ``max_tokens`` alone under ``model`` (each
    forms a batch of its own), naming the costliest."""
    if lengths.numel() == 0:
        return
    # A budget past the limit was let through only where no batch can reach it.
    budget = min(model.budget(max_tokens), BUDGET_LIMIT - 1)
    costs = model.capped_costs(lengths, budget)
    over = costs > budget
    count = int(torch.count_nonzero(over))
    if count:
        # The costliest: a function's own largest cost, else the longest (a quadratic
        # cost grows with the length; it may not fit int64, so it is not computed whole).
        if model.per_sample is not None:
            costliest = int(torch.argmax(model.sample_costs(lengths)))
        else:
            costliest = int(torch.argmax(lengths))
        length = int(lengths[costliest])
        warnings.warn(
            f"{count} sample(s) cost more than max_tokens={max_tokens} alone under "
            f"cost={model.label!r} (the costliest: index {costliest}, length "
            f"{length}, cost {model.cost_of(length) / model.scale:g}); each "
            "forms a batch of its own that costs more than max_tokens",
            SamplerWarning,
            stacklevel=3,
        )
