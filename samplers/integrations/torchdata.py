"""torchdata.nodes: a sampler of ours as a pipeline's source node, saved and restored exactly.

``torchdata.nodes.SamplerWrapper`` calls ``set_epoch`` before each epoch, and when the
sampler is stateful it saves ``sampler.state_dict()`` in the pipeline's state and restores
it with ``load_state_dict`` instead of replaying the epoch. The pipeline's prefetchers
record the source's state with each item they hold, so ``Loader.state_dict()`` is the
sampler's state at the item the loop received. :func:`sampler_node` builds that node
for a sampler of ours, starting at the sampler's epoch::

    node = sampler_node(DistributedBatchSampler(dataset, 4, tail="uneven"))
    loader = nodes.Loader(nodes.Mapper(node, fetch))
    state = loader.state_dict()  # ... later, in a new pipeline: loader.load_state_dict(state)

``StatefulDataLoader`` needs nothing: it calls our ``state_dict``/``load_state_dict`` itself.
"""

from __future__ import annotations

from typing import Any

from samplers.integrations.loop import BATCH_SAMPLERS, INDEX_SAMPLERS, framework

try:
    from torchdata.nodes import SamplerWrapper
except ImportError as missing:  # pragma: no cover - the error names the extra
    raise framework("torchdata", "torchdata") from missing

__all__ = ["sampler_node"]


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
    return SamplerWrapper(sampler, initial_epoch=sampler.epoch)
