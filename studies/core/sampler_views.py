"""What the token, packed and mixture samplers hand each rank, as ``explain`` and
``observe`` print it: batches with their tokens, rows with their fill, sources against
the weights.

:func:`view` turns every rank's batches (:mod:`studies.core.sampler_runs`) into a
:class:`View`: one record per batch (:meth:`View.rows`), one per rank and epoch with the
ranks together (:meth:`View.ranks`), the targets a mixture's sources should meet
(:attr:`View.targets`) and what the numbers show (:meth:`View.checks`); :func:`text`,
:func:`csv_text` and :func:`json_text` print it.

Guarantees: every number is computed from the batches handed out and the sampler's own
lengths, pieces and proportions, never typed: a batch's ``tokens`` is the sum of its
samples' lengths (its pieces' with ``split``), its ``cost`` is the batch's cost under the
sampler's model (:class:`~samplers.TokenCost`: padded to the longest, or summed; in
tokens); a packed batch's rows are read back with
:func:`samplers.tokens.packing.row_starts`, each row's ``fill`` its tokens over
``max_length``; a mixture batch's ``sources`` counts its indices by the source they fall
in (``ConcatDataset`` order; pieces with ``split``).
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import warnings as warnings_module
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import accumulate, pairwise
from typing import Any

from samplers import TokenCost
from samplers.tokens.cost import as_cost
from samplers.tokens.packing import row_starts
from studies.core.sampler_runs import (
    MIXTURE_KINDS,
    PACKED_KINDS,
    TOKEN_KINDS,
    Batches,
    Setup,
    make_sampler,
)

__all__ = ["View", "csv_text", "json_text", "text", "view"]

#: Shares are shown with this many decimals.
_DIGITS = 3


@dataclass(frozen=True)
class View:
    """Every rank's batches of one setup, with what they hold (see the module)."""

    setup: Setup
    batches: list[Batches]
    #: Each item's length (a piece's with ``split``), for the samplers that take lengths.
    lengths: list[int] | None
    #: A mixture's sources: the first item of each, then the items' total.
    bounds: list[int] | None
    #: The sampler's settings as it applies them (its tail, window, ...).
    settings: dict[str, Any]
    #: A mixture's targets: each source's exact share of the draws and, for the samplers
    #: that take lengths, of the tokens.
    targets: dict[str, list[Fraction]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: The token samplers' cost model, as the sampler applies it.
    cost: TokenCost | None = None
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # Per batch ---------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """One record per batch, ordered by epoch, rank and batch."""
        if "rows" not in self._cache:
            records = [
                self._record(epoch, rank, number, indices)
                for rank, batches in enumerate(self.batches)
                for epoch, number, indices in batches
            ]
            records.sort(key=lambda row: (row["epoch"], row["rank"], row["batch"]))
            self._cache["rows"] = records
        return list(self._cache["rows"])

    def _grouped(self) -> dict[tuple[int, int], list[dict[str, Any]]]:
        """The records of each (epoch, rank), every pair present."""
        groups: dict[tuple[int, int], list[dict[str, Any]]] = {
            (epoch, rank): []
            for epoch in range(self.setup.epochs)
            for rank in range(self.setup.world_size)
        }
        for row in self.rows():
            groups[row["epoch"], row["rank"]].append(row)
        return groups

    def _record(self, epoch: int, rank: int, number: int, indices: list[int]) -> dict[str, Any]:
        record: dict[str, Any] = {"epoch": epoch, "rank": rank, "batch": number}
        record["size"] = len(indices)
        kind = self.setup.kind
        if self.lengths is not None:
            lengths = [self.lengths[index] for index in indices]
            record["tokens"] = sum(lengths)
            if self.cost is not None:
                record["cost"] = _cost(self.cost, lengths)
            if kind in PACKED_KINDS:
                length = int(self.setup.max_length or 1)
                cuts = [*row_starts(lengths, length), len(indices)]
                rows = [indices[a:b] for a, b in pairwise(cuts)]
                record["rows"] = rows
                tokens = [sum(lengths[a:b]) for a, b in pairwise(cuts)]
                record["row_tokens"] = tokens
                record["fill"] = [round(t / length, _DIGITS) for t in tokens]
        if self.bounds is not None:
            sources = [self._source(index) for index in indices]
            counts = Counter(sources)
            record["sources"] = [counts[d] for d in range(len(self.bounds) - 1)]
            if self.lengths is not None:
                record["source_tokens"] = self._source_tokens(indices)
        record["indices"] = indices
        return record

    def _source(self, index: int) -> int:
        assert self.bounds is not None
        return bisect.bisect_right(self.bounds, index) - 1

    def _source_tokens(self, indices: list[int]) -> list[int]:
        assert self.bounds is not None and self.lengths is not None
        tokens = [0] * (len(self.bounds) - 1)
        for index in indices:
            tokens[self._source(index)] += self.lengths[index]
        return tokens

    # Per rank ----------------------------------------------------------------------------

    def ranks(self) -> list[dict[str, Any]]:
        """One record per epoch and rank, then the ranks together (``rank`` ``"all"``):
        batches, samples and, as the sampler has them, tokens, the largest cost, rows
        and their mean fill, each source's draws and tokens."""
        if "ranks" not in self._cache:
            groups = self._grouped()
            records: list[dict[str, Any]] = []
            for epoch in range(self.setup.epochs):
                mine = [groups[epoch, rank] for rank in range(self.setup.world_size)]
                for rank, taken in enumerate(mine):
                    records.append({"epoch": epoch, "rank": rank, **self._totals(taken)})
                together = [row for rows in mine for row in rows]
                records.append({"epoch": epoch, "rank": "all", **self._totals(together)})
            self._cache["ranks"] = records
        return list(self._cache["ranks"])

    def _totals(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        totals: dict[str, Any] = {"batches": len(rows), "samples": sum(r["size"] for r in rows)}
        if self.lengths is not None:
            totals["tokens"] = sum(row["tokens"] for row in rows)
        if self.setup.kind in TOKEN_KINDS:
            totals["largest_cost"] = max((row["cost"] for row in rows), default=0)
        if self.setup.kind in PACKED_KINDS:
            count = sum(len(row["rows"]) for row in rows)
            totals["rows"] = count
            room = count * int(self.setup.max_length or 1)
            totals["fill"] = round(totals["tokens"] / room, _DIGITS) if room else 0.0
        if self.bounds is not None:
            sources = len(self.bounds) - 1
            totals["sources"] = [sum(row["sources"][d] for row in rows) for d in range(sources)]
            if self.lengths is not None:
                totals["source_tokens"] = [
                    sum(row["source_tokens"][d] for row in rows) for d in range(sources)
                ]
        return totals

    # What the numbers show -----------------------------------------------------------------

    def checks(self) -> list[str]:
        """What the batches show, computed: equal batch counts, coverage, the budget,
        the rows' length and fill, the sources against their targets."""
        ranks = self.ranks()
        said = [self._equal_counts(ranks)]
        epochs = range(self.setup.epochs)
        if self.setup.kind not in MIXTURE_KINDS:
            said.append(self._coverage())
        rows = self.rows()
        if self.setup.kind in TOKEN_KINDS:
            budget = int(self.setup.max_tokens or 0)
            over = sum(row["cost"] > budget for row in rows)
            said.append(
                f"Every batch costs at most max_tokens={budget} (cost {self.settings['cost']})."
                if not over
                else f"{over} of {len(rows)} batches cost more than max_tokens={budget}: "
                "each holds one sample that costs more alone."
            )
        if self.setup.kind in PACKED_KINDS:
            length = int(self.setup.max_length or 0)
            lines = [tokens for row in rows for tokens in row["row_tokens"]]
            over = sum(tokens > length for tokens in lines)
            fills = ", ".join(
                f"{_all(ranks, epoch)['fill']:.{_DIGITS}f} in epoch {epoch}" for epoch in epochs
            )
            said.append(
                (
                    f"Every row holds at most max_length={length} tokens"
                    if not over
                    else f"{over} of {len(lines)} rows are longer than max_length={length}: "
                    "each is one document longer than a row (--split long cuts them)"
                )
                + f"; rows filled {fills} (tokens over rows x max_length)."
            )
        for unit, key in (("draws", "sources"), ("tokens", "source_tokens")):
            if unit in self.targets:
                gaps = [self._largest_gap(_all(ranks, epoch)[key], unit) for epoch in epochs]
                said.append(
                    f"Sources' shares of the {unit}, all ranks together, against the "
                    f"targets: largest gap {max(gaps):.{_DIGITS}f} ("
                    + ", ".join(f"epoch {e}: {gap:.{_DIGITS}f}" for e, gap in enumerate(gaps))
                    + ")."
                )
        return said

    def _equal_counts(self, ranks: list[dict[str, Any]]) -> str:
        unequal = []
        counts = []
        for epoch in range(self.setup.epochs):
            per_rank = [r["batches"] for r in ranks if r["epoch"] == epoch and r["rank"] != "all"]
            counts.append(per_rank[0])
            if len(set(per_rank)) > 1:
                tally = sorted(Counter(per_rank).items(), reverse=True)
                found = ", ".join(
                    f"{count} batch{'' if count == 1 else 'es'} on {ranks_} "
                    f"rank{'s' if ranks_ > 1 else ''}"
                    for count, ranks_ in tally
                )
                unequal.append(f"epoch {epoch} ({found})")
        if unequal:
            return "Ranks yield different numbers of batches in " + "; ".join(unequal) + "."
        return (
            "Every rank yields the same number of batches: "
            + ", ".join(f"{count} in epoch {epoch}" for epoch, count in enumerate(counts))
            + "."
        )

    def _coverage(self) -> str:
        total = len(self.lengths) if self.lengths is not None else self.setup.dataset_size
        unit = "piece" if self.setup.split is not None else "sample"
        parts = []
        for epoch in range(self.setup.epochs):
            seen = Counter(
                index
                for batches in self.batches
                for number_epoch, _, indices in batches
                if number_epoch == epoch
                for index in indices
            )
            repeated = sum(count - 1 for count in seen.values())
            never = total - len(seen)
            parts.append(
                f"epoch {epoch}: every {unit} exactly once"
                if not repeated and not never
                else f"epoch {epoch}: {repeated} repeated, {never} never handed out"
            )
        return f"Over all ranks, of {total} {unit}s: " + "; ".join(parts) + "."

    def _largest_gap(self, counts: list[int], unit: str) -> float:
        total = sum(counts)
        if not total:
            return 0.0
        return float(
            max(
                abs(Fraction(c, total) - t) for c, t in zip(counts, self.targets[unit], strict=True)
            )
        )


def _all(ranks: list[dict[str, Any]], epoch: int) -> dict[str, Any]:
    return next(r for r in ranks if r["epoch"] == epoch and r["rank"] == "all")


def _cost(model: TokenCost, lengths: list[int]) -> int | float:
    """A batch's cost in tokens under ``model``, exactly (an int when whole)."""
    units = [model.cost_of(length) for length in lengths]
    total = len(units) * max(units, default=0) if model.kind == "padded" else sum(units)
    value = Fraction(total, model.scale)
    return int(value) if value.denominator == 1 else round(float(value), _DIGITS)


def view(setup: Setup, batches: list[Batches], warnings: list[str] | None = None) -> View:
    """The :class:`View` of every rank's ``batches`` of ``setup``; reads the lengths,
    pieces, sources and proportions from the sampler (rank 0's, built here)."""
    with warnings_module.catch_warnings():
        warnings_module.simplefilter("ignore")  # the run recorded them
        sampler = make_sampler(setup, 0)
    pieces = getattr(sampler, "pieces", None)
    lengths: list[int] | None = None
    if pieces is not None:
        lengths = [int(value) for value in pieces.lengths.tolist()]
    elif setup.lengths is not None:
        lengths = list(setup.lengths)
    bounds = None
    targets: dict[str, list[Fraction]] = {}
    if setup.kind in MIXTURE_KINDS:
        bounds = [0, *accumulate(sampler.sizes)]
        targets["draws"] = list(sampler.proportions)
        if lengths is not None:
            targets["tokens"] = list(sampler.token_proportions)
    settings = {"sampler": setup.class_name, **setup.arguments(), "tail": sampler.tail}
    cost = None
    if setup.kind in (*TOKEN_KINDS, *PACKED_KINDS):
        cost = as_cost(sampler.cost)
        settings["cost"] = cost.label
    if hasattr(sampler, "window"):
        settings["window"] = sampler.window
    if pieces is not None and setup.split is not None:
        settings["pieces"] = len(pieces)
    if setup.kind not in TOKEN_KINDS:
        cost = None  # a packed batch's cost is its tokens (summed); rows are shown instead
    return View(setup, batches, lengths, bounds, settings, targets, list(warnings or []), cost)


# --- output -------------------------------------------------------------------------------

#: The per-batch columns each kind adds, in order (``indices`` last).
_ROW_COLUMNS = ("epoch", "rank", "batch", "size", "tokens", "cost", "rows", "row_tokens", "fill")


def _columns(found: View) -> list[str]:
    first = found.rows()[:1] or [found._record(0, 0, 0, [])]
    names = [name for name in _ROW_COLUMNS if name in first[0]]
    return [*names, *(n for n in ("sources", "source_tokens") if n in first[0]), "indices"]


def _setting(name: str, value: Any) -> str:
    """A setting as the settings line shows it: lists comma-separated (``--lengths``
    given per source joined by ``and``), numbers as written, long texts cut short."""
    if name == "lengths":
        texts = [
            text if len(text) <= 40 else f"{text[:32]}... ({text.count(',') + 1} values)"
            for text in value
        ]
        return " and ".join(texts)
    if isinstance(value, list):
        return ",".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
    return str(value)


def _settings_line(found: View, source: str | None) -> str:
    shown = ", ".join(
        f"{name}={_setting(name, value)}"
        for name, value in found.settings.items()
        if name != "sampler"
    )
    line = f"Sampler: {found.settings['sampler']}, {shown}"
    return f"{line}\nSource: {source}" if source else line


def text(found: View, *, source: str | None = None, extra: str = "") -> str:
    """The human-readable listing: per epoch one line per batch of every rank (one per
    row for packed rows), then the ranks' totals, the sources against their targets, the
    checks and the sampler's warnings."""
    from tabulate import tabulate

    groups = found._grouped()
    packed = found.setup.kind in PACKED_KINDS
    parts = [_settings_line(found, source)]
    for epoch in range(found.setup.epochs):
        lines: list[list[Any]] = []
        for rank in range(found.setup.world_size):
            mine = groups[epoch, rank]
            if not mine:
                lines.append([rank, "-", "(no batches)"])
            for row in mine:
                lines += _batch_lines(found, row, packed)
        headers = _batch_headers(found, packed)
        parts.append(f"Epoch {epoch}\n{tabulate(lines, headers=headers, disable_numparse=True)}")
    parts.append(_totals_table(found))
    if found.targets:
        parts.append(_sources_table(found))
    parts.append("Checks\n" + "\n".join(f"- {line}" for line in found.checks()))
    if found.warnings:
        parts.append("Sampler warnings\n" + "\n".join(f"- {line}" for line in found.warnings))
    return "\n\n".join(parts) + "\n" + extra


def _batch_headers(found: View, packed: bool) -> list[str]:
    headers = ["rank", "batch"]
    if packed:
        return [*headers, "row", "samples", "tokens", "fill", "indices"]
    headers.append("size")
    if found.lengths is not None:
        headers.append("tokens")
    if found.setup.kind in TOKEN_KINDS:
        headers.append("cost")
    if found.bounds is not None:
        headers.append("sources")
    return [*headers, "indices"]


def _batch_lines(found: View, row: dict[str, Any], packed: bool) -> list[list[Any]]:
    if packed:
        return [
            [row["rank"], row["batch"], number, len(items), tokens, f"{fill:.{_DIGITS}f}", items]
            for number, (items, tokens, fill) in enumerate(
                zip(row["rows"], row["row_tokens"], row["fill"], strict=True)
            )
        ]
    line: list[Any] = [row["rank"], row["batch"], row["size"]]
    if found.lengths is not None:
        line.append(row["tokens"])
    if found.setup.kind in TOKEN_KINDS:
        line.append(row["cost"])
    if found.bounds is not None:
        line.append(", ".join(map(str, row["sources"])))
    return [[*line, row["indices"]]]


def _totals_table(found: View) -> str:
    from tabulate import tabulate

    names = ["batches", "samples", "tokens", "largest_cost", "rows", "fill"]
    ranks = found.ranks()
    shown = [name for name in names if name in ranks[0]]
    lines = [[r["epoch"], r["rank"], *(r[name] for name in shown)] for r in ranks]
    table = tabulate(lines, headers=["epoch", "rank", *shown], disable_numparse=True)
    return f"Per rank (rank all: the ranks together)\n{table}"


def _sources_table(found: View) -> str:
    """Each source's draws (and tokens) per rank and epoch, with its share, and the
    targets."""
    from tabulate import tabulate

    ranks = found.ranks()
    sources = len(found.targets["draws"])
    parts = []
    for unit, key in (("draws", "sources"), ("tokens", "source_tokens")):
        if unit not in found.targets:
            continue
        lines = []
        for r in ranks:
            total = sum(r[key])
            lines.append(
                [r["epoch"], r["rank"]]
                + [f"{c} ({c / total if total else 0:.{_DIGITS}f})" for c in r[key]]
            )
        lines.append(["", "target"] + [f"({float(t):.{_DIGITS}f})" for t in found.targets[unit]])
        headers = ["epoch", "rank", *(f"source {d}" for d in range(sources))]
        table = tabulate(lines, headers=headers, disable_numparse=True)
        parts.append(f"Sources: {unit} (share), against the target shares\n{table}")
    return "\n\n".join(parts)


def _jsonable(value: Any) -> Any:
    return [float(v) for v in value] if isinstance(value, list) else value


def json_text(
    found: View, *, source: str | None = None, extra: dict[str, Any] | None = None
) -> str:
    """One JSON object: ``sampler`` (the settings), ``rows`` (one per batch; each marked
    ``source`` when given), ``ranks``, ``targets`` (a mixture's), ``checks`` and
    ``warnings``, then ``extra``; each row and rank record on its own line."""
    marked = {"source": source} if source else {}
    value: dict[str, Any] = {
        "sampler": found.settings,
        "rows": [{**marked, **row} for row in found.rows()],
        "ranks": found.ranks(),
    }
    if found.targets:
        value["targets"] = {unit: _jsonable(shares) for unit, shares in found.targets.items()}
    value |= {"checks": found.checks(), "warnings": found.warnings, **(extra or {})}
    parts = []
    for key, item in value.items():
        if key in ("rows", "ranks"):
            lines = ",\n".join(f"    {json.dumps(entry)}" for entry in item)
            parts.append(f'  "{key}": [\n{lines}\n  ]' if lines else f'  "{key}": []')
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(item)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def csv_text(found: View, *, source: str | None = None) -> str:
    """The batches as CSV: one row per batch, the kind's columns, lists as JSON."""
    columns = _columns(found)
    output = io.StringIO()
    writer = csv.writer(output, lineterminator="\n")
    writer.writerow((["source"] if source else []) + columns)
    for row in found.rows():
        values = [json.dumps(row[n]) if isinstance(row[n], list) else row[n] for n in columns]
        writer.writerow(([source] if source else []) + values)
    return output.getvalue()
