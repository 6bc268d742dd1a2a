"""Deliberately wrong samplers, one per guarantee of ``samplers.testing``, and right ones.

Each ``wrong_<guarantee>`` factory breaks its guarantee the way samplers written by hand
commonly do; ``tests/test_kit.py`` checks that the kit finds each violation with a
counterexample, and none in the project's samplers that hold the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from samplers import DistributedBatchSampler, DistributedSampler, DistributedTokenBatchSampler


class Strided(Sampler[int]):
    """``range(rank, N, W)`` of a seeded per-epoch permutation (exactly once, unequal)."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0) -> None:
        self.size, self.world, self.rank, self.seed = len(dataset), num_replicas, rank, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.order()[self.rank :: self.world])

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.world))


class PaddedLength(Strided):
    """Claims the padded length ``ceil(N / W)`` but yields its unpadded share."""

    def __len__(self) -> int:
        return math.ceil(self.size / self.world)


class Contiguous(Strided):
    """Contiguous chunks of ``ceil(N / W)`` of the order: the last rank gets the rest."""

    def __iter__(self) -> Iterator[int]:
        chunk = math.ceil(self.size / self.world)
        return iter(self.order()[self.rank * chunk : (self.rank + 1) * chunk])

    def __len__(self) -> int:
        chunk = math.ceil(self.size / self.world)
        return len(range(self.size)[self.rank * chunk : (self.rank + 1) * chunk])


class Truncated(Strided):
    """Equal shares of ``N // W`` by truncating the order, so its tail is never seen."""

    def __iter__(self) -> Iterator[int]:
        share = self.size // self.world
        return iter(self.order()[self.rank * share : (self.rank + 1) * share])

    def __len__(self) -> int:
        return self.size // self.world


class SeededPerRank(Strided):
    """Every rank draws its own permutation (seed + rank): the ranks' parts overlap."""

    def order(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch + 1000 * self.rank)
        return torch.randperm(self.size, generator=generator).tolist()


class IgnoresEpoch(Strided):
    """Has ``set_epoch`` but draws the permutation from the seed alone."""

    def order(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randperm(self.size, generator=generator).tolist()


class GlobalRandom(Strided):
    """Draws the permutation from torch's global random number generator."""

    def order(self) -> list[int]:
        return torch.randperm(self.size).tolist()


class HashSeeded(Strided):
    """Seeds its permutation from a string's hash, which differs between processes."""

    def order(self) -> list[int]:
        seed = hash(f"seed-{self.seed}") % 2**31 + self.epoch
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(seed)).tolist()


class ShareBatches(Sampler[list[int]]):
    """Batches the rank's strided share: the share's last batch may hold one sample."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, batch_size: int) -> None:
        self.share = list(range(rank, len(dataset), num_replicas))
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.share), self.batch_size):
            yield self.share[start : start + self.batch_size]

    def __len__(self) -> int:
        return math.ceil(len(self.share) / self.batch_size)


class CountingResume(Strided):
    """Saves how many indices it yielded, counting the one it is about to yield too."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas, rank, seed)
        self.yielded = 0
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        order = self.order()[self.rank :: self.world]
        self.yielded, skip, self.skip = self.skip, self.skip, 0
        return self._rest(order[skip:])

    def _rest(self, rest: list[int]) -> Iterator[int]:
        for index in rest:
            self.yielded += 1
            yield index

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "yielded": self.yielded + self.off_by}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.skip = state["epoch"], state["yielded"]

    off_by = 1


class PerRankResume(CountingResume):
    """Saves the rank's own count: exact on the same world size, wrong on another."""

    off_by = 0


class ReplaysAfterEpochEnd(CountingResume):
    """Its state after the epoch's last index says "a fresh epoch": resumed with the usual
    loop (load, then ``set_epoch`` of the saved epoch), the epoch is replayed."""

    off_by = 0

    def state_dict(self) -> dict[str, int]:
        finished = self.yielded == len(self)
        return {"epoch": self.epoch, "yielded": 0 if finished else self.yielded}


