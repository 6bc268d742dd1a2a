"""Finding: which sampler guarantees what, checked by the kit on ours and on the peers."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from importlib.metadata import version

import pandas as pd

from samplers import testing
from studies.common import records
from studies.findings import Evidence, Table
from studies.findings.wording import count_of, joined
from studies.kit import search_record
from studies.kit.cli import SHOWN, counterexample_text
from studies.kit.peers import COLUMNS, Column

NAME = "guarantees"
TITLE = (
    "Which sampler guarantees what: the kit's guarantees checked on ours and on the samplers "
    "people use"
)
GUARDED_BY = "tests/test_kit.py::test_the_matrix_claim_holds_for_its_samplers"
#: Seconds build() takes on an idle 2-core machine: the report starts long ones first.
SECONDS = 60
SLOW = True

SAMPLER, GUARANTEE, RESULT = "sampler", "guarantee", "result"
COUNTEREXAMPLE, EXPERIENCE, DETAIL = (
    "smallest counterexample",
    "what a user experiences",
    "detail",
)
HELD, VIOLATED, UNSUPPORTED = SHOWN[True], SHOWN[False], SHOWN[None]
#: A guarantee the sampler does not promise (``Column.not_applicable``): the kit's result
#: is kept in :data:`KIT` and shown beside it, never counted as held or violated.
INAPPLICABLE = "does not apply"
KIT, REASON = "the kit's result", "why it does not apply"
TRIED = "configurations tried"


def _version(column: Column) -> str:
    if not column.distribution:
        return "this checkout"
    # The local build label (e.g. torch's "+cpu") is not part of the release.
    return version(column.distribution).split("+")[0]


def yields(column: Column) -> str:
    """``"batches"`` for a batch sampler (its factory takes ``batch_size``), else
    ``"indices"``: the kit batches an index sampler's output with a DataLoader."""
    parameters = inspect.signature(column.factory).parameters
    return "batches" if "batch_size" in parameters else "indices"


def checked(columns: tuple[Column, ...] = COLUMNS) -> dict[str, list[testing.Result]]:
    """Every column's results, by name: the cheaper search of
    :func:`studies.kit.search_record.search`, which finds every counterexample the full
    search recorded. Raises :class:`studies.common.extras.MissingExtra` when a peer library
    is not installed: a missing peer fails the report, it never drops a column."""
    return search_record.search(columns)


def cells(columns: tuple[Column, ...] = COLUMNS) -> pd.DataFrame:
    """One row per sampler and guarantee: the kit's result for every column of
    :data:`studies.kit.peers.COLUMNS`, in column order and the kit's guarantee order, with
    the configurations each search tried."""
    results = checked(columns)
    rows = []
    for column in columns:
        reasons = dict(column.not_applicable)
        for result in results[column.name]:
            found = result.counterexample or {}
            reason = reasons.get(result.guarantee, "")
            rows.append(
                {
                    SAMPLER: column.name,
                    GUARANTEE: result.guarantee,
                    RESULT: INAPPLICABLE if reason else SHOWN[result.holds],
                    KIT: SHOWN[result.holds],
                    REASON: reason,
                    "dataset size": found.get("dataset_size", ""),
                    "world size": found.get("world_size", ""),
                    "batch size": found.get("batch_size", ""),
                    "rank": "" if found.get("rank") is None else found["rank"],
                    "epoch": found.get("epoch", ""),
                    COUNTEREXAMPLE: counterexample_text(result.counterexample),
                    EXPERIENCE: result.experience or "-",
                    DETAIL: result.detail,
                    TRIED: result.examples,
                }
            )
    return pd.DataFrame(rows)


def _anchor(guarantee: str) -> str:
    return f"#where-{guarantee}-fails"


def matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per guarantee, one column per sampler; a violated cell gives the smallest
    counterexample's sizes and links to the table of what a user experiences."""

    def cell(row: pd.Series) -> str:
        sizes = f"N={row['dataset size']} W={row['world size']} B={row['batch size']}"
        if row[RESULT] == INAPPLICABLE:
            found = f"{row[KIT]}: {sizes}" if row[KIT] == VIOLATED else str(row[KIT])
            return f"[{INAPPLICABLE}](#guarantees-that-do-not-apply) (the kit: {found})"
        if row[RESULT] != VIOLATED:
            return str(row[RESULT])
        return f"[violated]({_anchor(row[GUARANTEE])}): {sizes}"

    shown = frame.assign(cell=frame.apply(cell, axis=1))
    wide = shown.pivot(index=GUARANTEE, columns=SAMPLER, values="cell")
    guarantees = list(dict.fromkeys(frame[GUARANTEE]))
    samplers = list(dict.fromkeys(frame[SAMPLER]))
    wide = wide.loc[guarantees, samplers]
    return wide.reset_index().rename_axis(columns=None)


