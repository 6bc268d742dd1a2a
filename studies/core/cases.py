"""What a study case is, the grid of cases the reports cover, and the shared experiment."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

Implementation = Literal["torch", "samplers", "none"]
Tail = Literal["pad", "drop", "uneven"]
SamplerKind = Literal["index", "batch"]

#: ``torch``: the stock sampler; ``samplers``: ours; ``none``: no sampler at all, so every
#: rank's DataLoader iterates the whole dataset, in order unless the case shuffles (then
#: with the DataLoader's own generator, seeded with the case's seed).
IMPLEMENTATIONS: tuple[Implementation, ...] = ("torch", "samplers", "none")
#: What a sampler does with the samples that do not divide evenly: ``pad`` (the stock
#: sampler without drop_last), ``drop`` (with it) and, ours only, ``uneven``.
TAILS: tuple[Tail, ...] = ("pad", "drop", "uneven")
#: ``index``: a sampler of indices, batched by the DataLoader; ``batch``: ours
#: ``DistributedBatchSampler``, passed as the DataLoader's ``batch_sampler``.
SAMPLER_KINDS: tuple[SamplerKind, ...] = ("index", "batch")

#: The columns that identify a case in every table (``epochs`` is how long it runs).
CASE_COLUMNS = (
    "implementation",
    "sampler_kind",
    "tail",
    "dataset_size",
    "world_size",
    "batch_size",
    "shuffle",
    "seed",
    "drop_last",
    "loader_drop_last",
    "set_epoch",
)


@dataclass(frozen=True)
class Case:
    """One configuration, as a user would write it in a training script.

    ``drop_last`` is the sampler's flag and ``loader_drop_last`` the DataLoader's; they
    drop different things (the tail of the epoch order vs. each rank's last short batch).

    ``tail`` is what the sampler does with the samples that do not divide evenly; it
    follows from ``drop_last`` (``"drop"`` or ``"pad"``, which ``tail`` may repeat; it is
    then kept as None), and ``"uneven"`` is ours alone (``implementation="samplers"``,
    with ``drop_last`` False). ``sampler``
    ``"batch"`` is our ``DistributedBatchSampler`` (ours alone, without the DataLoader's
    ``drop_last``: it makes the batches). A case without a sampler has neither: both are
    ``None``.
    """

    dataset_size: int
    world_size: int
    batch_size: int
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = False
    loader_drop_last: bool = False
    set_epoch: bool = True
    epochs: int = 2
    implementation: Implementation = "torch"
    tail: Tail | None = None
    sampler: SamplerKind | None = None

    def __post_init__(self) -> None:
        _require_int("dataset_size", self.dataset_size, minimum=0)
        for name in ("world_size", "batch_size", "epochs"):
            _require_int(name, getattr(self, name), minimum=1)
        _require_int("seed", self.seed, minimum=-(2**63))
        if self.seed + self.epochs - 1 > 2**64 - 1:
            raise ValueError(
                f"seed must keep seed + epoch within [-2**63, 2**64 - 1] for all "
                f"{self.epochs} epochs, got seed={self.seed}"
            )
        for name in ("shuffle", "drop_last", "loader_drop_last", "set_epoch"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"implementation must be one of {', '.join(IMPLEMENTATIONS)}, "
                f"got {self.implementation!r}"
            )
        self._settle_sampler()

    def _settle_sampler(self) -> None:
        """Check ``tail`` and ``sampler`` against the rest of the case."""
        if self.implementation == "none":
            for name in ("tail", "sampler"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} needs a sampler, got {name}={getattr(self, name)!r} with "
                        "implementation none"
                    )
            return
        implied = "drop" if self.drop_last else "pad"
        if self.tail is not None:
            if self.tail not in TAILS:
                raise ValueError(f"tail must be one of {', '.join(TAILS)}, got {self.tail!r}")
            if self.tail != implied and not (self.tail == "uneven" and not self.drop_last):
                raise ValueError(f"tail={self.tail!r} contradicts drop_last={self.drop_last}")
            if self.tail == implied:  # said by drop_last already: kept once, there
                object.__setattr__(self, "tail", None)
        if self.sampler is not None and self.sampler not in SAMPLER_KINDS:
            raise ValueError(
                f"sampler must be one of {', '.join(SAMPLER_KINDS)}, got {self.sampler!r}"
            )
        if self.implementation != "samplers" and not self.stock_layout:
            raise ValueError(
                f"tail={self.layout_tail!r} and sampler={self.sampler_kind!r} need "
                f"implementation samplers (ours), got {self.implementation!r}"
            )
        if self.sampler_kind == "batch" and self.loader_drop_last:
            raise ValueError(
                "loader_drop_last needs sampler index: the batch sampler makes the batches"
            )

    @property
    def layout_tail(self) -> Tail | None:
        """The sampler's tail policy: ``tail`` when given, else from ``drop_last``; None
        without a sampler."""
        if self.implementation == "none":
            return None
        if self.tail is not None:
            return self.tail
        return "drop" if self.drop_last else "pad"

    @property
    def sampler_kind(self) -> SamplerKind | None:
        """``"index"`` (the default) or ``"batch"``; None without a sampler."""
        if self.implementation == "none":
            return None
        return self.sampler or "index"

    @property
    def stock_layout(self) -> bool:
        """Whether the case's ranks get the stock sampler's layout (strided shares padded
        or trimmed to one length, batched by the DataLoader), or no sampler at all."""
        return self.layout_tail != "uneven" and self.sampler_kind != "batch"

    def key(self) -> dict[str, object]:
        """The case's identifying columns, in table order (``tail`` and ``sampler_kind`` as
        the sampler applies them: :attr:`layout_tail`, :attr:`sampler_kind`)."""
        values = asdict(self)
        values.update(tail=self.layout_tail, sampler_kind=self.sampler_kind)
        return {name: values[name] for name in CASE_COLUMNS}

    def using(self, implementation: Implementation) -> Case:
        """The same configuration run by another implementation."""
        return replace(self, implementation=implementation)


def _require_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


CASE_FIELDS = tuple(field.name for field in fields(Case))


def grid() -> list[Case]:
    """The declared grid the reports cover, for both the stock sampler and ours.

    Dataset sizes straddle multiples of the world sizes (tiny, odd, exact); batch sizes
    include one that leaves a last batch of one sample.
    """
    cases = []
    for size, world, batch, shuffle, drop_last, loader_drop_last, set_epoch in itertools.product(
        (1, 3, 5, 6, 8, 10, 16, 17, 33),
        (1, 2, 3, 4, 8),
        (1, 4),
        (True, False),
        (False, True),
        (False, True),
        (True, False),
    ):
        if not shuffle and not set_epoch:
            continue  # set_epoch only matters when shuffling
        for implementation in ("torch", "samplers"):
            cases.append(
                Case(
                    size,
                    world,
                    batch,
                    shuffle=shuffle,
                    drop_last=drop_last,
                    loader_drop_last=loader_drop_last,
                    set_epoch=set_epoch,
                    implementation=implementation,
                )
            )
    return cases


#: The blog post's experiment (see ``studies/data/blog_post_output.json`` for its source),
#: each run as its printed output shows it was run: 2 ranks, batch size 4, seed 0, two
#: epochs. Labels are the post's own case numbers; each entry is (label, case). Case 1 has
#: no sampler and an unshuffled DataLoader; cases 2, 4, 6 and 7 ran without ``set_epoch``
#: (their second epoch repeats the first), 3 with it; 5 ran without (5a), then with (5b).
EXPERIMENT: tuple[tuple[str, Case], ...] = (
    (
        "1",
        Case(8, 2, 4, shuffle=False, loader_drop_last=True, set_epoch=False, implementation="none"),
    ),
    ("2", Case(8, 2, 4, loader_drop_last=True, set_epoch=False)),
    ("3", Case(8, 2, 4, loader_drop_last=True, set_epoch=True)),
    ("4a", Case(6, 2, 4, loader_drop_last=False, set_epoch=False)),
    ("4b", Case(6, 2, 4, loader_drop_last=True, set_epoch=False)),
    ("5a", Case(5, 2, 4, set_epoch=False)),
    ("5b", Case(5, 2, 4, set_epoch=True)),
    ("6", Case(10, 2, 4, loader_drop_last=False, set_epoch=False)),
    ("7", Case(10, 2, 4, loader_drop_last=True, set_epoch=False)),
)

#: What each experiment run is, in words, by label.
EXPERIMENT_DESCRIPTIONS: dict[str, str] = {
    "1": "8 samples, no DistributedSampler, DataLoader without shuffling",
    "2": "8 samples, DistributedSampler, no set_epoch",
    "3": "8 samples, DistributedSampler, set_epoch",
    "4a": "6 samples, DataLoader drop_last=False, no set_epoch",
    "4b": "6 samples, DataLoader drop_last=True, no set_epoch",
    "5a": "5 samples (padded), no set_epoch",
    "5b": "5 samples (padded), set_epoch",
    "6": "10 samples, DataLoader drop_last=False, no set_epoch",
    "7": "10 samples, DataLoader drop_last=True, no set_epoch",
}
