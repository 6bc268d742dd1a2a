"""One measurement, in a fresh interpreter: time to the first index, the epoch, peak RSS.

Guarantee: :func:`measure` runs exactly one :class:`Probe` in a new Python process
(``sys.executable``) that has imported only what the measurement needs, and returns what
that process measured, or a status saying why nothing was measured. It never raises for
a variant that fails: a variant that cannot be built (or fails its warm-up pass) is
``"unavailable: <error>"``, a process that crashes or times out is ``"failed: <reason>"``.

How the child measures (:func:`run`):

1. Imports torch, psutil and the variants, and warms up: builds the variant over
   :data:`WARM_UP_SIZE` samples and iterates it once, so that one-off initialisation
   (torch's thread pool, allocator arenas, lazy imports) is in neither the times nor
   the memory, as it is in no epoch after a job's first. Then runs the garbage
   collector. Its *baseline* is its resident set now (``psutil.Process().memory_info()``).
2. Builds the variant for the last rank (not timed), wrapped in a
   ``torch.utils.data.DataLoader`` for the DataLoader measurements.
3. Times ``iter()`` to the first ``next()`` (*first index* or *first batch*), then, for
   a sampler, the rest of the rank's epoch (*epoch* counts from ``iter()`` too).
4. *Peak RSS above baseline* is the kernel's high-water mark of the resident set,
   ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, read after the epoch, minus the
   baseline, and 0 where that is negative: the kernel keeps both counts approximately
   (per-CPU counters), so two readings of an unchanged resident set can differ by a few
   hundred KB, and differences that small say nothing.

Why ``ru_maxrss`` rather than a thread sampling ``psutil``: the kernel keeps it up to date
before releasing any memory, so it catches peaks however short (the stock sampler's
``tolist()`` holds the GIL for its whole conversion, so a sampling thread could not run
during it), and it costs nothing while the timed code runs, where a sampling thread
competes for the GIL and for the cores. Its catch: it is a high-water mark for the
whole process, and on Linux a process started by ``exec`` inherits the mark of the
process it replaced (the parent, after ``fork``). A child started directly by a large
parent (a test runner, the report) would show the parent's peak. So :func:`measure`
starts the child through a small launcher interpreter (``python -S``, no imports): the
child's inherited mark is the launcher's, far below its own baseline. The child checks
this: if its mark already exceeds its baseline by more than :data:`BASELINE_SLACK` before
the variant is built, it fails instead of reporting a number the mark could hide.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BASELINE_SLACK",
    "WARM_UP_SIZE",
    "Probe",
    "in_fresh_interpreter",
    "measure",
    "run",
    "timed_epoch",
]

#: How far the high-water mark may exceed the baseline RSS before building the variant.
BASELINE_SLACK = 4 * 2**20

#: Samples of the warm-up pass run before the baseline (one-off initialisation).
WARM_UP_SIZE = 1000

#: A process that starts one child, passes its exit status on, and imports nothing.
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


@dataclass(frozen=True)
class Probe:
    """What to measure: one variant, one size, the last rank, one measurement.

    Without ``num_workers`` the sampler itself is iterated for a whole epoch; with it, a
    ``DataLoader(range(N), batch_size, sampler=..., num_workers=...)`` is timed to its
    first batch.
    """

    variant: str
    dataset_size: int
    world_size: int
    seed: int
    num_workers: int | None = None
    batch_size: int = 256

    @property
    def rank(self) -> int:
        """The rank measured: the last one, which receives the padding when there is any."""
        return self.world_size - 1


def measure(probe: Probe, timeout: float) -> dict[str, Any]:
    """Run ``probe`` in a fresh interpreter; its measurements, or a status saying why not.

    The result always has ``"status"``: ``"ok"`` (then also ``first_s``, and for a
    sampler ``epoch_s``, ``peak_bytes`` and ``baseline_bytes``),
    ``"unavailable: <error>"`` or ``"failed: <reason>"``. After ``timeout`` seconds the
    launcher and the child are killed (:func:`in_fresh_interpreter`). The child also
    stops itself once ``timeout`` has passed (an alarm it sets), so it cannot outlive a
    parent that was killed outright.
    """
    arguments = [json.dumps(asdict(probe)), str(math.ceil(timeout) + 5)]
    try:
        done = in_fresh_interpreter(__name__, arguments, timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"failed: timed out after {timeout:g} s"}
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        return {"status": f"failed: {lines[-1]}"}
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"status": f"failed: the measuring process printed {done.stdout[:200]!r}"}
    return result


def in_fresh_interpreter(
    module: str, arguments: list[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``python -m module *arguments`` in a new interpreter, started through
    :data:`_LAUNCHER` (so that it does not inherit this process's memory high-water mark;
    see the module docstring) in a session of its own, with this checkout first on
    ``PYTHONPATH``; its exit status and output. After ``timeout`` seconds, or when anything
    interrupts the wait (Ctrl-C, SIGTERM turned into an exception), the whole session (the
    launcher, the child and its workers) is killed and the exception goes on
    (``subprocess.TimeoutExpired`` at the timeout), so that no child outlives its
    measurement."""
    root = Path(__file__).resolve().parents[2]
    paths = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [sys.executable, "-S", "-c", _LAUNCHER, sys.executable, "-m", module, *arguments]
    with subprocess.Popen(
        command,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def run(probe: Probe) -> dict[str, Any]:
    """Measure ``probe`` in this process (the child's side of :func:`measure`)."""
    import gc
    import resource
    import time

    import psutil
    from torch.utils.data import DataLoader

    from studies.bench.variants import variant

    build = variant(probe.variant).build
    dataset = range(probe.dataset_size)
    try:
        for _ in build(range(WARM_UP_SIZE), probe.world_size, probe.rank, probe.seed):
            pass
        gc.collect()
        baseline = psutil.Process().memory_info().rss
        slack = _high_water_mark(resource) - baseline
        measured = build(dataset, probe.world_size, probe.rank, probe.seed)
    except Exception as error:  # any failure to build is the variant's, reported as such
        return {"status": f"unavailable: {type(error).__name__}: {error}"}
    if slack > BASELINE_SLACK:
        return {
            "status": f"failed: the high-water mark exceeds the baseline RSS by "
            f"{slack / 2**20:.1f} MiB before measuring, so it could hide the peak"
        }
    if probe.num_workers is not None:
        measured = DataLoader(
            dataset,  # type: ignore[arg-type]
            batch_size=probe.batch_size,
            sampler=measured,
            num_workers=probe.num_workers,
        )
    start = time.perf_counter()
    iterator = iter(measured)
    next(iterator, None)
    first_s = time.perf_counter() - start
    if probe.num_workers is not None:
        del iterator  # shuts the workers down
        return {"status": "ok", "first_s": first_s}
    for _ in iterator:
        pass
    epoch_s = time.perf_counter() - start
    return {
        "status": "ok",
        "first_s": first_s,
        "epoch_s": epoch_s,
        "peak_bytes": max(0, _high_water_mark(resource) - baseline),
        "baseline_bytes": baseline,
    }


def timed_epoch(
    build: Callable[[], Iterator[Any]], slack: int | None = None
) -> tuple[float, float, float]:
    """Seconds from calling ``build`` to its first item and to its last, and the MB the
    process's high-water mark then stands above the resident set measured just before
    (after a full garbage collection). With ``slack``, refuses (``RuntimeError``) when the
    high-water mark already passes that resident set by more than ``slack`` bytes: the
    peak would then be the preparation's, not the sampler's."""
    import gc
    import resource
    import time

    import psutil

    gc.collect()  # no collection owed by earlier work on the clock
    baseline = psutil.Process().memory_info().rss
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if slack is not None and before > baseline + slack:
        raise RuntimeError(
            f"preparing the input left a high-water mark {(before - baseline) / 10**6:,.0f} MB "
            "above the baseline: the peak would be the preparation's, not the sampler's"
        )
    start = time.perf_counter()
    iterator = build()
    next(iterator)
    first = time.perf_counter()
    for _ in iterator:
        pass
    end = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return first - start, end - start, max(peak - baseline, 0) / 10**6


def _high_water_mark(resource: Any) -> int:
    """``ru_maxrss`` in bytes (the kernel reports KiB on Linux, bytes on macOS)."""
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def _main(argv: list[str]) -> int:
    probe = Probe(**json.loads(argv[0]))
    if len(argv) > 1:
        signal.alarm(int(argv[1]))  # the default action ends the process at the limit
    print(json.dumps(run(probe)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
