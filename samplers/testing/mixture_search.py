"""The search of the mixture guarantees (:mod:`samplers.testing.mixtures`): hypothesis
draws mixtures, and a violation is shrunk to the smallest mixture found.

:func:`check_mixture_guarantee` searches one guarantee of ``MIXTURES``, derandomised
(``thorough`` draws more, at random); :func:`check_mixture` searches them all. Mixtures
are drawn with one to four sources of up to 40 samples and small weights, or, for the
guarantees of :data:`LARGE_WEIGHTS`, three to six sources with one or two weights far
larger than the rest; for those of :data:`EITHER_WEIGHTS`, half of each. Shrinking drops
a source, then lowers the ranks, the steps taken, the weights and the sizes, one change
at a time, while the violation stays.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, cast

import samplers.testing.token_levels  # noqa: F401  (registers mixture-token-level, last)
from samplers.testing.mixtures import Mixture, plain_epoch
from samplers.testing.registry import MIXTURES
from samplers.testing.running import Factory, Rejected, Unsupported, Violation, raised_in_check
from samplers.testing.search import SEEDS, Result, _Tally

__all__ = [
    "EITHER_WEIGHTS",
    "LARGE_WEIGHTS",
    "MIXTURE_EXAMPLES",
    "TOKEN_LENGTHS",
    "check_mixture",
    "check_mixture_guarantee",
]

#: Examples the search tries per guarantee (derandomised), and thorough.
MIXTURE_EXAMPLES = {False: 20, True: 300}


#: Guarantees searched over mixtures whose weights include some far larger than the rest
#: (common denominators past any bounded period): their weights are drawn from these.
LARGE_WEIGHTS = {"mixture-positive-share": (1 << 16, 10**7)}
#: Guarantees searched over mixtures of either kind, small weights or some far larger than
#: the rest, drawn half and half: a state's or a new weighting's parts pass any bounded
#: period there (a sampler that checks a loaded schedule against one refuses its own).
EITHER_WEIGHTS = {
    "mixture-elastic-resume": (1 << 16, 10**7),
    "mixture-reweight": (1 << 16, 10**7),
}
#: Guarantees searched over mixtures whose samples have lengths in tokens, drawn from
#: this range (the others' factories are given 1 token per sample).
TOKEN_LENGTHS = {"mixture-token-level": (1, 40)}


def _strategy(guarantee: str = "") -> Any:
    from hypothesis import strategies as st

    @st.composite
    def mixtures(draw: Any) -> Mixture:
        large = LARGE_WEIGHTS.get(guarantee)
        either = EITHER_WEIGHTS.get(guarantee)
        if either is not None and draw(st.booleans()):
            large = either
        count = draw(st.integers(1, 4) if large is None else st.integers(3, 6))
        sizes = tuple(draw(st.lists(st.integers(1, 40), min_size=count, max_size=count)))
        if large is None:
            weights = st.lists(st.integers(0, 6), min_size=count, max_size=count).filter(any)
        else:  # one or two weights far larger than the small others, in any place
            big = st.lists(st.integers(*large), min_size=1, max_size=2)
            small = st.lists(st.integers(0, 3), min_size=count, max_size=count)
            weights = (
                st.tuples(big, small)
                .map(lambda pair: tuple((pair[0] + pair[1])[:count]))
                .flatmap(st.permutations)
            )
        span = TOKEN_LENGTHS.get(guarantee)
        lengths: tuple[int, ...] = ()
        if span is not None:
            each = st.lists(st.integers(*span), min_size=sum(sizes), max_size=sum(sizes))
            lengths = tuple(draw(each))
        return Mixture(
            sizes,
            tuple(draw(weights)),
            draw(st.integers(1, 6)),
            draw(st.sampled_from(SEEDS)),
            draw(st.integers(0, 60)),
            draw(st.integers(1, 6)),
            tuple(draw(weights)),
            lengths,
        )

    return mixtures()


def _kept(mixture: Mixture, sizes: list[int]) -> tuple[int, ...]:
    """The lengths of the first ``sizes[d]`` samples of each source (0: dropped)."""
    if not mixture.lengths:
        return ()
    starts = mixture.offsets
    return tuple(
        mixture.lengths[i] for d, n in enumerate(sizes) for i in range(starts[d], starts[d] + n)
    )


def _smaller(mixture: Mixture) -> list[Mixture]:
    """Mixtures one change smaller, smallest first."""
    found = []
    count = len(mixture.sizes)
    for d in range(count):
        if count > 1:
            keep = [e for e in range(count) if e != d]
            weights = tuple(mixture.weights[e] for e in keep)
            new = tuple(mixture.new_weights[e] for e in keep) if mixture.new_weights else ()
            if any(weights):
                found.append(
                    replace(
                        mixture,
                        sizes=tuple(mixture.sizes[e] for e in keep),
                        weights=weights,
                        new_weights=new,
                        lengths=_kept(
                            mixture, [0 if e == d else n for e, n in enumerate(mixture.sizes)]
                        ),
                    )
                )
    for name in ("world_size", "other_world_size", "taken"):
        value = getattr(mixture, name)
        for smaller in sorted({1 if name != "taken" else 0, value // 2, value - 1}):
            if (0 if name == "taken" else 1) <= smaller < value:
                found.append(replace(mixture, **{name: smaller}))
    for name in ("weights", "new_weights"):
        values = getattr(mixture, name)
        for d, weight in enumerate(values):
            for smaller in sorted({0, weight // 2, weight - 1}):
                changed = tuple(smaller if e == d else w for e, w in enumerate(values))
                if 0 <= smaller < weight and any(changed):
                    values_of: dict[str, Any] = {name: changed}
                    found.append(replace(mixture, **values_of))
    for d, size in enumerate(mixture.sizes):
        for smaller in sorted({1, size // 2, size - 1}):
            if 1 <= smaller < size:
                sizes = tuple(smaller if e == d else s for e, s in enumerate(mixture.sizes))
                found.append(replace(mixture, sizes=sizes, lengths=_kept(mixture, list(sizes))))
    # Lengths: a source's all down to its shortest, or its longest halved.
    for d, size in enumerate(mixture.sizes if mixture.lengths else ()):
        start = mixture.offsets[d]
        mine = list(mixture.lengths[start : start + size])
        longest = max(mine)
        for shorter in ([min(mine)] * size, [(n + 1) // 2 if n == longest else n for n in mine]):
            if mine != shorter:
                lengths = (*mixture.lengths[:start], *shorter, *mixture.lengths[start + size :])
                found.append(replace(mixture, lengths=lengths))
    return found


def _minimised(mixture: Mixture, violates: Callable[[Mixture], bool]) -> Mixture:
    for _ in range(200):
        for smaller in _smaller(mixture):
            if violates(smaller):
                mixture = smaller
                break
        else:
            return mixture
    return mixture


def _violation(factory: Factory, guarantee: str, mixture: Mixture) -> Violation | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MIXTURES[guarantee].check(factory, cast("Any", mixture))
    except (Violation, Unsupported, Rejected):
        raise
    except Exception as error:
        raise _judged(factory, guarantee, mixture, error) from error
    return None


def _judged(factory: Factory, guarantee: str, mixture: Mixture, error: Exception) -> Exception:
    """As for the other guarantees (:func:`samplers.testing.search`): :class:`Rejected` when
    the sampler also fails to build and run the mixture's epoch plainly on every rank, else a
    :class:`Violation` of ``guarantee`` naming the error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain_epoch(factory, mixture)
    except Exception:
        return Rejected(error)
    return raised_in_check(guarantee, 0, error, "builds and runs this mixture's epoch")


