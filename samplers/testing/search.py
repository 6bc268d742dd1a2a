"""The search: hypothesis looks for a configuration that breaks a guarantee, and the
smallest one it shrinks to is the counterexample.

Derandomised by default (the same examples every run); ``thorough`` searches longer, with
random examples. A configuration the sampler raises for when built and iterated plainly
is skipped (and named in the result) by every guarantee but ``handles-every-size``, which
it violates; an error raised only by what a guarantee exercises (a ``state_dict`` at the
epoch's last step, a resume) violates that guarantee. A configuration
that takes longer than ``time_limit`` seconds stops the search with :class:`TimedOut`: a
sampler that hangs is not one to search further. The limit covers every call into the
factory's code: :func:`check_all` validates the factory within it, and the fresh-process
comparison of ``deterministic`` within a minute plus twice the limit per configuration. An
iteration that yields more than the configuration's share can hold is stopped whatever the
limit (:func:`~samplers.testing.running.bounded`): the sampler does not take that
configuration (a ``handles-every-size`` violation).
"""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from samplers.testing.factories import (
    FRESH_PROCESS_CONFIGURATIONS,
    deterministic_across_processes,
    reference,
    validated,
)
from samplers.testing.registry import CHECKS, GUARANTEES, REGISTRY
from samplers.testing.running import (
    Configuration,
    Expired,
    Factory,
    Rejected,
    Unsupported,
    Violation,
    bounded,
    raised_in_check,
)
from samplers.testing.running import time_limit as within

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EXAMPLES",
    "MAX_BATCH_SIZE",
    "MAX_DATASET_SIZE",
    "MAX_EPOCH",
    "MAX_WORLD_SIZE",
    "SEEDS",
    "Result",
    "TimedOut",
    "check",
    "check_all",
    "check_guarantee",
]

# Dataset sizes, world sizes, batch sizes, epochs and seeds the search draws from.
#: The largest dataset size the search draws.
MAX_DATASET_SIZE = 3000
#: The largest world size the search draws.
MAX_WORLD_SIZE = 16
#: The largest batch size the search draws.
MAX_BATCH_SIZE = 16
#: The largest epoch the search draws.
MAX_EPOCH = 3
SEEDS = (0, 1, 7, 2**32 + 5)
#: :func:`check`'s examples per guarantee: the default (derandomised) and thorough search.
EXAMPLES = {False: 40, True: 600}
#: At most this many further runs of a check make a shrunk counterexample smaller.
MINIMISE_ATTEMPTS = 400


@dataclass(frozen=True)
class Result:
    """One guarantee's outcome: ``holds`` is ``None`` when the guarantee does not apply."""

    #: The guarantee's id (a key of :data:`~samplers.testing.GUARANTEES`).
    guarantee: str
    #: Whether it held on every configuration searched; ``None``: it does not apply.
    holds: bool | None
    #: When violated, the smallest configuration found, with the rank, epoch and what failed.
    counterexample: dict[str, Any] | None = None
    #: What was found: the violation's message, what was searched, or why it does not apply.
    detail: str = ""
    #: When violated, what a user of the sampler sees.
    experience: str = ""
    #: How many configurations the search tried.
    examples: int = field(default=0, compare=False)
    #: When violated, the configuration found (the fields of :class:`Configuration`): pass
    #: it in ``first`` to a later search to try it before any other.
    configuration: dict[str, Any] | None = field(default=None, compare=False)


def _strategy() -> Any:
    from hypothesis import strategies as st

    return st.builds(
        Configuration,
        dataset_size=st.one_of(
            st.integers(0, 2 * MAX_WORLD_SIZE * MAX_BATCH_SIZE) | st.integers(0, MAX_DATASET_SIZE)
        ),
        world_size=st.integers(1, MAX_WORLD_SIZE),
        batch_size=st.integers(1, MAX_BATCH_SIZE),
        epoch=st.integers(0, MAX_EPOCH),
        seed=st.sampled_from(SEEDS),
        taken=st.integers(0, MAX_DATASET_SIZE),
        other_world_size=st.integers(1, MAX_WORLD_SIZE),
    )


