"""The stock sampler's sizes, in exact integer arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ShardSizes", "ceil_div"]


def ceil_div(numerator: int, denominator: int) -> int:
    """``ceil(numerator / denominator)`` in exact integer arithmetic (``denominator > 0``)."""
    return -(-numerator // denominator)


@dataclass(frozen=True)
class ShardSizes:
    """How many samples the stock sampler hands out in total and per rank.

    ``num_samples`` is each rank's share and ``total_size = num_samples * world_size``.
    Without ``drop_last`` the order is padded up to ``ceil(N / W) * W``; with it, the
    order is trimmed down to ``floor(N / W) * W``.
    """

    #: ``N``, the number of samples of the epoch order.
    dataset_size: int
    #: ``W``, the number of ranks sharing it.
    world_size: int
    #: Whether the order is trimmed to a multiple of ``W`` (else padded up to one).
    drop_last: bool
    #: Each rank's share: the samples it receives per epoch.
    num_samples: int
    #: The length of the padded or trimmed order: ``num_samples * world_size``, unless a
    #: sampler's attributes override it (see :meth:`given`).
    total_size: int

    @classmethod
    def of(cls, dataset_size: int, world_size: int, drop_last: bool) -> ShardSizes:
        """Compute the sizes the stock sampler computes, in exact integer arithmetic."""
        if drop_last:
            num_samples = dataset_size // world_size
        else:
            num_samples = ceil_div(dataset_size, world_size)
        return cls(dataset_size, world_size, drop_last, num_samples, num_samples * world_size)

    @classmethod
    def given(
        cls,
        dataset_size: int,
        world_size: int,
        drop_last: bool,
        *,
        rank: int,
        num_samples: int,
        total_size: int,
    ) -> ShardSizes:
        """Sizes as a sampler's ``num_samples``/``total_size`` attributes hold them.

        The stock sampler computes both at construction and trusts them when iterating,
        so a subclass may override them. Such an override works there when it pads
        (``total_size >= N`` without ``drop_last``) or trims (``total_size <= N`` with
        it) to a length that gives ``rank`` exactly ``num_samples`` positions, and the
        same overrides are accepted here. Any other pair raises the ``AssertionError``
        the stock sampler raises, starting with its wording and then giving the reason
        (typically: the dataset or ``world_size`` changed after the sizes were computed).
        """
        natural = cls.of(dataset_size, world_size, drop_last)
        if (num_samples, total_size) == (natural.num_samples, natural.total_size):
            return natural
        if drop_last:
            fits = 0 <= total_size <= dataset_size
        else:
            fits = total_size >= dataset_size and (dataset_size > 0 or total_size == 0)
        received = max(ceil_div(total_size - rank, world_size), 0) if fits else None
        if not fits or received != num_samples:
            stock = (
                f"Number of subsampled indices ({received}) does not match num_samples "
                f"({num_samples})"
                if fits
                else _stock_length_message(dataset_size, drop_last, total_size)
            )
            raise AssertionError(
                f"{stock}: num_samples={num_samples} and total_size={total_size} do not fit "
                f"{dataset_size} samples over num_replicas={world_size} with "
                f"drop_last={drop_last} (expected num_samples={natural.num_samples}, "
                f"total_size={natural.total_size}); they are computed when the sampler is "
                "built, so build a new sampler after changing the dataset or num_replicas"
            )
        return cls(dataset_size, world_size, drop_last, num_samples, total_size)

    @property
    def padding(self) -> int:
        """Positions filled by repeating the head of the epoch order."""
        return max(self.total_size - self.dataset_size, 0)

    @property
    def dropped(self) -> int:
        """Samples at the tail of the epoch order that no rank receives."""
        return max(self.dataset_size - self.total_size, 0)


def _stock_length_message(dataset_size: int, drop_last: bool, total_size: int) -> str:
    """The stock sampler's wording for a padded/trimmed order of the wrong length.

    Its list slicing gives, for sizes that do not fit, the lengths computed here (a
    negative padding slices from the end), so the message quotes the same numbers.
    """
    if drop_last:
        length = len(range(dataset_size)[:total_size])
    else:
        padding = total_size - dataset_size
        length = dataset_size + (
            len(range(dataset_size)[:padding]) if padding <= dataset_size else padding
        )
    return f"Number of indices ({length}) does not match total_size ({total_size})"