class RaisesForTinyDatasets(Strided):
    """Refuses a dataset with fewer samples than ranks (as some samplers assert)."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0) -> None:
        if len(dataset) < num_replicas:
            raise AssertionError(f"{len(dataset)} samples for {num_replicas} ranks")
        super().__init__(dataset, num_replicas, rank, seed)


class IgnoresSeed(Strided):
    """Takes a seed but draws its permutation from the epoch alone."""

    def order(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()


class Seed32(Strided):
    """Keeps its seed in 32 bits (as ``numpy.random.seed`` must): seeds ``2**32`` apart
    give one order."""

    def order(self) -> list[int]:
        generator = torch.Generator().manual_seed((self.seed + self.epoch) % 2**32)
        return torch.randperm(self.size, generator=generator).tolist()


class StaleAfterResume(CountingResume):
    """Resumes the epoch right, but keeps skipping in the epochs after it."""

    off_by = 0

    def __iter__(self) -> Iterator[int]:
        order = self.order()[self.rank :: self.world]
        self.yielded, skip = self.skip, self.skip
        return self._rest(order[skip:])


class LenAfterResume(CountingResume):
    """Resumes right, but its ``len()`` still says the whole share after loading."""

    off_by = 0

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.world))


class LenAfterFinished(CountingResume):
    """Resumes right and its ``len()`` counts the rest, except after a state saved at the
    epoch's end: it then says the whole share (as if the next epoch came), and yields
    nothing."""

    off_by = 0

    def __len__(self) -> int:
        share = len(range(self.rank, self.size, self.world))
        return share - self.skip if self.skip < share else share


class EveryOtherEpoch(Strided):
    """Reshuffles at every ``set_epoch``, but with only two orders: epoch ``e + 2``
    repeats epoch ``e``."""

    def order(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch % 2)
        return torch.randperm(self.size, generator=generator).tolist()


def len_after_finished(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return LenAfterFinished(dataset, num_replicas, rank, seed)


def every_other_epoch(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return EveryOtherEpoch(dataset, num_replicas, rank, seed)


class UnevenAfterResume(Strided):
    """Pads every share to ``ceil(N / W)`` (equal counts), and saves the global position;
    resumed, it deals the rest of the order round-robin without padding (unequal counts on
    a world size that does not divide the rest)."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas, rank, seed)
        self.start = self.yielded = 0

    def _share(self) -> list[int]:
        order = self.order()
        if self.start:
            return order[self.start :][self.rank :: self.world]
        total = math.ceil(self.size / self.world) * self.world
        return [order[i % self.size] for i in range(self.rank, total, self.world)]

    def __iter__(self) -> Iterator[int]:
        share, self.start, self.yielded = self._share(), 0, 0
        for index in share:
            self.yielded += 1
            yield index

    def __len__(self) -> int:
        return len(self._share())

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.yielded * self.world}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.start = state["epoch"], state["position"]


