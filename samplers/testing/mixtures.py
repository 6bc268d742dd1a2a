"""Guarantees of samplers that mix several datasets by weight, and their search.

A *mixing factory* takes the keyword arguments ``datasets`` (a list of ``range(n_d)``
sources), ``weights`` (one integer per source), ``lengths`` (each sample's length in
tokens, in ``ConcatDataset`` order), ``num_replicas``, ``rank`` and ``seed`` (it is passed
those its signature names; with ``**kwargs``, all but ``lengths``, which only a factory
naming it is passed) and returns a sampler yielding indices into
``ConcatDataset(datasets)``, or batches of them. An *epoch* of it is one ``iter()``
after ``set_epoch`` (when it has one). The guarantees, checked on every rank of a
:class:`Mixture`, with the ranks taking one item per step together:

* ``mixture-prefix-exact``: after every step of epoch 0 and of epoch 1 after it (one
  stream), over all ranks, each source's count is within 1 of its weight's share of the
  items taken;
* ``mixture-once-per-pass``: over :data:`EPOCHS` epochs, each source's draws, cut into
  passes of its size, hold no sample twice;
* ``mixture-elastic-resume``: a state saved after ``taken`` steps and loaded into
  ``other_world_size`` ranks (new rank ``j`` loading saved rank ``j % world_size``'s
  state) gives the rest of the epoch: nothing lost, nothing repeated;
* ``mixture-reweight``: ``set_weights(new_weights)`` on every rank after ``taken`` steps
  repeats nothing within a pass, and from there to the end of the next epoch every step
  is within 1 of the new weights' share;
* ``mixture-positive-share``: a source with a positive weight keeps a positive share,
  however small against the others (its ``proportions``, when the sampler has them, and
  its draws once they should hold two). Searched over mixtures whose weights include
  some far larger than the rest, where a sampler that rounds the weights to a bounded
  period can round a small one to 0;
* ``mixture-token-level`` (in :mod:`samplers.testing.token_levels`), for factories
  taking ``lengths``: the sources' tokens within a sample of a common level.

:func:`samplers.testing.mixture_search.check_mixture` searches mixtures with hypothesis
for each guarantee and shrinks a violation to the smallest mixture it finds (fewer and
smaller sources, fewer ranks).
"""

from __future__ import annotations

import inspect
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

from samplers.testing.registry import MIXTURES, Guarantee
from samplers.testing.running import (
    Factory,
    Failure,
    Lockstep,
    Rejected,
    Unsupported,
    indices,
    load,
    set_epoch,
    state_of,
)

__all__ = [
    "EPOCHS",
    "MIXTURE_ARGUMENTS",
    "Mixture",
    "after_reweighting",
    "elastic_resume",
    "once_per_pass",
    "plain_epoch",
    "positive_share",
    "prefix_exact",
    "reweight",
    "two_epochs",
]

#: The keyword arguments a mixing factory may take.
MIXTURE_ARGUMENTS = ("datasets", "weights", "lengths", "num_replicas", "rank", "seed")
#: Epochs the once-per-pass guarantee follows the sources' passes through.
EPOCHS = 3