@dataclass(frozen=True)
class Facts:
    """Who held, violated or could not be checked for what, from the cells."""

    samplers: tuple[str, ...]
    guarantees: tuple[str, ...]
    #: guarantee -> samplers, for each result.
    held: dict[str, tuple[str, ...]]
    violated: dict[str, tuple[str, ...]]
    unsupported: dict[str, tuple[str, ...]]
    #: guarantee -> samplers that do not promise it (whatever the kit found there).
    inapplicable: dict[str, tuple[str, ...]]
    #: sampler -> guarantees it held.
    count: dict[str, int]


def facts(frame: pd.DataFrame) -> Facts:
    """The names and counts the claim uses, from the table of cells."""
    samplers = tuple(dict.fromkeys(frame[SAMPLER]))
    guarantees = tuple(dict.fromkeys(frame[GUARANTEE]))

    def who(result: str) -> dict[str, tuple[str, ...]]:
        return {
            guarantee: tuple(
                frame[(frame[GUARANTEE] == guarantee) & (frame[RESULT] == result)][SAMPLER]
            )
            for guarantee in guarantees
        }

    held = frame[frame[RESULT] == HELD].groupby(SAMPLER).size()
    return Facts(
        samplers=samplers,
        guarantees=guarantees,
        held=who(HELD),
        violated=who(VIOLATED),
        unsupported=who(UNSUPPORTED),
        inapplicable=who(INAPPLICABLE),
        count={name: int(held.get(name, 0)) for name in samplers},
    )


def not_applying(found: Facts) -> dict[str, list[str]]:
    """sampler -> the guarantees that do not apply to it, for samplers with any."""
    table = {
        name: [g for g in found.guarantees if name in found.inapplicable.get(g, ())]
        for name in found.samplers
    }
    return {name: guarantees for name, guarantees in table.items() if guarantees}


def within_tail(found: Facts) -> tuple[list[str], list[str]]:
    """The samplers that resumed on another world size within their tail policy, and
    those of them that repeat or leave out samples by that policy even uninterrupted
    (exactly-once violated): their resume is not "nothing lost or repeated"."""
    resumed = list(found.held.get("resumes-other-world-size", ()))
    inexact = [name for name in resumed if name in found.violated.get("exactly-once", ())]
    return resumed, inexact


def claim(found: Facts) -> str:
    """The claim, from the facts."""
    total, samplers = len(found.guarantees), len(found.samplers)
    best = max(found.count.values())
    leaders = [name for name in found.samplers if found.count[name] == best]
    everyone = [g for g in found.guarantees if len(found.held[g]) == samplers]
    repeat = [
        name
        for name in found.held.get("covers-dataset", ())
        if name in found.violated.get("exactly-once", ())
    ]
    lose = found.violated.get("covers-dataset", ())
    once = found.held.get("exactly-once", ())
    uneven = [name for name in once if name in found.violated.get("equal-batch-counts", ())]
    resumed, inexact = within_tail(found)
    exempt = not_applying(found)
    return (
        f"Checked by the kit's search against its {total} guarantees, "
        f"{count_of(sum(found.count[n] == total for n in found.samplers), samplers, 'samplers')} "
        f"held them all; the most any held is {best} ({joined(leaders)}). "
        f"{len(repeat)} samplers reached every index but some more than once, "
        f"{len(lose)} lost indices, and of the {len(once)} that gave every index "
        f"exactly once, {len(uneven)} gave ranks unequal batch counts somewhere. "
        + (
            f"{joined(everyone)} held for every sampler, so those rows tell none apart. "
            if everyone
            else ""
        )
        + f"{len(resumed)} samplers resumed on another world size losing and repeating nothing "
        "beyond what their own tail policy does to an uninterrupted epoch ("
        + f"{count_of(len(inexact), len(resumed), 'of them')} repeat or leave out samples by "
        "that policy even uninterrupted), "
        + joined(
            [
                f"{len(found.violated.get('resumes-other-world-size', ()))} violated it",
                f"{len(found.unsupported.get('resumes-other-world-size', ()))} have no "
                "state_dict to check",
            ]
        )
        + "."
        + "".join(
            f" {name} held {found.count[name]} of the {total - len(guarantees)} guarantees "
            "that apply to it"
            + (
                f" (violated: {joined(violated)})"
                if (violated := [g for g in found.guarantees if name in found.violated[g]])
                else ""
            )
            + f"; {joined(guarantees)} do not apply to it."
            for name, guarantees in exempt.items()
        )
    )


