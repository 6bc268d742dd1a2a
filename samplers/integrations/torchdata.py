"""torchdata.nodes: a sampler of ours as a pipeline's source node, saved and restored exactly.

``torchdata.nodes.SamplerWrapper`` calls ``set_epoch`` before each epoch, and when the
sampler is stateful it saves ``sampler.state_dict()`` in the pipeline's state and restores
it with ``load_state_dict`` instead of replaying the epoch. The pipeline's prefetchers
record the source's state with each item they hold, so ``Loader.state_dict()`` is the
sampler's state at the item the loop received. :func:`sampler_node` builds that node
for a sampler of ours, starting at the sampler's epoch::

    node = sampler_node(DistributedBatchSampler(dataset, 4, tail="uneven"))
    loader = Loader(nodes.Mapper(node, fetch))
    state = loader.state_dict()  # ... later, in a new pipeline: loader.load_state_dict(state)

:class:`Loader` is ``torchdata.nodes.Loader`` with one fix, which a pipeline restored at
an epoch's end needs (see the class). ``StatefulDataLoader`` needs nothing: it calls our
``state_dict``/``load_state_dict`` itself.
"""

from __future__ import annotations

from typing import Any, TypeVar

from samplers.integrations.loop import BATCH_SAMPLERS, INDEX_SAMPLERS, framework

try:
    from torchdata import nodes
    from torchdata.nodes import SamplerWrapper
except ImportError as missing:  # pragma: no cover - the error names the extra
    raise framework("torchdata", "torchdata") from missing

__all__ = ["Loader", "sampler_node"]

_Item = TypeVar("_Item")


class Loader(nodes.Loader[_Item]):
    """``torchdata.nodes.Loader``, whose state after a restore at an epoch's end moves on.

    Guarantee: it iterates and saves exactly as ``torchdata.nodes.Loader``, except that
    once a pipeline restored from a state taken at an epoch's end (after its last item)
    starts the next epoch, its ``state_dict()`` is that epoch's, at the item the loop
    received. torchdata's own ``Loader`` (0.11) looks ahead for an item when it restores a
    state, caching the state it had before the look-ahead; finding none (the epoch was
    over), it starts the next epoch but keeps the cache, and returns it for every
    ``state_dict()`` after: a state taken in that epoch is the restored one, and a second
    restore repeats the items the loop had received. This one drops the cache when the
    look-ahead found nothing (with a torchdata without that cache it changes nothing).
    """

    def state_dict(self) -> dict[str, Any]:
        """The pipeline's state at the item the loop received (torchdata's), which a new
        pipeline continues exactly; after a restore at an epoch's end, the next epoch's
        state, never the restored one."""
        iterator = self._it
        if iterator is not None and getattr(iterator, "_cached_item", True) is None:
            # A state cached with no item looked ahead: the look-ahead found the epoch
            # over (a restore at its end), and the pipeline went on to the next epoch.
            iterator._cached_state_dict = None
        return super().state_dict()


def sampler_node(sampler: Any) -> SamplerWrapper[Any]:
    """The source node of a ``torchdata.nodes`` pipeline over ``sampler``.

    Guarantee: the node yields the sampler's items (indices, or batches of indices for a
    batch sampler of ours), epoch after epoch from the sampler's
    current epoch, setting each epoch on the sampler; a pipeline state taken at any item
    and loaded into a new pipeline over a new sampler of the same dataset continues that
    epoch exactly (on the same or another number of processes, with the new sampler's
    placement), because the node's state holds the sampler's state.
    """
    if not isinstance(sampler, (*BATCH_SAMPLERS, *INDEX_SAMPLERS)):
        ours = ", ".join(kind.__name__ for kind in (*INDEX_SAMPLERS, *BATCH_SAMPLERS))
        raise TypeError(
            f"sampler must be a sampler of samplers ({ours}, or a subclass), got "
            f"{type(sampler).__name__}"
        )
    return _Source(sampler, initial_epoch=sampler.epoch)


class _Source(SamplerWrapper[Any]):
    """``SamplerWrapper``, choosing the saved epoch before it loads a saved state: restored
    at an epoch's end, the pipeline's loader looks ahead, finds the epoch over and starts
    the next one; the empty rest of the saved epoch is intended, not a pass that "yields
    nothing" unasked (which the sampler warns about when its epoch was not chosen)."""

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        saved = None if initial_state is None else initial_state.get(self.SAMPLER_KEY)
        if isinstance(saved, dict) and type(saved.get("epoch")) is int:
            self.sampler.set_epoch(saved["epoch"])
        super().reset(initial_state)
