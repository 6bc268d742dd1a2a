"""Finding: resuming mid-epoch, on the same or another world size, repeats or loses what?"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

import pandas as pd
import torch
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedSampler
from samplers.plan import TAILS, ceil_div
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined

NAME = "resume"
TITLE = (
    "Resuming on another world size, mid-epoch and at an epoch's end: what is repeated and "
    "what is never seen"
)
GUARDED_BY = "tests/test_findings.py::test_resume_repeats_and_loses_only_what_the_tail_allows"

DATASET_SIZES: tuple[int, ...] = (97, 1000)
OLD_WORLD_SIZES: tuple[int, ...] = (2, 4, 8)
NEW_WORLD_SIZES: tuple[int, ...] = (2, 3, 4, 6, 8)
#: Samples per batch on every rank; a step is one batch on every rank.
BATCH_SIZE = 4
SEED = 0
#: The epoch stopped and resumed (shuffled: ``seed + epoch`` draws its order).
EPOCH = 1

#: The example job: dataset size, old world size, and the new world sizes it resumes on.
EXAMPLE = (1000, 4, (3, 6))

RESTART = "stock, restarted at the epoch start"
SKIP = "stock, each rank skips what it had yielded"
OURS = {tail: f'ours, state_dict (tail "{tail}")' for tail in TAILS}
#: The ways to resume, in the tables' order.
APPROACHES: tuple[str, ...] = (RESTART, SKIP, *OURS.values())


def steps_done(dataset_size: int, old_world: int) -> list[int]:
    """Steps after which the job stops: the first, the middle and the last but one of the
    shortest share (tail "drop", so every tail's epoch is still under way), and the
    epoch's last step (of the longest share: every tail's epoch is over)."""
    shortest = dataset_size // old_world
    steps = ceil_div(shortest, BATCH_SIZE)
    longest = ceil_div(ceil_div(dataset_size, old_world), BATCH_SIZE)
    middle = {step for step in (1, steps // 2, steps - 1) if 0 < step < steps}
    return sorted(middle | {longest})


def at_epoch_end(dataset_size: int, old_world: int, steps: int) -> bool:
    """Whether ``steps`` is the epoch's last step (see :func:`steps_done`)."""
    return steps == max(steps_done(dataset_size, old_world))


def _stock(dataset_size: int, world: int, rank: int) -> StockSampler:
    sampler = StockSampler(range(dataset_size), world, rank, seed=SEED)
    sampler.set_epoch(EPOCH)
    return sampler


def _ours(dataset_size: int, world: int, rank: int, tail: str) -> DistributedSampler:
    sampler: DistributedSampler = DistributedSampler(
        range(dataset_size),
        world,
        rank,
        seed=SEED,
        tail=tail,  # type: ignore[arg-type]
    )
    sampler.set_epoch(EPOCH)
    return sampler


def received(
    approach: str, dataset_size: int, old_world: int, steps: int, new_world: int
) -> tuple[torch.Tensor, int]:
    """Everything the ranks receive in the epoch, before the stop and after the resume, and
    how many of those indices came after the resume.

    Before the stop every old rank took ``steps * BATCH_SIZE`` indices (or its whole
    share), in lockstep.
    """
    taken = steps * BATCH_SIZE
    if approach in (RESTART, SKIP):
        old: list = [_stock(dataset_size, old_world, rank) for rank in range(old_world)]
    else:
        tail = next(tail for tail, label in OURS.items() if label == approach)
        old = [_ours(dataset_size, old_world, rank, tail) for rank in range(old_world)]
    iterators = [iter(sampler) for sampler in old]
    parts = [list(islice(iterator, taken)) for iterator in iterators]
    before = sum(len(part) for part in parts)

    for rank in range(new_world):
        if approach == RESTART:
            parts.append(list(_stock(dataset_size, new_world, rank)))
        elif approach == SKIP:
            # What a loader that counts yielded indices does: regenerate the epoch on the
            # new rank and skip as many as an old rank had yielded (all yielded as many).
            fresh = iter(_stock(dataset_size, new_world, rank))
            parts.append(list(islice(fresh, len(parts[0]), None)))
        else:
            tail = next(tail for tail, label in OURS.items() if label == approach)
            state = old[0].state_dict()
            sampler = _ours(dataset_size, new_world, rank, tail)
            sampler.load_state_dict(state)
            parts.append(list(sampler))
    indices = torch.tensor([index for part in parts for index in part], dtype=torch.int64)
    return indices, indices.numel() - before