def describe(frame: pd.DataFrame, found: Facts) -> str:
    """The prose, from the table of cells and its facts."""
    samplers = len(found.samplers)
    everyone = [g for g in found.guarantees if len(found.held[g]) == samplers]
    tiny = "no-tiny-batch"
    batch_samplers = [
        c.name
        for c in COLUMNS
        if c.name in found.samplers
        and yields(c) == "batches"
        and c.name not in found.inapplicable.get(tiny, ())
    ]
    index_samplers = [
        name
        for name in found.samplers
        if name not in batch_samplers and name not in found.inapplicable.get(tiny, ())
    ]
    tiny_index = [n for n in index_samplers if n in found.violated.get(tiny, ())]
    tiny_batch = [n for n in batch_samplers if n in found.held.get(tiny, ())]
    once = found.held.get("exactly-once", ())
    equal = found.held.get("equal-batch-counts", ())
    both = [name for name in once if name in equal]
    resumed, inexact = within_tail(found)
    lost = found.violated.get("resumes-other-world-size", ())
    unsupported = found.unsupported.get("resumes-same-world-size", ())
    text = (
        f"{samplers} samplers were checked against the {len(found.guarantees)} guarantees "
        "of `samplers.testing`, each by the kit's derandomised search, shrunk to the "
        "smallest counterexample (how it was searched is below). Every index exactly once "
        "each epoch: "
        f"{joined(once) or 'none'}. The same number of batches on every rank: "
        f"{joined(equal) or 'none'}. Both at once: {joined(both) or 'none'}. Resuming on "
        "another world size, losing and repeating nothing beyond the sampler's own tail "
        f"policy: {joined(resumed) or 'none'}"
        + (f"; {joined(lost)} violated it" if lost else "")
        + ". "
        + (
            f"Of those, {joined(inexact)} repeat or leave out samples by that policy even "
            "in an uninterrupted epoch (exactly-once violated), so for them the resume "
            "keeps that policy's repeats or losses: the kit allows as many as one step's "
            "samples less one (world size x batch size - 1, on the larger of the two world "
            "sizes), where the uninterrupted epoch repeats or loses any."
            if inexact
            else "None of them repeats or leaves out samples uninterrupted."
        )
    )
    if everyone:
        text += (
            f" {joined(everyone)} held for {count_of(samplers, samplers, 'samplers')}: "
            "no sampler measured here breaks them, so they only show that the kit checks them."
        )
    if tiny in found.guarantees:
        text += (
            f" {tiny}: the kit batches an index sampler's output with a DataLoader without "
            f"drop_last, so its result there is the DataLoader's, not the sampler's: it was "
            f"violated by {count_of(len(tiny_index), len(index_samplers), 'index samplers')}; "
            "a DataLoader with drop_last=True drops every batch shorter than the batch size "
            "instead. It "
            "tells the batch samplers apart: "
            f"{count_of(len(tiny_batch), len(batch_samplers), 'batch samplers')} held it."
        )
    reasons = frame[frame[RESULT] == INAPPLICABLE]
    for name, guarantees in not_applying(found).items():
        own = reasons[reasons[SAMPLER] == name]
        why = dict(zip(own[GUARANTEE], own[REASON], strict=True))
        kit = dict(zip(own[GUARANTEE], own[KIT], strict=True))
        text += (
            f" For {name}, "
            + joined(f"{g} does not apply ({why[g]}; the kit: {kit[g]})" for g in guarantees)
            + "; those cells count neither as held nor as violated."
        )
    text += (
        f" Not supported, for the resume guarantees, means the sampler has no "
        f"`state_dict` ({joined(unsupported) or 'none'}); the kit checks that way of resuming "
        "only. Others exist and are not checked here: accelerate's `skip_first_batches` "
        "skips the batches a rank had taken (the resume finding measures that approach "
        "on another world size), and Megatron-style samplers take a count of consumed "
        "samples at construction. The wrappers are checked with a wrapped RandomSampler "
        "seeded alike on every rank; with each rank seeded differently the "
        "wrapping-samplers finding shows what they lose. Check a sampler of your own with "
        "`dsampler check MODULE:FACTORY`."
    )
    return text


SEARCH, FOUND_AGAIN = "search", "the full search's counterexamples it found"
FULL, CHEAP = "the full search (recorded)", "this report's"


