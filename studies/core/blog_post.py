"""The blog post's printed output, read from its transcription into tidy rows.

The post (cited in ``studies/data/blog_post_output.json``, field ``source``) ran each case
of :data:`studies.core.cases.EXPERIMENT` under ``torch.distributed.launch`` on 2 GPUs and printed
every batch as ``tensor([...], device='cuda:R')``. The transcription keeps those lines
verbatim and in printed order, one list per run.

Guarantee: :func:`printed_rows` reads nothing but the transcription. A line's device
``cuda:R`` is rank ``R`` (the script sets the device to the local rank on one node); each
rank's lines, in printed order, are its batches of epoch 0 followed by those of epoch 1,
in equal numbers (a DataLoader yields the same number of batches every epoch). Anything
else (an unparsable line, an odd count) raises ``ValueError`` naming the run and line.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["COLUMNS", "TRANSCRIPTION", "load", "padding_claim", "printed_rows", "source"]

#: The transcription of the post's printed output, with its citation.
TRANSCRIPTION = Path(__file__).resolve().parents[1] / "data" / "blog_post_output.json"

#: The columns of :func:`printed_rows`: one row per printed batch.
COLUMNS = ("case", "epoch", "rank", "batch", "indices")

_LINE = re.compile(r"^tensor\(\[(?P<indices>[0-9, ]*)\], device='cuda:(?P<rank>[0-9]+)'\)$")


@cache
def load() -> dict[str, Any]:
    """The transcription as stored: ``source``, ``script`` settings and ``runs``."""
    data: dict[str, Any] = json.loads(TRANSCRIPTION.read_text(encoding="utf-8"))
    return data


def source() -> str:
    """The citation: the post's title, its address, who wrote it (when known) and what the
    transcription was made from."""
    cited = load()["source"]
    author = cited.get("author") or "author not named in the copy transcribed"
    return (
        f'Blog post "{cited["title"]}" ({cited["title_in_english"]}), {author}, '
        f"<{cited['address']}> ({cited['address_note']}); {cited['transcription']}, "
        f"transcribed from {cited['transcribed_from']}."
    )


def padding_claim() -> pd.DataFrame:
    """The padded copies the post names: one row per (case, epoch) with the ``index`` named."""
    named = load()["padding_claim"]["named"]
    return pd.DataFrame(named, columns=["case", "epoch", "index"])


def printed_rows() -> pd.DataFrame:
    """Every batch the post printed: case label, epoch, rank, batch number, indices."""
    data = load()
    epochs = int(data["script"]["epochs"])
    world_size = int(data["script"]["world_size"])
    rows = []
    for run in data["runs"]:
        label = str(run["case"])
        per_rank: dict[int, list[list[int]]] = {rank: [] for rank in range(world_size)}
        for number, line in enumerate(run["printed"]):
            match = _LINE.match(line)
            if match is None or int(match["rank"]) not in per_rank:
                raise ValueError(f"run {label!r}, printed line {number}: cannot read {line!r}")
            indices = [int(index) for index in match["indices"].split(",") if index.strip()]
            per_rank[int(match["rank"])].append(indices)
        for rank, batches in per_rank.items():
            if len(batches) % epochs:
                raise ValueError(
                    f"run {label!r}: rank {rank} printed {len(batches)} batches, "
                    f"not a multiple of the {epochs} epochs"
                )
            per_epoch = len(batches) // epochs
            for position, indices in enumerate(batches):
                epoch, batch = divmod(position, per_epoch)
                rows.append(
                    {
                        "case": label,
                        "epoch": epoch,
                        "rank": rank,
                        "batch": batch,
                        "indices": indices,
                    }
                )
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    order = {str(run["case"]): number for number, run in enumerate(data["runs"])}
    frame = frame.assign(_order=frame["case"].map(order))
    frame = frame.sort_values(["_order", "epoch", "rank", "batch"], kind="stable")
    return frame.drop(columns="_order").reset_index(drop=True)
