"""Factories by name (``MODULE:FACTORY``), their validation, and the ``deterministic``
guarantee, which also compares with a fresh Python process."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from samplers.testing.epochs import deterministic_in_process, same_outputs
from samplers.testing.registry import guarantee
from samplers.testing.running import (
    ARGUMENTS,
    Configuration,
    Expired,
    Factory,
    Failure,
    Rejected,
    Unbounded,
    bounded,
    build,
    epoch_outputs,
    iterate,
    time_limit,
)

__all__ = [
    "FRESH_PROCESS_CONFIGURATIONS",
    "PROBE",
    "deterministic",
    "deterministic_across_processes",
    "load_factory",
    "reference",
    "validated",
]

#: Configurations the ``deterministic`` guarantee also compares with a fresh process.
FRESH_PROCESS_CONFIGURATIONS = (
    Configuration(dataset_size=10, world_size=3, batch_size=2),
    Configuration(dataset_size=257, world_size=4, batch_size=8, epoch=1),
)
#: The configuration :func:`validated` builds the factory's sampler with.
PROBE = Configuration(dataset_size=10, world_size=2, batch_size=2)


@guarantee(
    "deterministic",
    "the same arguments give the same output, in this and in a fresh process",
)
def deterministic(factory: Factory, configuration: Configuration) -> None:
    """Two samplers built from the same arguments yield the same, whatever the global
    random state; the search (:func:`samplers.testing.check`) also compares a factory
    importable by name with a fresh process (:func:`deterministic_across_processes`)."""
    deterministic_in_process(factory, configuration)


def reference(factory: Factory) -> str | None:
    """``module:qualname`` when importing it gives back ``factory``, else ``None``."""
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    if not module or not name or module == "__main__" or "<" in name:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{name}" if found is factory else None


def load_factory(text: str) -> Factory:
    """The callable named by ``MODULE:FACTORY`` (a dotted name within the module).

    Raises ``ValueError`` naming ``text`` when it is malformed, not importable or not
    callable.
    """
    module_name, colon, name = text.partition(":")
    if not colon or not module_name or not name:
        raise ValueError(f"expected MODULE:FACTORY, got {text!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(
            f"cannot import module {module_name!r} of {text!r}: {type(error).__name__}: {error}"
        ) from None
    for part in name.split("."):
        if not hasattr(found, part):
            raise ValueError(f"module {module_name!r} has no attribute {name!r} ({text!r})")
        found = getattr(found, part)
    if not callable(found):
        raise ValueError(f"{text!r} is a {type(found).__name__}, not a callable factory")
    factory: Factory = found
    return factory


def _unknown_required(factory: Factory) -> list[str]:
    """Required parameters of ``factory`` the kit cannot pass."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)
        and (p.name not in ARGUMENTS or p.kind is p.POSITIONAL_ONLY)
    ]


class ProbeTimedOut(TypeError):
    """:func:`validated`'s probe configuration ran past its time limit (a ``TypeError``,
    as every refusal of :func:`validated` is; ``dsampler check`` reports it as a
    configuration that ran out of time, exit status 1)."""


def validated(factory: Factory, name: str = "factory", *, seconds: float | None = None) -> Factory:
    """``factory`` when it builds a sampler for :data:`PROBE` (rank 0) that yields
    indices or lists of indices; else ``TypeError`` naming ``name`` and what went wrong
    (for a parameter the kit cannot pass, the names it can).

    Building and iterating the probe take at most ``seconds`` (``None``: no limit; see
    :func:`~samplers.testing.running.time_limit`), and an iteration that yields more than
    the probe's share can hold is stopped: a factory whose iterator never ends or blocks
    is a ``TypeError`` too."""
    try:
        with time_limit(seconds), bounded(PROBE):
            return _validated(factory, name)
    except Expired:
        raise ProbeTimedOut(
            f"{name} took longer than {seconds:g} s to build and iterate a sampler for "
            f"{asdict(PROBE)} (rank 0): it blocks, or its iterator does not end"
        ) from None
    except Unbounded as error:
        raise TypeError(
            f"{name} returned a sampler for {asdict(PROBE)} (rank 0) whose {error}"
        ) from None