def check_mixture_guarantee(factory: Factory, guarantee: str, *, thorough: bool = False) -> Result:
    """Search mixtures for a violation of ``guarantee`` (an id of ``MIXTURES``); the
    smallest one found is the counterexample."""
    if guarantee not in MIXTURES:
        raise ValueError(f"guarantee must be one of {list(MIXTURES)}, got {guarantee!r}")
    from hypothesis import HealthCheck, Phase, Verbosity, find, settings
    from hypothesis.errors import NoSuchExample

    tally = _Tally()

    def violates(mixture: Mixture) -> bool:
        tally.tried += 1
        try:
            return _violation(factory, guarantee, mixture) is not None
        except Violation:
            return True
        except Unsupported as reason:
            tally.unsupported = str(reason)
        except Rejected:
            tally.rejected += 1
        return False

    options = settings(
        max_examples=MIXTURE_EXAMPLES[thorough],
        derandomize=not thorough,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    try:
        found = _minimised(find(_strategy(guarantee), violates, settings=options), violates)
    except NoSuchExample:
        if tally.unsupported:
            return Result(guarantee, None, None, f"not supported: {tally.unsupported}")
        if tally.rejected == tally.tried:
            return Result(
                guarantee, None, None, "not supported: the sampler raised for every mixture"
            )
        return Result(
            guarantee,
            True,
            None,
            f"held on {tally.tried - tally.rejected} mixtures searched",
            examples=tally.tried,
        )
    try:
        violation = _violation(factory, guarantee, found)
    except Violation as raised:
        violation = raised
    if violation is None:
        return Result(guarantee, False, asdict(found), "violated, but not reproducibly")
    counterexample = {**asdict(found), **violation.details, "what": violation.what}
    return Result(
        guarantee,
        False,
        counterexample,
        str(violation),
        violation.experience,
        tally.tried,
    )


def check_mixture(factory: Factory, *, thorough: bool = False) -> list[Result]:
    """:func:`check_mixture_guarantee` for every mixture guarantee, in registry order."""
    return [check_mixture_guarantee(factory, g, thorough=thorough) for g in MIXTURES]
