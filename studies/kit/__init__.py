"""The guarantee kit (:mod:`samplers.testing`) put to use on our samplers and the peers.

:mod:`~studies.kit.cli` is ``dsampler check MODULE:FACTORY``: which guarantees any
sampler keeps, searched with hypothesis. :mod:`~studies.kit.peers` builds the samplers the
guarantee matrix compares (ours in every mode, torch's, torchdata's, Lightning's,
accelerate's and mmengine's) as factories for the kit; the ``guarantees`` finding checks
them.
"""