def _validated(factory: Factory, name: str) -> Factory:
    if not callable(factory):
        raise TypeError(f"{name} must be callable, got {type(factory).__name__}")
    unknown = _unknown_required(factory)
    if unknown:
        raise TypeError(
            f"{name} requires {', '.join(map(repr, unknown))}, which the kit does not pass "
            f"(it passes, by name, any of: {', '.join(ARGUMENTS)})"
        )
    try:
        sampler = build(factory, PROBE, 0)
    except Rejected as error:
        raise TypeError(f"{name} raised for {asdict(PROBE)}: {error}") from None
    if not hasattr(sampler, "__iter__") or isinstance(sampler, (str, bytes, Mapping)):
        raise TypeError(
            f"{name} returned {type(sampler).__name__}, not a sampler (an iterable of "
            "indices or of lists of indices)"
        )
    try:
        iterate(sampler)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{name} returned a {type(sampler).__name__} that does not yield indices or "
            f"lists of indices: {error}"
        ) from None
    return factory


def outputs_json(texts: Sequence[str], configurations: Sequence[Configuration]) -> str:
    """What each factory named in ``texts`` yields in each configuration, as JSON (an
    object by name)."""
    outputs: dict[str, list[Any]] = {}
    for text in texts:
        factory = load_factory(text)
        outputs[text] = []
        for configuration in configurations:
            with bounded(configuration):
                outputs[text].append(epoch_outputs(factory, configuration))
    return json.dumps(outputs)


def fresh_outputs(
    texts: Sequence[str],
    configurations: Sequence[Configuration] = FRESH_PROCESS_CONFIGURATIONS,
    *,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """What each factory named in ``texts`` yields in each configuration in one fresh
    Python process (another hash seed): one interpreter for all of them, as
    :func:`deterministic_across_processes` takes them (``fresh=``)."""
    script = (
        "from samplers.testing.factories import outputs_json\n"
        "from samplers.testing import Configuration\n"
        f"print(outputs_json({list(texts)!r}, [Configuration(**c) for c in "
        f"{[asdict(c) for c in configurations]!r}]))\n"
    )
    environment = {
        **os.environ,
        # Another string hash than this process's, so hash-dependent orders show.
        "PYTHONHASHSEED": "54321" if os.environ.get("PYTHONHASHSEED") == "12345" else "12345",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    finished = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        check=False,
    )
    if finished.returncode != 0:
        last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh process failed building {', '.join(texts)}: {last}")
    found: dict[str, Any] = json.loads(finished.stdout)
    return found


def deterministic_across_processes(
    text: str,
    configurations: Sequence[Configuration] = FRESH_PROCESS_CONFIGURATIONS,
    *,
    timeout: float = 120.0,
    fresh: Any = None,
) -> None:
    """The factory named ``MODULE:FACTORY`` yields the same in a fresh Python process
    (another hash seed) as in this one, for each configuration; raises ``Violation``.

    ``fresh``: what the fresh process yielded (from :func:`fresh_outputs`), when already
    computed; else it is started now.
    """
    factory = load_factory(text)
    if fresh is None:
        fresh = fresh_outputs([text], configurations, timeout=timeout)[text]
    for configuration, theirs in zip(configurations, fresh, strict=True):
        with bounded(configuration):
            ours = json.loads(json.dumps(epoch_outputs(factory, configuration)))
        try:
            same_outputs(
                ours,
                theirs,
                configuration,
                "a fresh process yields a different order for the same arguments",
                "a job's ranks (separate processes)",
                {"configuration": asdict(configuration)},
            )
        except Failure as failure:
            raise failure.violation("deterministic") from None