def outcomes() -> pd.DataFrame:
    """One row per configuration and way of resuming: samples repeated and never seen."""
    rows = []
    for dataset_size in DATASET_SIZES:
        for old_world in OLD_WORLD_SIZES:
            for steps in steps_done(dataset_size, old_world):
                for new_world in NEW_WORLD_SIZES:
                    for approach in APPROACHES:
                        indices, after = received(
                            approach, dataset_size, old_world, steps, new_world
                        )
                        counts = torch.bincount(indices, minlength=dataset_size)
                        rows.append(
                            {
                                "dataset size": dataset_size,
                                "old world size": old_world,
                                "steps done": steps,
                                "stopped": "epoch end"
                                if at_epoch_end(dataset_size, old_world, steps)
                                else "mid-epoch",
                                "new world size": new_world,
                                "how the job resumes": approach,
                                "samples repeated": int((counts - 1).clamp(min=0).sum()),
                                "samples never seen": int((counts == 0).sum()),
                                "received after the resume": after,
                            }
                        )
    return pd.DataFrame(rows)


def by_approach(table: pd.DataFrame) -> pd.DataFrame:
    """Per way of resuming, on the same and on another world size: how often and how bad."""
    world = (table["old world size"] == table["new world size"]).map(
        {True: "same", False: "changed"}
    )
    summary = (
        table.assign(**{"world size": world})
        .groupby(["how the job resumes", "stopped", "world size"], sort=False)
        .agg(
            configurations=("samples repeated", "size"),
            **{
                "with samples repeated": ("samples repeated", lambda s: int((s > 0).sum())),
                "with samples never seen": ("samples never seen", lambda s: int((s > 0).sum())),
                "most repeated": ("samples repeated", "max"),
                "most never seen": ("samples never seen", "max"),
            },
        )
        .reset_index()
    )
    return summary