def search_table(
    frame: pd.DataFrame, recorded: dict[tuple[str, str], search_record.Cell]
) -> pd.DataFrame:
    """The report's search against the full one recorded: configurations tried, violated
    cells (the kit's result, whether or not the guarantee applies), and how many of the
    full search's counterexamples the report's search found again, the same."""
    shown = {
        (row[SAMPLER], row[GUARANTEE]): row[COUNTEREXAMPLE]
        for _, row in frame[frame[KIT] == VIOLATED].iterrows()
    }
    violated = [cell for cell in recorded.values() if cell.holds is False]
    again = [
        cell
        for cell in violated
        if shown.get((cell.sampler, cell.guarantee)) == cell.counterexample
    ]
    return pd.DataFrame(
        [
            {
                SEARCH: FULL,
                TRIED: sum(cell.tried for cell in recorded.values()),
                "violated cells": len(violated),
                FOUND_AGAIN: len(violated),
            },
            {
                SEARCH: CHEAP,
                TRIED: int(frame[TRIED].sum()),
                "violated cells": len(shown),
                FOUND_AGAIN: len(again),
            },
        ]
    )


def how_searched(searched: pd.DataFrame) -> str:
    """The prose on the search, from :func:`search_table` and the record's metadata."""
    full, cheap = searched.set_index(SEARCH).loc[FULL], searched.set_index(SEARCH).loc[CHEAP]
    generated = sorted({search_record.examples(g) for g in testing.GUARANTEES})
    defaults = sorted({search_record.full_examples(g) for g in testing.GUARANTEES})
    again = int(cheap[FOUND_AGAIN])
    new = int(cheap["violated cells"]) - again
    return (
        "How it was searched: `dsampler check`'s full search of every cell takes minutes, "
        "so the report's search starts where the full one found something. Each guarantee "
        "was first tried on the counterexamples the full search found for it (this "
        "sampler's own first, then the other samplers'), and the first that violated it "
        "was made smaller as the search makes any it finds smaller; where the full search "
        f"found none, hypothesis generated {joined(str(n) for n in generated)} "
        f"configurations instead of {joined(str(n) for n in defaults)}. The report's search "
        f"found {count_of(again, int(full['violated cells']), 'counterexamples')} of the full "
        "search again, the same"
        + (f", and {new} it did not find" if new else "")
        + f", trying {int(cheap[TRIED]):,} configurations against its {int(full[TRIED]):,}. "
        "The full search's outcome is a record (`studies/data/guarantee-search.json`, with "
        f"the machine and versions it ran on; `{search_record.COMMAND}` re-measures it); "
        "every cell above was computed by running the check on the sampler."
    )


def build() -> Evidence:
    frame = cells()
    found = facts(frame)
    data = records.load(search_record.RECORD, search_record.COMMAND)
    searched = search_table(frame, search_record.load())
    legend = pd.DataFrame(
        [
            {SAMPLER: c.name, "what it is": c.what, "yields": yields(c), "version": _version(c)}
            for c in COLUMNS
        ]
    )
    tables = [
        Table(
            "Every sampler and guarantee",
            frame,
            name="cells",
            summary=matrix(frame),
            note=(
                "N: dataset size, W: world size, B: batch size of the smallest counterexample "
                "the search shrank to; each violated cell links to what a user experiences. "
                "Not supported: the sampler lacks what the guarantee needs (set_epoch, "
                "state_dict)."
            ),
        ),
        Table("The samplers", legend),
        Table(
            "The search: this report's against the full search",
            searched,
            intfmt=",",
            note=(
                "The full search's record ran on "
                + ", ".join(f"{k}: {v}" for k, v in data["machine"].items())
                + "; "
                + ", ".join(f"{k} {v}" for k, v in data["versions"].items())
                + "."
            ),
        ),
    ]
    exempt = frame[frame[RESULT] == INAPPLICABLE]
    if not exempt.empty:
        tables.append(
            Table(
                "Guarantees that do not apply",
                exempt[[SAMPLER, GUARANTEE, REASON, KIT, COUNTEREXAMPLE]].reset_index(drop=True),
                note="The sampler does not promise these; the kit checked them all the same.",
            )
        )
    for guarantee, statement in testing.GUARANTEES.items():
        failing = frame[(frame[GUARANTEE] == guarantee) & (frame[RESULT] == VIOLATED)]
        if failing.empty:
            continue
        tables.append(
            Table(
                f"Where {guarantee} fails",
                failing[[SAMPLER, COUNTEREXAMPLE, EXPERIENCE]].reset_index(drop=True),
                note=f"The guarantee: {statement}.",
            )
        )
    prose = describe(frame, found) + "\n\n" + how_searched(searched)
    return Evidence(claim=claim(found), prose=prose, tables=tuple(tables), facts=found)