def _candidates(configuration: Configuration, name: str) -> list[int]:
    """Smaller values of one field to try, smallest first."""
    value = getattr(configuration, name)
    if name == "dataset_size":
        steps = (configuration.world_size, configuration.batch_size)
        nearby = {value // 2, value - 1, *(value - step for step in steps)}
        nearby.add(value - configuration.world_size * configuration.batch_size)
        tried = set(range(min(value, 49))) | nearby
    elif name == "taken":
        tried = {0, 1, value // 2, value - 1}
    else:
        tried = set(range(1 if name.endswith("_size") else 0, value))
    return sorted(v for v in tried if 0 <= v < value)


def _minimised(
    configuration: Configuration, violates: Callable[[Configuration], bool]
) -> Configuration:
    """Greedily smaller fields while ``violates`` still holds: hypothesis's shrinker
    changes one number at a time, so it stops at, e.g., 188 samples in batches of 11
    where 5 in batches of 4 fail the same way."""
    attempts = 0
    changed = True
    while changed and attempts < MINIMISE_ATTEMPTS:
        changed = False
        for name in ("dataset_size", "world_size", "batch_size", "epoch", "taken"):
            for value in _candidates(configuration, name):
                attempts += 1
                smaller = replace(configuration, **{name: value})
                if violates(smaller):
                    configuration, changed = smaller, True
                    break
                if attempts >= MINIMISE_ATTEMPTS:
                    return configuration
    return configuration


def _size(configuration: Configuration) -> tuple[int, ...]:
    return (
        configuration.dataset_size,
        configuration.world_size,
        configuration.batch_size,
        configuration.epoch,
    )


def _shown(configuration: Configuration) -> str:
    return (
        f"dataset_size={configuration.dataset_size}, world_size={configuration.world_size}, "
        f"batch_size={configuration.batch_size}"
    )


def _counterexample(configuration: Configuration, violation: Violation) -> dict[str, Any]:
    found: dict[str, Any] = {
        "dataset_size": configuration.dataset_size,
        "world_size": configuration.world_size,
        "batch_size": configuration.batch_size,
        "rank": violation.rank,
        "epoch": violation.epoch,
    }
    if configuration.seed != 0:
        found["seed"] = configuration.seed
    found.update(violation.details)
    found["what"] = violation.what
    return found


class TimedOut(Exception):
    """A configuration ran past the search's ``time_limit``; ``configuration`` is it."""

    def __init__(self, guarantee: str, configuration: Configuration, seconds: float) -> None:
        super().__init__(f"{guarantee}: {_shown(configuration)} took longer than {seconds:g} s")
        self.guarantee = guarantee
        self.configuration = configuration


def _violation(
    guarantee: str, factory: Factory, configuration: Configuration, seconds: float | None
) -> Violation | None:
    """The violation the check raises, ``None`` when it holds. Any other error of the
    sampler (building or iterating it) means it does not take this configuration:
    :class:`Rejected` (a violation of ``handles-every-size``). Running past ``seconds``
    raises :class:`TimedOut`."""
    try:
        with within(seconds), bounded(configuration):
            CHECKS[guarantee](factory, configuration)
    except (Violation, Unsupported, Rejected):
        raise
    except Expired:
        assert seconds is not None
        raise TimedOut(guarantee, configuration, seconds) from None
    except Exception as error:
        raise _judged(guarantee, factory, configuration, seconds, error) from error
    return None


def _judged(
    guarantee: str,
    factory: Factory,
    configuration: Configuration,
    seconds: float | None,
    error: Exception,
) -> Violation | Rejected:
    """What an error the sampler raised during a check means. When the sampler also fails
    to build and iterate the configuration plainly (``handles-every-size``), it does not
    take the configuration: :class:`Rejected`. When it takes it, the error came from what
    the guarantee exercises (``state_dict`` at the last step, a resume, a second
    iteration): a :class:`Violation`, naming the error."""
    if guarantee == "handles-every-size":
        return Rejected(error)
    try:
        with within(seconds), bounded(configuration):
            CHECKS["handles-every-size"](factory, configuration)
    except Expired:
        assert seconds is not None
        raise TimedOut(guarantee, configuration, seconds) from None
    except Exception:
        return Rejected(error)
    taken = "builds and iterates this configuration"
    return raised_in_check(guarantee, configuration.epoch, error, taken)


def check_guarantee(
    factory: Factory,
    guarantee: str,
    *,
    thorough: bool = False,
    time_limit: float | None = None,
    fresh: Mapping[str, Any] | None = None,
    first: Sequence[Configuration] = (),
    examples: int | None = None,
) -> Result:
    """Search configurations for a violation of ``guarantee`` (an id of ``GUARANTEES``)
    and return the smallest one hypothesis shrinks to, or that it held (or does not apply).

    ``time_limit``: seconds a configuration may take (``None``: no limit); past it the
    search stops with :class:`TimedOut`. ``fresh``: what fresh processes yielded, by
    factory reference (:func:`~samplers.testing.factories.fresh_outputs`), for the
    ``deterministic`` guarantee; a factory missing from it gets a fresh process of its own.
    ``first``: configurations tried before hypothesis generates any (known counterexamples,
    say, from :attr:`Result.configuration`), in order; the first that violates the
    guarantee is made smaller as a found one is, and hypothesis does not run. ``examples``:
    at most this many configurations hypothesis generates (default: :data:`EXAMPLES` of
    ``thorough``, or the guarantee's own smaller count). The sampler's own warnings are
    silenced while the search runs: they are not judged.
    """
    if guarantee not in CHECKS:
        raise ValueError(f"guarantee must be one of {list(CHECKS)}, got {guarantee!r}")
    if examples is not None and examples < 1:
        raise ValueError(f"examples must be at least 1, got {examples}")
    from hypothesis import HealthCheck, Phase, Verbosity, find, settings
    from hypothesis.errors import Flaky, NoSuchExample

    seen = _Tally()

    def violates(configuration: Configuration) -> bool:
        seen.tried += 1
        try:
            # A sampler's warnings (uneven batch counts, say) are not what the kit
            # judges, and a search provokes them by the hundred: they stay silent.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                violated = _violation(guarantee, factory, configuration, time_limit) is not None
        except Violation:
            violated = True
        except Unsupported as reason:
            seen.unsupported = str(reason)
            return False
        except Rejected as reason:
            seen.rejected += 1
            if seen.smallest is None or _size(configuration) < _size(seen.smallest):
                seen.smallest, seen.rejection = configuration, str(reason)
            return False
        if violated and (seen.violating is None or _size(configuration) < _size(seen.violating)):
            seen.violating = configuration
        return violated

    found = next((known for known in first if violates(known)), None)
    if found is not None:
        found = _minimised(found, violates)
    else:
        own = REGISTRY[guarantee].max_examples or EXAMPLES[thorough]
        options = settings(
            max_examples=examples if examples is not None else min(EXAMPLES[thorough], own),
            derandomize=not thorough,
            database=None,
            deadline=None,
            verbosity=Verbosity.quiet,
            phases=(Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
        )
        try:
            found = _minimised(find(_strategy(), violates, settings=options), violates)
        except NoSuchExample:
            found = None
        except Flaky:
            # A violation that did not repeat when hypothesis ran it again (a race, say): a
            # violation all the same, reported with the smallest configuration that showed it.
            found = seen.violating
    if found is None:
        return _held(factory, guarantee, seen, fresh, time_limit)
    try:
        with warnings.catch_warnings():  # run again, as quietly as the search ran it
            warnings.simplefilter("ignore")
            violation = _violation(guarantee, factory, found, time_limit)
    except Violation as raised:
        violation = raised
    except (Unsupported, Rejected):
        violation = None
    if violation is None:  # a flaky sampler: the shrunk example passed when run again
        return Result(
            guarantee,
            False,
            asdict(found),
            "violated, but not reproducibly",
            configuration=asdict(found),
        )
    return Result(
        guarantee,
        False,
        _counterexample(found, violation),
        str(violation),
        violation.experience,
        seen.tried,
        asdict(found),
    )


@dataclass
class _Tally:
    """What a search met: configurations tried, skipped (and the smallest), unsupported."""

    tried: int = 0
    rejected: int = 0
    unsupported: str = ""
    smallest: Configuration | None = None
    rejection: str = ""
    #: The smallest configuration that violated the guarantee, when one did.
    violating: Configuration | None = None


def _held(
    factory: Factory,
    guarantee: str,
    seen: _Tally,
    fresh: Mapping[str, Any] | None,
    seconds: float | None,
) -> Result:
    if seen.unsupported:
        return Result(
            guarantee, None, None, f"not supported: {seen.unsupported}", examples=seen.tried
        )
    if seen.rejected == seen.tried:
        return Result(
            guarantee,
            None,
            None,
            f"not supported: the sampler raised for every configuration ({seen.rejection})",
            examples=seen.tried,
        )
    if guarantee == "deterministic":
        return _fresh_process(factory, seen.tried, fresh, seconds)
    skipped = ""
    if seen.smallest is not None:
        skipped = (
            f"; skipped {seen.rejected} the sampler raised for (e.g. {_shown(seen.smallest)}: "
            f"{seen.rejection})"
        )
    return Result(
        guarantee,
        True,
        None,
        f"held on {seen.tried - seen.rejected} configurations searched{skipped}",
        examples=seen.tried,
    )


def _fresh_process(
    factory: Factory, examples: int, fresh: Mapping[str, Any] | None, seconds: float | None
) -> Result:
    name = reference(factory)
    searched = f"held on {examples} configurations searched in this process"
    if name is None:
        return Result(
            "deterministic",
            True,
            None,
            f"{searched}; not compared with a fresh process (the factory is not importable "
            "by name)",
            examples=examples,
        )
    # A fresh interpreter starts in seconds; then each configuration runs twice (there
    # and here), each within the search's limit.
    total = None if seconds is None else 60.0 + 2 * seconds * len(FRESH_PROCESS_CONFIGURATIONS)
    try:
        with within(total), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # not judged, as in the search
            deterministic_across_processes(
                name,
                FRESH_PROCESS_CONFIGURATIONS,
                fresh=(fresh or {}).get(name),
                timeout=120.0 if total is None else total,
            )
    except Expired:
        assert total is not None
        raise TimedOut("deterministic", FRESH_PROCESS_CONFIGURATIONS[-1], total) from None
    except Violation as violation:
        configuration = Configuration(**violation.details.pop("configuration"))
        return Result(
            "deterministic",
            False,
            _counterexample(configuration, violation),
            str(violation),
            violation.experience,
            examples,
            asdict(configuration),
        )
    except (RuntimeError, subprocess.TimeoutExpired, Rejected) as error:
        return Result(
            "deterministic", True, None, f"{searched}; not compared with a fresh process: {error}"
        )
    return Result(
        "deterministic",
        True,
        None,
        f"{searched} and in a fresh process ({len(FRESH_PROCESS_CONFIGURATIONS)} configurations)",
        examples=examples,
    )


def check_all(
    factory: Factory,
    *,
    thorough: bool = False,
    time_limit: float | None = None,
    fresh: Mapping[str, Any] | None = None,
) -> list[Result]:
    """:func:`check_guarantee` for every guarantee, in ``GUARANTEES`` order (after
    :func:`~samplers.testing.factories.validated`)."""
    validated(factory, seconds=time_limit)
    return [
        check_guarantee(factory, guarantee, thorough=thorough, time_limit=time_limit, fresh=fresh)
        for guarantee in GUARANTEES
    ]


def check(
    factory: Factory,
    *,
    thorough: bool = False,
    time_limit: float | None = None,
    fresh: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Each guarantee, searched with hypothesis: one row per guarantee with the columns
    ``guarantee``, ``holds`` (True, False, or None when it does not apply),
    ``counterexample`` (the shrunk configuration and what went wrong, or None), ``detail``
    and ``experience`` (what a user of the sampler sees when it is violated)."""
    import pandas as pd

    rows = [
        {
            "guarantee": result.guarantee,
            "holds": result.holds,
            "counterexample": result.counterexample,
            "detail": result.detail,
            "experience": result.experience,
        }
        for result in check_all(factory, thorough=thorough, time_limit=time_limit, fresh=fresh)
    ]
    return pd.DataFrame(
        rows, columns=["guarantee", "holds", "counterexample", "detail", "experience"]
    )
