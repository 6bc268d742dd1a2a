"""SIGTERM handled as Ctrl-C, so that one cleanup path serves both.

Guarantee: inside :func:`terminated_as_interrupt`, SIGTERM raises :class:`Terminated`, a
``KeyboardInterrupt``, in the main thread; ``finally`` blocks and ``except
BaseException`` handlers (which stop child processes and remove temporary files) run as
they do for Ctrl-C. :func:`exit_status` gives the conventional status: 130 for Ctrl-C, 143
for SIGTERM. The previous handler is restored on leaving.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Terminated", "exit_status", "terminated_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is."""


@contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated`."""

    def handler(number: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM (128 plus the signal's number)."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