def uneven_after_resume(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return UnevenAfterResume(dataset, num_replicas, rank, seed)


class StateFailsAtEnd(CountingResume):
    """Resumes right, but its ``state_dict()`` raises once the rank's share is all yielded
    (builds and iterates every configuration: the error is the resume guarantees')."""

    off_by = 0

    def state_dict(self) -> dict[str, int]:
        if self.yielded and self.yielded == len(self):
            raise RuntimeError("no state after the last index")
        return super().state_dict()


def state_fails_at_end(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return StateFailsAtEnd(dataset, num_replicas, rank, seed)


def wrong_len_matches_iteration(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return PaddedLength(dataset, num_replicas, rank, seed)


def wrong_equal_length_across_ranks(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return Strided(dataset, num_replicas, rank, seed)


def wrong_equal_batch_counts(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return Contiguous(dataset, num_replicas, rank, seed)


def wrong_covers_dataset(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return Truncated(dataset, num_replicas, rank, seed)


def wrong_exactly_once(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return SeededPerRank(dataset, num_replicas, rank, seed)


def wrong_no_tiny_batch(dataset: Any, num_replicas: int, rank: int, batch_size: int) -> Any:
    return ShareBatches(dataset, num_replicas, rank, batch_size)


def wrong_reshuffles_with_set_epoch(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return IgnoresEpoch(dataset, num_replicas, rank, seed)


def wrong_deterministic(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return GlobalRandom(dataset, num_replicas, rank, seed)


def hash_seeded(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return HashSeeded(dataset, num_replicas, rank, seed)


def wrong_resumes_same_world_size(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return CountingResume(dataset, num_replicas, rank, seed)


def wrong_resumes_other_world_size(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return PerRankResume(dataset, num_replicas, rank, seed)


def wrong_handles_every_size(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return RaisesForTinyDatasets(dataset, num_replicas, rank, seed)


def wrong_seed_changes_order(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return IgnoresSeed(dataset, num_replicas, rank, seed)


def seed_32(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return Seed32(dataset, num_replicas, rank, seed)


def replays_after_epoch_end(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return ReplaysAfterEpochEnd(dataset, num_replicas, rank, seed)


def stale_after_resume(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return StaleAfterResume(dataset, num_replicas, rank, seed)


def per_rank_resume(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return PerRankResume(dataset, num_replicas, rank, seed)


def len_after_resume(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return LenAfterResume(dataset, num_replicas, rank, seed)


def ours_uneven(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas, rank, seed=seed, tail="uneven")


def ours_batches_pad(dataset: Any, num_replicas: int, rank: int, seed: int, batch_size: int) -> Any:
    return DistributedBatchSampler(dataset, batch_size, num_replicas, rank, seed=seed)


def not_a_sampler(**arguments: Any) -> Any:
    return 42


class _Hanging:
    """Yields nothing, ever, for datasets of more than 100 samples (for --timeout)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Any:
        import time

        if self.size > 100:
            time.sleep(3600)
        return iter(range(self.size))

    def __len__(self) -> int:
        return self.size


def hanging(dataset: Any) -> _Hanging:
    """A sampler that hangs on datasets of more than 100 samples."""
    return _Hanging(len(dataset))


def needs_world_size(dataset: Any, world_size: int, rank: int) -> Any:
    """Names the world size ``world_size``, which the kit does not pass."""
    return range(rank, len(dataset), world_size)


class _Endless(Strided):
    """Its iterator never ends (``while True: yield 0``), on any dataset or only on those
    of more than 100 samples."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, always: bool) -> None:
        super().__init__(dataset, num_replicas, rank)
        self.always = always

    def __iter__(self) -> Iterator[int]:
        if self.always or self.size > 100:
            while True:
                yield 0
        yield from super().__iter__()


def endless(dataset: Any, num_replicas: int, rank: int) -> Any:
    """A sampler whose iterator never ends."""
    return _Endless(dataset, num_replicas, rank, always=True)


def endless_when_large(dataset: Any, num_replicas: int, rank: int) -> Any:
    """Never ends on datasets of more than 100 samples (the kit's probe is smaller)."""
    return _Endless(dataset, num_replicas, rank, always=False)


class _Blocking(Strided):
    """Its iterator blocks for good on its first item (waits on an event never set)."""

    def __iter__(self) -> Iterator[int]:
        import threading

        threading.Event().wait()
        yield from super().__iter__()


def blocking(dataset: Any, num_replicas: int, rank: int) -> Any:
    """A sampler whose iterator blocks."""
    return _Blocking(dataset, num_replicas, rank)


class AcceptsAnyCount(CountingResume):
    """Resumes right, but loads any count, even one past its share or below zero."""


# Around the loop: threads, a second iterator, loaders with workers, bool-likes ----------------


class PlansUnderfoot(Strided):
    """Its state is briefly unset while it plans the next items, so a state read from
    another thread in that moment is no position at all."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas, rank, seed)
        self.position: int | None = 0
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        import time

        share = self.order()[self.rank :: self.world][self.skip :]
        self.position, self.skip = self.skip, 0
        for index in share:
            done = self.position
            self.position = None  # planning
            time.sleep(0.005)  # long enough for the reader to be scheduled on a loaded machine
            self.position = done
            yield index
            self.position = (self.position or 0) + 1

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.skip = state["epoch"], state["position"]


class ForgetsTheLoop(CountingResume):
    """Counts per iteration: a second ``iter()`` (a peek) restarts the count the state is
    taken from, so the loop's progress is lost."""

    off_by = 0


def wrong_refuses_impossible_states(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return AcceptsAnyCount(dataset, num_replicas, rank, seed)


class IgnoresLastEpoch(DistributedSampler):
    """Reads a version-1 state as the first decoder did: without its ``last_epoch``, an
    ended epoch loads as a fresh one and is replayed."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("version") == 1:
            state_dict = {**state_dict, "last_epoch": None}
        super().load_state_dict(state_dict)


def wrong_loads_version_1_states(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return IgnoresLastEpoch(dataset, num_replicas, rank, seed=seed, tail="uneven")


class CountsEveryIter(Strided):
    """``auto_epoch``: every ``iter()`` after one that was advanced is the next epoch, even
    one that only a loader's workers prefetched from and the loop never received."""

    auto_epoch = True

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas, rank, seed)
        self.started = self.chosen = self.finished = False
        self.yielded = self.skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.chosen = epoch, True

    def __iter__(self) -> Iterator[int]:
        auto = self.auto_epoch and not self.chosen
        if self.finished:
            self.finished = False
            if not auto:
                self.chosen = False
                return iter([])
            self.epoch += 1
        elif self.started and auto:
            self.epoch += 1
        self.chosen = self.started = False
        share = self.order()[self.rank :: self.world]
        self.yielded, skip, self.skip = self.skip, self.skip, 0
        return self._rest(share[skip:])

    def _rest(self, rest: list[int]) -> Iterator[int]:
        self.started = True
        for index in rest:
            self.yielded += 1
            yield index

    def state_dict(self) -> dict[str, Any]:
        finished = self.started and self.yielded >= len(self)
        return {"epoch": self.epoch, "yielded": self.yielded, "finished": finished}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.skip, self.finished = state["epoch"], state["yielded"], state["finished"]
        if self.finished:
            self.skip = 0


class ShuffleIsTrue(Strided):
    """Shuffles only when ``shuffle is True``: ``numpy.True_`` or ``1`` silently stop it."""

    shuffle = True

    def order(self) -> list[int]:
        if self.shuffle is True:
            return super().order()
        return list(range(self.size))


def wrong_state_read_concurrently(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return PlansUnderfoot(dataset, num_replicas, rank, seed)


def wrong_second_iterator(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return ForgetsTheLoop(dataset, num_replicas, rank, seed)


def wrong_loader_epochs(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return CountsEveryIter(dataset, num_replicas, rank, seed)


def wrong_bool_like_attributes(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return ShuffleIsTrue(dataset, num_replicas, rank, seed)


def ours_auto_epoch(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    return DistributedSampler(dataset, num_replicas, rank, seed=seed, auto_epoch=True)


def ours_tokens(dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    lengths = [1 + index % 7 for index in dataset]
    return DistributedTokenBatchSampler(lengths, 16, num_replicas, rank, seed=seed, auto_epoch=True)