@dataclass(frozen=True)
class Mixture:
    """One mixture the guarantees are checked on: source sizes and integer weights, the
    ranks, and where a state is saved (``taken`` steps, reduced modulo the epoch) and
    into how many ranks it is loaded, or from where ``new_weights`` apply."""

    #: The sources' sizes: the factory is given ``[range(size) for size in sizes]``.
    sizes: tuple[int, ...]
    #: The sources' weights, one per source, given to the factory.
    weights: tuple[int, ...]
    #: The number of ranks, each built by the factory.
    world_size: int = 1
    #: The seed the factory is given.
    seed: int = 0
    #: The steps after which a state is saved, or the weights change (modulo the epoch).
    taken: int = 0
    #: The world size a state is loaded into (one more when it equals ``world_size``).
    other_world_size: int = 2
    #: The weights ``set_weights`` is given after ``taken`` steps; empty (or of another
    #: length, or all zero): the reverse of ``weights`` (see :attr:`reweighted`).
    new_weights: tuple[int, ...] = ()
    #: Each sample's length in tokens, in ``ConcatDataset`` order, given to a factory
    #: taking ``lengths``; empty: every sample 1 token long (see :attr:`sample_lengths`).
    lengths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.sizes or len(self.weights) != len(self.sizes) or not any(self.weights):
            raise ValueError(f"a mixture needs a positive weight per source, got {self}")
        if min(self.sizes) < 1 or min(self.weights) < 0 or self.world_size < 1:
            raise ValueError(f"sizes, weights and world_size out of range in {self}")
        if self.lengths and (len(self.lengths) != sum(self.sizes) or min(self.lengths) < 1):
            raise ValueError(f"lengths must be one positive length per sample, got {self}")

    @property
    def sample_lengths(self) -> list[int]:
        """The lengths a factory taking ``lengths`` is given: :attr:`lengths`, or 1 each."""
        return list(self.lengths) if self.lengths else [1] * sum(self.sizes)

    def longest(self, source: int) -> int:
        """The longest sample of ``source``, in tokens."""
        start = self.offsets[source]
        return max(self.sample_lengths[start : start + self.sizes[source]])

    @property
    def offsets(self) -> list[int]:
        """Each source's first index in the ``ConcatDataset`` of the sources."""
        return [sum(self.sizes[:d]) for d in range(len(self.sizes))]

    def source(self, index: int) -> int:
        """The source a ConcatDataset index belongs to."""
        for d in reversed(range(len(self.sizes))):
            if index >= self.offsets[d]:
                return d
        return 0

    @property
    def reweighted(self) -> tuple[int, ...]:
        """The weights ``set_weights`` is given (the reverse ones by default)."""
        if len(self.new_weights) == len(self.sizes) and any(self.new_weights):
            return self.new_weights
        return tuple(reversed(self.weights))


def _accepted(factory: Factory) -> tuple[str, ...]:
    """The arguments a factory is passed: those it names; every one but ``lengths`` to a
    factory taking ``**kwargs`` (or whose signature cannot be read), ``lengths`` only to
    one that names it (a factory passing its keywords on to a sampler without lengths
    keeps working)."""
    unnamed = tuple(name for name in MIXTURE_ARGUMENTS if name != "lengths")
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return unnamed
    names = {p.name for p in parameters}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return (*unnamed, "lengths") if "lengths" in names else unnamed
    return tuple(name for name in MIXTURE_ARGUMENTS if name in names)


