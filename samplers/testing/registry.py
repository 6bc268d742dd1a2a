"""The guarantees, each registered once: its id, what it states, and its check function."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from samplers.testing.running import Configuration, Factory, Failure

__all__ = ["CHECKS", "GUARANTEES", "MIXTURES", "REGISTRY", "Guarantee", "guarantee"]

Check = Callable[[Factory, Configuration], None]


@dataclass(frozen=True)
class Guarantee:
    """One guarantee: ``check(factory, configuration)`` raises ``Violation`` when it fails."""

    id: str
    statement: str
    check: Check
    #: At most this many configurations per search (``None``: the search's own count),
    #: for a check that costs seconds (it starts worker processes).
    max_examples: int | None = None


#: Every guarantee, by id, in the order the kit reports them.
REGISTRY: dict[str, Guarantee] = {}
#: Each guarantee's statement, by id.
GUARANTEES: dict[str, str] = {}
#: Each guarantee's check function, by id.
CHECKS: dict[str, Check] = {}
#: The guarantees of samplers that mix several datasets by weight, by id: they take a
#: :class:`samplers.testing.mixtures.Mixture` instead of a ``Configuration``, and
#: :func:`samplers.testing.mixture_search.check_mixture` searches them.
MIXTURES: dict[str, Guarantee] = {}


def guarantee(id: str, statement: str, max_examples: int | None = None) -> Callable[[Check], Check]:
    """Register the decorated check function as the guarantee ``id``.

    The function raises :class:`~samplers.testing.running.Failure`; the registered (and
    returned) function raises it as a ``Violation`` of ``id``.
    """

    def register(check: Check) -> Check:
        if id in REGISTRY:
            raise ValueError(f"guarantee {id!r} is registered twice")

        @functools.wraps(check)
        def checked(factory: Factory, configuration: Configuration) -> None:
            try:
                check(factory, configuration)
            except Failure as failure:
                raise failure.violation(id) from None

        REGISTRY[id] = Guarantee(id, statement, checked, max_examples)
        GUARANTEES[id] = statement
        CHECKS[id] = checked
        return checked

    return register
