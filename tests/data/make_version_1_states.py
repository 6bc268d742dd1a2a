"""Writes ``version_1_states.json``: genuine version-1 states, made by the code that wrote
them (the tree before state version 2, ``git archive f3aad14^``).

Run from a checkout of that tree::

    git archive f3aad14^ | tar -x -C /tmp/v1
    cd /tmp/v1 && PYTHONPATH=. python /path/to/tests/data/make_version_1_states.py OUT.json

Each case runs ``world_size`` samplers in lockstep for ``steps`` steps of epoch ``epoch``
(``steps=None``: the whole epoch, the loop over it ended) and records rank 0's state and
every index (or batch) the ranks were handed before it.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any


def build(kind: str, n: int, world: int, rank: int, tail: str, shuffle: bool, auto: bool) -> Any:
    import torch.utils.data

    import samplers

    data = list(range(n))
    if kind == "DistributedSampler":
        return samplers.DistributedSampler(
            data, world, rank, shuffle=shuffle, seed=7, tail=tail, auto_epoch=auto
        )
    if kind == "DistributedBatchSampler":
        return samplers.DistributedBatchSampler(
            data, 3, world, rank, shuffle=shuffle, seed=7, tail=tail, auto_epoch=auto
        )
    return samplers.DistributedSamplerWrapper(
        torch.utils.data.SequentialSampler(data), world, rank, seed=7, tail=tail, auto_epoch=auto
    )


def main(out: str) -> None:
    cases = []
    epoch = 2
    for kind, (n, world), tail, shuffle, auto, steps in itertools.product(
        ("DistributedSampler", "DistributedBatchSampler", "DistributedSamplerWrapper"),
        ((11, 3), (23, 4)),
        ("pad", "drop", "uneven"),
        (True, False),
        (False, True),
        (0, 1, 2, None),
    ):
        if kind == "DistributedSamplerWrapper" and not shuffle:
            continue
        ranks = [build(kind, n, world, r, tail, shuffle, auto) for r in range(world)]
        for sampler in ranks:
            if auto and shuffle:
                for _ in range(epoch):  # auto_epoch: whole epochs advance it
                    list(sampler)
            else:
                sampler.set_epoch(epoch)
        iterators = [iter(s) for s in ranks]
        handed: list[list[Any]] = [[] for _ in ranks]
        for _ in itertools.count() if steps is None else range(steps):
            items = [next(it, None) for it in iterators]
            if all(item is None for item in items):
                break
            for got, item in zip(handed, items, strict=True):
                if item is not None:
                    got.append(item)
        cases.append(
            {
                "sampler": kind,
                "dataset_length": n,
                "world_size": world,
                "tail": tail,
                "shuffle": shuffle,
                "auto_epoch": auto,
                "epoch": ranks[0].epoch,
                "at_end": steps is None,
                "handed": handed,
                "state": ranks[0].state_dict(),
            }
        )
    with open(out, "w") as file:
        json.dump({"cases": cases}, file, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1])
