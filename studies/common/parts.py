"""Run the report's parts side by side in worker processes, and say how long each took.

Guarantee: :func:`run_parts` returns every part's result in the order the parts were
given, whatever order they finish in, so what the report writes does not depend on
the number of workers; each part runs in a fresh ``spawn`` process (nothing inherited
but its arguments) when more than one worker is asked for, else in this process. A part
that raises stops the run: the exception is raised here, the other parts are cancelled.
A spawned worker would start its own processes (DataLoader workers, ranks) with spawn
too, re-importing everything each time; each worker is reset to this process's start
method, so a part starts its processes as it would here.

Progress goes to stderr as each part finishes: a bar on a terminal, otherwise one line
per part with the seconds it took (``dsampler report: 3/24 padding, 1.2 s``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

__all__ = ["Part", "default_workers", "run_parts", "spawned_pool"]


@dataclass(frozen=True)
class Part:
    """One part of the report: ``function(*arguments)``, named ``label`` in progress.

    ``function`` must be a module-level function (a worker process imports it by name)
    and its arguments and result picklable.
    """

    label: str
    function: Callable[..., Any]
    arguments: tuple[Any, ...] = ()


def default_workers() -> int:
    """One worker per core, at most four (the parts hold a few hundred MB each)."""
    return max(1, min(os.cpu_count() or 1, 4))


def _start_with(method: str) -> None:
    """Worker initializer: the worker's own processes start as the parent's would."""
    multiprocessing.set_start_method(method, force=True)


def spawned_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` fresh ``spawn`` processes whose own processes (DataLoader
    workers, ranks) start as this process's would. Without the reset a spawned worker's
    children are spawned too, each re-importing torch: the guarantee matrix's loader
    checks took four times as long that way."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_with,
        initargs=(multiprocessing.get_start_method(),),
    )


def _timed(function: Callable[..., Any], arguments: tuple[Any, ...]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = function(*arguments)
    return result, time.perf_counter() - start


def run_parts(
    parts: Sequence[Part], *, workers: int = 1, progress: bool = False
) -> list[tuple[Any, float]]:
    """Each part's (result, seconds it took), in the order of ``parts``."""
    reporter = _Reporter(len(parts), progress)
    if workers <= 1:
        results = []
        for part in parts:
            result = _timed(part.function, part.arguments)
            reporter.done(part.label, result[1])
            results.append(result)
        reporter.close()
        return results
    with spawned_pool(workers) as pool:
        futures: dict[Future[tuple[Any, float]], int] = {
            pool.submit(_timed, part.function, part.arguments): position
            for position, part in enumerate(parts)
        }
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    result = future.result()  # raises the part's exception
                    reporter.done(parts[futures[future]].label, result[1])
        except BaseException:
            for future in pending:
                future.cancel()
            _stop_workers(pool)
            raise
        finally:
            reporter.close()
        return [future.result() for future in sorted(futures, key=futures.__getitem__)]


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's worker processes (and so the parts they run): on an error or an
    interruption the run is over, and waiting for the parts still running could take
    minutes. Their own children (ranks, DataLoader workers) are bounded by their own
    time limits or see their parent die."""
    processes = getattr(pool, "_processes", None) or {}
    for process in list(processes.values()):
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=True, cancel_futures=True)


class _Reporter:
    """Progress on stderr: a tqdm bar on a terminal, otherwise a line per part."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.count = total, enabled, 0
        self.bar: Any = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="reports", unit="part")

    def done(self, label: str, seconds: float) -> None:
        self.count += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(label)
            self.bar.update()
            return
        print(
            f"dsampler report: {self.count}/{self.total} {label}, {seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
