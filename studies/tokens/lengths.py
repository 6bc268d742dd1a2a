"""Sequence lengths for the token-batching study: a real distribution and a synthetic one.

**Real**: the token counts of the source files that ship with the installed torch wheel
(``.py``, ``.pyi``, ``.h``, ``.hpp`` and ``.cuh`` files under the ``torch`` package), a
distribution nobody here wrote: source code as documents, as a code-model corpus has them.
A token is a run of word characters or one other non-space character (the regular
expression :data:`TOKEN`), which counts code roughly as a subword tokeniser does; files
are taken in order of their path relative to the package.

Counting them takes half a minute, so the counts are recorded once in
:data:`RECORDED` by ``python -m studies.tokens.lengths`` with the package and its
version, the pattern, and a digest of the file list; ``tests/test_token_batches.py``
checks the record against the installed package (the file list, and the counts of a
sample of the files).

**Synthetic**: lognormal lengths from a seeded generator.

Both are truncated to a context of :data:`CONTEXT` tokens, as a training pipeline
truncates its documents; the real ones also lose their empty files. :func:`datasets` is
the pair the token findings measure on (:data:`SYNTHETIC_SIZE` synthetic lengths drawn
with :data:`SEED`), under a budget of :data:`MAX_TOKENS` tokens per batch.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CONTEXT",
    "MAX_TOKENS",
    "PACKAGE",
    "RECORDED",
    "SEED",
    "SUFFIXES",
    "SYNTHETIC_SIZE",
    "TOKEN",
    "count_tokens",
    "datasets",
    "load",
    "real_lengths",
    "record",
    "source_files",
    "synthetic_chunks",
    "synthetic_lengths",
]

PACKAGE = "torch"
SUFFIXES = (".py", ".pyi", ".h", ".hpp", ".cuh")
TOKEN = re.compile(rb"\w+|[^\w\s]")
#: Documents are truncated to this many tokens.
CONTEXT = 4096
RECORDED = Path(__file__).resolve().parents[1] / "data" / "torch-source-token-lengths.json"
#: Synthetic lengths are drawn this many at a time.
DRAW_CHUNK = 1 << 20
#: The token findings' budget: tokens per batch.
MAX_TOKENS = 16384
#: The token findings' seed (of their synthetic lengths and of the samplers' shuffling).
SEED = 0
#: The synthetic lengths the token findings draw.
SYNTHETIC_SIZE = 12_000


def package_root() -> Path:
    """Where the installed package's files are."""
    return Path(torch.__file__).resolve().parent


def source_files(root: Path | None = None) -> list[str]:
    """The package's source files, as paths relative to it, in sorted order."""
    root = package_root() if root is None else root
    found = (
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.suffix in SUFFIXES and path.is_file()
    )
    return sorted(found)


def count_tokens(path: Path) -> int:
    """How many tokens (:data:`TOKEN`) the file holds."""
    return len(TOKEN.findall(path.read_bytes()))


def digest(files: list[str]) -> str:
    """A digest of the file list (one path per line)."""
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


def record(path: Path = RECORDED) -> dict[str, Any]:
    """Count every source file's tokens and write the record to ``path``."""
    root = package_root()
    files = source_files(root)
    data = {
        "package": PACKAGE,
        "version": importlib.metadata.version(PACKAGE),
        "suffixes": list(SUFFIXES),
        "token": TOKEN.pattern.decode(),
        "files": len(files),
        "files sha256": digest(files),
        "lengths": [count_tokens(root / name) for name in files],
    }
    path.write_text(json.dumps(data) + "\n")
    return data


def load(path: Path = RECORDED) -> dict[str, Any]:
    """The recorded counts (see :func:`record`)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def real_lengths(context: int = CONTEXT) -> torch.Tensor:
    """The recorded source files' token counts: empty files left out, truncated to ``context``."""
    lengths = torch.tensor(load()["lengths"], dtype=torch.int64)
    return lengths[lengths > 0].clamp(max=context)


def synthetic_chunks(
    size: int, *, mu: float = 6.0, sigma: float = 0.9, seed: int = 0, context: int = CONTEXT
) -> Iterator[torch.Tensor]:
    """:func:`synthetic_lengths` drawn :data:`DRAW_CHUNK` at a time (int64 tensors)."""
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, size, DRAW_CHUNK):
        count = min(DRAW_CHUNK, size - start)
        normal = torch.randn(count, generator=generator, dtype=torch.float64)
        yield torch.exp(normal * sigma + mu).round().to(torch.int64).clamp(1, context)


def synthetic_lengths(
    size: int, *, mu: float = 6.0, sigma: float = 0.9, seed: int = 0, context: int = CONTEXT
) -> torch.Tensor:
    """``size`` lognormal lengths (``exp(N(mu, sigma))``, at least 1), truncated to ``context``.

    They are drawn :data:`DRAW_CHUNK` at a time from one generator (the same numbers as
    one draw of all of them), so the float64 intermediates stay small.
    """
    lengths = torch.empty(size, dtype=torch.int64)
    start = 0
    for chunk in synthetic_chunks(size, mu=mu, sigma=sigma, seed=seed, context=context):
        lengths[start : start + chunk.numel()] = chunk
        start += chunk.numel()
    return lengths


def datasets() -> dict[str, torch.Tensor]:
    """The two length distributions the token findings measure on, truncated to the context."""
    return {
        "lognormal": synthetic_lengths(SYNTHETIC_SIZE, seed=SEED),
        "torch source files": real_lengths(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=RECORDED, help="where to write the record")
    arguments = parser.parse_args(argv)
    data = record(arguments.out)
    print(f"{data['files']} files of {data['package']} {data['version']} -> {arguments.out}")


if __name__ == "__main__":
    main()