def build(factory: Factory, mixture: Mixture, rank: int, world_size: int | None = None) -> Any:
    """The factory's sampler for ``rank``; :class:`Rejected` when the factory raises."""
    values = {
        "datasets": [range(size) for size in mixture.sizes],
        "weights": list(mixture.weights),
        "lengths": mixture.sample_lengths,
        "num_replicas": mixture.world_size if world_size is None else world_size,
        "rank": rank,
        "seed": mixture.seed,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return factory(**{name: values[name] for name in _accepted(factory)})
    except Exception as error:
        raise Rejected(error) from error


def _ranks(factory: Factory, mixture: Mixture, world: int | None = None) -> list[Any]:
    world = mixture.world_size if world is None else world
    return [build(factory, mixture, rank, world) for rank in range(world)]


def _steps(taken: list[list[Any]]) -> list[list[int]]:
    """Each step's indices over all ranks (rank order), from the ranks' items."""
    longest = max((len(items) for items in taken), default=0)
    return [indices([items[k] for items in taken if k < len(items)]) for k in range(longest)]


def _epoch(samplers: Sequence[Any], epoch: int | None = None) -> list[list[int]]:
    for sampler in samplers:
        if epoch is not None:
            set_epoch(sampler, epoch)
    job = Lockstep(samplers)
    longest = 0
    while True:
        before = sum(len(t) for t in job.taken)
        job.step()
        if sum(len(t) for t in job.taken) == before:
            break
        longest += 1
    return _steps(job.taken)


def two_epochs(factory: Factory, mixture: Mixture) -> tuple[list[list[int]], int]:
    """Each step's indices of epochs 0 and 1, every rank built fresh and run in step, and
    the number of epoch 0's steps (epoch 1's follow them)."""
    samplers = _ranks(factory, mixture)
    first = _epoch(samplers, 0)
    return first + _epoch(samplers, 1), len(first)


def plain_epoch(factory: Factory, mixture: Mixture) -> list[list[int]]:
    """Each step's indices of the mixture's first epoch, every rank built fresh and run in
    step: what a sampler that takes the mixture at all does without error."""
    return _epoch(_ranks(factory, mixture))


def _shares(weights: Sequence[int]) -> list[Fraction]:
    return [Fraction(w, sum(weights)) for w in weights]


def _prefix_failure(
    mixture: Mixture,
    steps: list[list[int]],
    weights: Sequence[int],
    first_step: int = 0,
    epoch_steps: int | None = None,
) -> Failure | None:
    """The first step where a source is 1 or more off its share, counting from the first
    of ``steps`` (step ``first_step`` of epoch 0; ``epoch_steps``: the steps from which on
    the next epoch's follow, numbered from its own 0)."""
    shares = _shares(weights)
    counts: Counter[int] = Counter()
    k = 0
    for number, taken in enumerate(steps, start=first_step):
        later = epoch_steps is not None and number >= epoch_steps
        epoch, step = (1, number - (epoch_steps or 0)) if later else (0, number)
        for index in taken:
            counts[mixture.source(index)] += 1
            k += 1
        for d, share in enumerate(shares):
            if abs(counts[d] - share * k) >= 1:
                return Failure(
                    None,
                    epoch,
                    f"after step {step} ({k} samples over all ranks) source {d} has "
                    f"{counts[d]} samples, {float(share * k):g} expected (weight share "
                    f"{share}): off by {float(abs(counts[d] - share * k)):.3g}",
                    "a training step sees the sources in other proportions than asked",
                    {"step": step, "source": d},
                )
    return None


def _pass_failure(mixture: Mixture, draws: list[int], what: str) -> Failure | None:
    per_source: dict[int, list[int]] = {d: [] for d in range(len(mixture.sizes))}
    for index in draws:
        per_source[mixture.source(index)].append(index)
    for d, seen in per_source.items():
        size = mixture.sizes[d]
        for start in range(0, len(seen), size):
            one_pass = seen[start : start + size]
            repeated = [i for i, c in Counter(one_pass).items() if c > 1]
            if repeated:
                return Failure(
                    None,
                    0,
                    f"source {d} (size {size}) repeats index {repeated[0]} within its pass "
                    f"{start // size}{what}",
                    "some samples are seen twice while others of the same source wait",
                    {"source": d, "pass": start // size},
                )
    return None


def _mixture_guarantee(id: str, statement: str) -> Callable[[Callable[..., None]], Any]:
    def register(check: Callable[[Factory, Mixture], None]) -> Callable[[Factory, Mixture], None]:
        def checked(factory: Factory, mixture: Mixture) -> None:
            try:
                check(factory, mixture)
            except Failure as failure:
                raise failure.violation(id) from None

        checked.__doc__ = check.__doc__
        MIXTURES[id] = Guarantee(id, statement, cast("Any", checked))
        return checked

    return register


@_mixture_guarantee(
    "mixture-prefix-exact",
    "after every step each source is within 1 of its weight's share of all ranks' samples, "
    "in the first epoch and the next",
)
def prefix_exact(factory: Factory, mixture: Mixture) -> None:
    """Every step of epoch 0, and of epoch 1 after it (all ranks together, one stream from
    the start of epoch 0), is within 1 of the weights' shares: a sampler exact in its
    first epoch only drifts after it."""
    steps, first = two_epochs(factory, mixture)
    failure = _prefix_failure(mixture, steps, mixture.weights, 0, first)
    if failure is not None:
        raise failure


@_mixture_guarantee(
    "mixture-once-per-pass",
    "each source's draws, cut into passes of its size, never repeat a sample within a pass",
)
def once_per_pass(factory: Factory, mixture: Mixture) -> None:
    """Over :data:`EPOCHS` epochs, no pass of any source repeats a sample."""
    samplers = _ranks(factory, mixture)
    draws = [i for epoch in range(EPOCHS) for step in _epoch(samplers, epoch) for i in step]
    failure = _pass_failure(mixture, draws, f" (over {EPOCHS} epochs)")
    if failure is not None:
        raise failure


def _head(factory: Factory, mixture: Mixture) -> tuple[list[Any], list[list[int]], int]:
    """Ranks that took ``taken`` steps (reduced modulo the epoch), their steps, and taken."""
    steps = len(_epoch(_ranks(factory, mixture), 0))
    taken = mixture.taken % (steps + 1)
    samplers = _ranks(factory, mixture)
    for sampler in samplers:
        set_epoch(sampler, 0)
    job = Lockstep(samplers)
    job.step(taken)
    return samplers, _steps(job.taken), taken


@_mixture_guarantee(
    "mixture-elastic-resume",
    "a state loaded into another number of ranks gives the rest of the epoch exactly",
)
def elastic_resume(factory: Factory, mixture: Mixture) -> None:
    """Resumed on ``other_world_size`` ranks, the epoch loses and repeats nothing. New rank
    ``j`` loads the state of saved rank ``j % world_size``: every rank's state is used
    when the job grows, and a state must not depend on the rank that saved it."""
    whole = Counter(i for step in _epoch(_ranks(factory, mixture), 0) for i in step)
    samplers, head, taken = _head(factory, mixture)
    states = [state_of(sampler) for sampler in samplers]
    other = mixture.other_world_size
    if other == mixture.world_size:
        other += 1
    resumed = _ranks(factory, mixture, other)
    for j, sampler in enumerate(resumed):
        load(sampler, states[j % len(states)])
    rest = _epoch(resumed)
    seen = Counter(i for step in head + rest for i in step)
    lost, repeated = whole - seen, seen - whole
    if lost or repeated:
        raise Failure(
            None,
            0,
            f"saved after {taken} steps on {mixture.world_size} ranks and resumed on "
            f"{other} (new rank j loading saved rank j % {mixture.world_size}'s state): "
            f"{sum(lost.values())} samples of the epoch lost, "
            f"{sum(repeated.values())} repeated",
            "a job restarted on another number of GPUs skips or repeats data",
            {"taken": taken, "resumed_world_size": other},
        )


def after_reweighting(
    factory: Factory, mixture: Mixture
) -> tuple[list[list[int]], list[list[int]], int, int] | None:
    """``set_weights(mixture.reweighted)`` on every rank after ``taken`` steps of epoch 0:
    the steps before it, the steps after it to the end of epoch 1, ``taken``, and the
    number of epoch 0's steps (epoch 1's follow them); None (nothing called) when a
    sampler has no ``set_weights``."""
    samplers, head, taken = _head(factory, mixture)
    if not all(callable(getattr(sampler, "set_weights", None)) for sampler in samplers):
        return None
    for sampler in samplers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler.set_weights(list(mixture.reweighted))
    rest = _epoch(samplers)
    return head, rest + _epoch(samplers, 1), taken, taken + len(rest)


@_mixture_guarantee(
    "mixture-reweight",
    "set_weights repeats nothing within a pass and is within 1 of the new weights after, "
    "into the next epoch",
)
def reweight(factory: Factory, mixture: Mixture) -> None:
    """``set_weights`` on every rank after ``taken`` steps: the passes continue and the
    steps after it, to the end of the next epoch, are within 1 of the new shares."""
    after = after_reweighting(factory, mixture)
    if after is None:
        raise Unsupported("the sampler has no set_weights")
    head, steps, taken, epoch_steps = after
    draws = [i for step in head + steps for i in step]
    failure = _pass_failure(mixture, draws, f" (across set_weights after step {taken})")
    if failure is None:
        failure = _prefix_failure(mixture, steps, mixture.reweighted, taken, epoch_steps)
    if failure is not None:
        failure.details["taken"] = taken
        raise failure


@_mixture_guarantee(
    "mixture-positive-share",
    "a source with a positive weight keeps a positive share, however small against the "
    "others: it is never rounded to 0",
)
def positive_share(factory: Factory, mixture: Mixture) -> None:
    """The sampler's ``proportions`` (when it has them) are positive for every source of
    positive weight, and over :data:`EPOCHS` epochs such a source is drawn once its
    expected draws (its ``proportions``, else its weight's share) are two or more."""
    samplers = _ranks(factory, mixture)
    total = sum(mixture.weights)
    shares = getattr(samplers[0], "proportions", None)
    if shares is not None:
        for d, (weight, share) in enumerate(zip(mixture.weights, shares, strict=False)):
            if weight > 0 and not share > 0:
                raise Failure(
                    None,
                    0,
                    f"source {d} has weight {weight} of {total} but proportion {share}: "
                    "it is never drawn",
                    "a dataset the user weighted is silently left out of training",
                    {"source": d},
                )
    # The draws' expected shares: the sampler's own (weights that count tokens draw at
    # other rates), else the weights'.
    draw_shares = list(shares) if shares is not None else _shares(mixture.weights)
    draws = [i for epoch in range(EPOCHS) for step in _epoch(samplers, epoch) for i in step]
    counts = Counter(mixture.source(index) for index in draws)
    for d, weight in enumerate(mixture.weights):
        expected = Fraction(draw_shares[d]) * len(draws)
        if weight > 0 and expected >= 2 and counts[d] == 0:
            raise Failure(
                None,
                0,
                f"source {d} (weight {weight} of {total}) is never drawn in {len(draws)} "
                f"draws over {EPOCHS} epochs, {float(expected):g} expected",
                "a dataset the user weighted is silently left out of training",
                {"source": d},
            )
