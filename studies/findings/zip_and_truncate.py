"""Finding: zip-and-truncate collections against the layouts they are used with."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version

import pandas as pd

from studies.engines.collection import (
    BATCH_SIZE,
    COLLECTIONS,
    LOST,
    REPEATED,
    SAMPLERS,
    WRONG,
    measure,
)
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined

NAME = "zip-and-truncate"
TITLE = "Zipping the ranks' parts and truncating: which collection suits which layout"
GUARDED_BY = "tests/test_beyond_torch_findings.py::test_zip_and_truncate_loses_samples"
#: Seconds build() takes on an idle 2-core machine: the report starts long ones first.
SECONDS = 40
SLOW = True

STOCK = "stock, padding"
UNEVEN = 'ours, tail="uneven"'
BATCHED = tuple(name for name in SAMPLERS if name.startswith("DistributedBatchSampler"))

#: The collections in words, for the tables and the prose.
COLLECTION_WORDS = {
    "zip": "zip and truncate (the source document's collect_results)",
    "mmengine": "mmengine collect_results (zip_longest)",
    "gather_unsharded": "samplers.gather_unsharded",
}


def mmengine_version() -> str:
    """The installed mmengine's version (the peers extra), whose collect_results is run."""
    return version("mmengine")


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per sampler and collection: how often and by how much the collection was wrong."""
    rows = []
    for (name, collection), own in frame.groupby(["sampler", "collection"], sort=False):
        rows.append(
            {
                "sampler": name,
                "collection": COLLECTION_WORDS[collection],
                "configurations": len(own),
                "part lengths differ": int(own["part lengths differ"].sum()),
                "wrong": int((own[WRONG] > 0).sum()),
                f"max {LOST}": int(own[LOST].max()),
                f"max {REPEATED}": int(own[REPEATED].max()),
                f"max {WRONG}": int(own[WRONG].max()),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Facts:
    """Configurations per sampler, and in how many each collection went wrong."""

    configurations: int
    #: (sampler, collection) -> configurations in which the collected list was wrong.
    wrong: dict[tuple[str, str], int]
    uneven_differ: int
    #: Configurations of ours uneven in which zip lost exactly N mod W samples.
    remainder_lost: int
    uneven_zip_lost: int


def facts(frame: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table of collections."""
    wrong = {
        (str(name), str(collection)): int((own[WRONG] > 0).sum())
        for (name, collection), own in frame.groupby(["sampler", "collection"], sort=False)
    }
    uneven = frame[(frame["sampler"] == UNEVEN) & (frame["collection"] == "zip")]
    remainder = uneven["dataset size"] % uneven["world size"]
    return Facts(
        configurations=len(uneven),
        wrong=wrong,
        uneven_differ=int(uneven["part lengths differ"].sum()),
        remainder_lost=int((uneven[LOST] == remainder).sum()),
        uneven_zip_lost=int((uneven[LOST] > 0).sum()),
    )


def claim(found: Facts, mmengine: str) -> str:
    """The claim, from the facts and the mmengine version measured."""
    total = found.configurations

    def wrong(name: str, collection: str) -> str:
        return count_of(found.wrong[name, collection], total, "configurations")

    def per_layout(collection: str) -> str:
        return joined(found.wrong[name, collection] for name in BATCHED)

    exact = sum(value == 0 for (_, c), value in found.wrong.items() if c == "gather_unsharded")
    ours = (
        f"samplers.gather_unsharded was exact in every configuration for "
        f"{count_of(exact, len(SAMPLERS), 'samplers')}."
    )
    return (
        "Zipping the ranks' parts in rank order and truncating to the dataset size (the "
        "collect_results of the source document, mmengine's dist module as published there) "
        f"was wrong in {wrong(STOCK, 'zip')} with the stock sampler's padding, whose parts "
        'all have one length; with ours, tail="uneven" (parts of unequal length in '
        f"{found.uneven_differ}) it was wrong in {wrong(UNEVEN, 'zip')}: zip stops at the "
        "shortest part and the last samples are lost without an error. mmengine "
        f"{mmengine}'s collect_results, run in real processes, zips with zip_longest and "
        f'drops the padding None: with tail="uneven" it was wrong in {wrong(UNEVEN, "mmengine")}. '
        f"With the batch-aware layouts ({joined(BATCHED)}), whose ranks take contiguous "
        f"blocks, zip went wrong in {per_layout('zip')} of the {total} and mmengine in "
        f"{per_layout('mmengine')}. " + ours
    )


def describe(frame: pd.DataFrame, found: Facts, mmengine: str) -> str:
    """The prose, from the table and its facts."""
    uneven = frame[(frame["sampler"] == UNEVEN) & (frame["collection"] == "zip")]
    batched = frame[frame["sampler"].isin(BATCHED) & (frame["collection"] != "gather_unsharded")]
    worlds = sorted(set(frame["world size"]))
    sizes = sorted(set(frame["dataset size"]))
    total = found.configurations
    return (
        f"Over {total} (dataset size, world size) pairs per sampler ({len(sizes)} dataset "
        f"sizes from {sizes[0]} to {sizes[-1]}, world sizes {joined(worlds)}), each rank's "
        "result for a sample being the sample's index, so slot i must hold i. With "
        'tail="uneven" the source document\'s zip lost samples in '
        f"{found.uneven_zip_lost} pairs, up to {int(uneven[LOST].max())} at once; the number "
        f"lost equalled dataset size mod world size in {found.remainder_lost} of {total}: "
        "the samples past the last complete round of ranks, which zip never reaches. "
        f"mmengine {mmengine} pads the shorter parts with None (zip_longest) and drops the "
        "Nones, so strided parts of unequal length interleave to the end: it was wrong in "
        f"{found.wrong[UNEVEN, 'mmengine']} of those pairs. It still assumes the strided "
        "layout: with the batch sampler's contiguous blocks, either zip put up to "
        f"{int(batched[WRONG].max())} results in another sample's slot, with up to "
        f'{int(batched[REPEATED].max())} extra copies (tail "pad"). '
        "Our batch sampler warns when it gives ranks unequal batch counts, which some of "
        "these configurations do on purpose; the measurement silences that one warning."
    )


def build() -> Evidence:
    frame = measure()
    found = facts(frame)
    mmengine = mmengine_version()
    shown = frame.assign(collection=frame["collection"].map(COLLECTION_WORDS))
    return Evidence(
        claim=claim(found, mmengine),
        prose=describe(frame, found, mmengine),
        facts=found,
        tables=(
            Table(
                "Collections against every sample once, in dataset order",
                shown,
                name="collections",
                summary=summary(frame),
                note=(
                    "Shuffle off; each sample's result is its index, so slot i must hold i. "
                    "Zip and truncate: the ranks' parts zipped in rank order, flattened and "
                    "truncated to the dataset size (the source document's collect_results). "
                    f"mmengine {mmengine}: `mmengine.dist.collect_results(part, N)` (device "
                    '"cpu", its default) called on every rank of a gloo group. Batch '
                    f"samplers (batch size {BATCH_SIZE}): their batches joined in the order "
                    "they are yielded. gather_unsharded reads the stock sampler's layout "
                    'from ours with the same arguments (tail "pad"), which yields the same '
                    f"indices. Collections in table order: {joined(COLLECTIONS)}."
                ),
            ),
        ),
    )
