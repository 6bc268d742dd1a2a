"""``dsampler observe`` in which rank 1 fails; started by torchrun in tests/test_observe.py.

Rank 1's dataset raises on its first sample, as a rank with a broken data path does; the
other ranks wait for it in the gather. Arguments are ``observe``'s options.
"""

from __future__ import annotations

import os
import sys

from studies.cli import main
from studies.core.simulate import IndexDataset


def _broken(self: IndexDataset, index: int) -> int:
    raise OSError(f"rank 1 cannot read sample {index}")


if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        IndexDataset.__getitem__ = _broken  # type: ignore[method-assign]
    raise SystemExit(main(["observe", *sys.argv[1:]]))