def example(table: pd.DataFrame, stopped: str = "mid-epoch") -> tuple[pd.DataFrame, int]:
    """One job, every way of resuming, on fewer and on more ranks; and its steps done.

    Mid-epoch, the job stops after the middle one of its measured step counts; at the
    epoch's end, after its last step.
    """
    size, old_world, new_worlds = EXAMPLE
    job = table[
        (table["dataset size"] == size)
        & (table["old world size"] == old_world)
        & (table["stopped"] == stopped)
    ]
    measured = sorted(job["steps done"].unique())
    steps = int(measured[len(measured) // 2])
    job = job[job["steps done"] == steps]
    frame = pd.DataFrame({"how the job resumes": list(APPROACHES)})
    for new_world in new_worlds:
        rows = job[job["new world size"] == new_world].set_index("how the job resumes")
        for measure in ("samples repeated", "samples never seen"):
            column = f"on {new_world} ranks: {measure.removeprefix('samples ')}"
            frame[column] = [int(rows.loc[approach, measure]) for approach in APPROACHES]
    return frame, steps


def allowance(table: pd.DataFrame) -> pd.Series:
    """Per row, the world size whose padding (or trimming) the epoch used: the new one when
    it was resumed mid-epoch, the old one when the stop came after its last step."""
    return table["new world size"].where(table["stopped"] == "mid-epoch", table["old world size"])


def _held(table: pd.DataFrame) -> dict[str, int]:
    """In how many configurations each tail's guarantee held (see :func:`allowance`)."""
    world = allowance(table)
    repeated, never = table["samples repeated"], table["samples never seen"]
    held: dict[str, int] = {}
    for tail, label in OURS.items():
        rows = table["how the job resumes"] == label
        if tail == "uneven":
            ok = (repeated[rows] == 0) & (never[rows] == 0)
        elif tail == "pad":
            ok = (repeated[rows] < world[rows]) & (never[rows] == 0)
        else:
            ok = (repeated[rows] == 0) & (never[rows] < world[rows])
        held[tail] = int(ok.sum())
    return held


@dataclass(frozen=True)
class Facts:
    """Over the configurations resumed on another world size, per way of resuming."""

    configurations: int
    moved: int
    #: tail -> configurations (all of them) in which its guarantee held.
    held: dict[str, int]
    #: Ours with tail "uneven", resumed on another world size: the most repeated or lost.
    uneven_wrong: int
    skip_lost: int
    skip_never: int
    skip_repeated: int
    restart_repeated: int
    #: Stopped after the epoch's last step: configurations, per way of resuming, and in how
    #: many of ours the new ranks were handed nothing more of the epoch.
    ended: int
    ours_ended_nothing: int
    restart_ended_least: int


def facts(table: pd.DataFrame) -> Facts:
    """The counts the claim and the answers use, from the table of configurations."""
    moved = table[table["old world size"] != table["new world size"]]
    approach = moved["how the job resumes"]
    exact = moved[approach == OURS["uneven"]]
    skipping = moved[approach == SKIP]
    restarting = moved[approach == RESTART]
    at_end = table[table["stopped"] == "epoch end"]
    ours_at_end = at_end[at_end["how the job resumes"].isin(list(OURS.values()))]
    restart_at_end = at_end[at_end["how the job resumes"] == RESTART]
    return Facts(
        configurations=len(table) // len(APPROACHES),
        moved=len(exact),
        held=_held(table),
        uneven_wrong=int((exact["samples repeated"] + exact["samples never seen"]).max()),
        skip_lost=int((skipping["samples never seen"] > 0).sum()),
        skip_never=int(skipping["samples never seen"].max()),
        skip_repeated=int(skipping["samples repeated"].max()),
        restart_repeated=int(restarting["samples repeated"].max()),
        ended=len(restart_at_end),
        ours_ended_nothing=int((ours_at_end["received after the resume"] == 0).sum()),
        restart_ended_least=int(restart_at_end["received after the resume"].min()),
    )


def claim(found: Facts) -> str:
    """The claim, from the facts."""
    total = found.configurations
    return (
        "A job stopped after k steps on W ranks (mid-epoch, or after the epoch's last step) "
        "and resumed on W' ranks, over that epoch: the stock sampler restarted at the epoch "
        f"start repeated up to {found.restart_repeated} samples; the stock sampler with each "
        "new rank skipping as many indices as an old rank had yielded (what torchdata's "
        "StatefulDataLoader does for a sampler without state) left samples never seen in "
        f"{count_of(found.skip_lost, found.moved, 'configurations')} resumed on another "
        f"world size, up to {found.skip_never}. Our samplers' state_dict()/load_state_dict() "
        'saw every sample exactly once with tail "uneven" in '
        f'{count_of(found.held["uneven"], total, "configurations")}; with "pad" every '
        f'sample and with "drop" none twice, repeating or leaving out fewer samples than the '
        "world size whose layout ended the epoch (W' when resumed mid-epoch, W when the epoch "
        f"had ended), in {found.held['pad']} and {found.held['drop']}. Stopped after the "
        "epoch's last step, our state handed out nothing more of the epoch in "
        f"{count_of(found.ours_ended_nothing, found.ended * len(OURS), 'runs')} "
        f"({found.ended} end-of-epoch configurations x {len(OURS)} tails), where restarting "
        f"replayed at least {found.restart_ended_least} indices."
    )


def build() -> Evidence:
    table = outcomes()
    summary = by_approach(table)
    one, steps = example(table)
    end, last_step = example(table, "epoch end")
    size, old_world, (fewer, more) = EXAMPLE
    changed = table[table["old world size"] != table["new world size"]]
    same = table[table["old world size"] == table["new world size"]]

    restart = table[table["how the job resumes"] == RESTART]
    consumed = (restart["steps done"] * BATCH_SIZE * restart["old world size"]).clip(
        upper=restart["dataset size"]
    )
    restart_repeats_all = bool((restart["samples repeated"] >= consumed).all())
    skip_changed = changed[changed["how the job resumes"] == SKIP]
    skip_same = same[same["how the job resumes"] == SKIP]
    skip_lost = int((skip_changed["samples never seen"] > 0).sum())
    skip_same_exact = bool(
        (skip_same["samples never seen"] == 0).all()
        and (skip_same["samples repeated"] < skip_same["new world size"]).all()
    )
    found = facts(table)
    held = [tail for tail in TAILS if found.held[tail] == found.configurations]
    broken = [tail for tail in TAILS if found.held[tail] < found.configurations]
    rows = one.set_index("how the job resumes")
    ended = end.set_index("how the job resumes")
    ours_ended = found.ended * len(OURS)
    on_fewer = rows.loc[RESTART, f"on {fewer} ranks: repeated"]
    on_more = rows.loc[RESTART, f"on {more} ranks: repeated"]
    restarted = (
        f"{on_fewer} on either"
        if on_fewer == on_more
        else f"{on_fewer} on {fewer} ranks and {on_more} on {more}"
    )
    prose = (
        f"Over {len(table) // len(APPROACHES)} configurations ({joined(DATASET_SIZES)} "
        f"samples, {joined(OLD_WORLD_SIZES)} ranks before the stop, "
        f"{joined(NEW_WORLD_SIZES)} after it, batch size {BATCH_SIZE}): restarting the "
        "stock sampler at the epoch start "
        + (
            "repeated at least every sample consumed before the stop, in every configuration"
            if restart_repeats_all
            else "did not always repeat every sample consumed before the stop"
        )
        + f" (up to {int(restart['samples repeated'].max())} repeats). Skipping on each "
        "rank what it had yielded is "
        + (
            "exact on the same world size (nothing lost; only the epoch's padding, fewer "
            "than the world size, repeated)"
            if skip_same_exact
            else "not exact even on the same world size"
        )
        + f", but on another world size it left samples never seen in {skip_lost} of "
        f"{len(skip_changed)} configurations (up to "
        f"{int(skip_changed['samples never seen'].max())} samples) and repeated up to "
        f"{int(skip_changed['samples repeated'].max())}. Resuming from our sampler's state "
        "(one rank's, loaded on every new rank) held its tail's guarantee in every "
        f"configuration for tail{'s' if len(held) != 1 else ''} "
        + joined(f'"{tail}"' for tail in held)
        + (f", and NOT for {joined(broken)}" if broken else "")
        + ': "uneven" every sample exactly once, "pad" none lost and fewer repeats than the '
        'world size that padded the epoch, "drop" none repeated and fewer lost than the world '
        "size that trimmed it. For "
        f"example, {size} samples stopped after {steps} steps on {old_world} ranks: skipping "
        f"repeated {rows.loc[SKIP, f'on {fewer} ranks: repeated']} samples when resumed on "
        f"{fewer} ranks and left {rows.loc[SKIP, f'on {more} ranks: never seen']} never seen "
        f"when resumed on {more} (the new ranks skip {steps * BATCH_SIZE} samples each, "
        f"whatever their number), while restarting repeated {restarted}. Stopped after the "
        f"epoch's last step ({last_step} steps), restarting repeated "
        f"{ended.loc[RESTART, f'on {fewer} ranks: repeated']} samples on {fewer} ranks, "
        f"(the new ranks received {found.restart_ended_least} "
        "or more indices of the finished epoch in every end-of-epoch configuration), "
        "while our samplers' state, which then says the epoch is finished, "
        + (
            f"handed out nothing more of it in all {found.ended} end-of-epoch "
            f"configurations with each of the {len(OURS)} tails ({ours_ended} runs)"
            if found.ours_ended_nothing == ours_ended
            else "did NOT always hand out nothing more of it"
        )
        + ": the resumed loop's `set_epoch(epoch)` yields nothing more of it and the next "
        "`set_epoch` starts the next epoch. To checkpoint, save `sampler.state_dict()` at any "
        "step (it is the same on every rank, and with a DataLoader, whatever its "
        "`num_workers`, it is the step the loop reached) and resume with "
        "`sampler.load_state_dict(state)` on every new rank."
    )
    note = (
        f"Shuffle on, seed {SEED}, epoch {EPOCH}; a step is a batch of {BATCH_SIZE} on every "
        "rank, in lockstep. The stock sampler pads (drop_last=False), so an uninterrupted "
        "epoch already repeats fewer samples than the world size. `samples repeated` counts "
        "the receptions beyond each sample's first."
    )
    return Evidence(
        prose=prose,
        claim=claim(found),
        facts=found,
        tables=(
            Table(
                f"One job: {size} samples, stopped after {steps} steps on {old_world} ranks, "
                f"resumed on {fewer} or on {more}",
                one,
                note=note,
            ),
            Table(
                f"The same job stopped after the epoch's last step ({last_step} steps), "
                f"resumed on {fewer} or on {more}",
                end,
                note=note,
            ),
            Table(
                "Every configuration and way of resuming",
                table,
                note=note,
                name="configurations",
                summary=summary,
            ),
        ),
    )
