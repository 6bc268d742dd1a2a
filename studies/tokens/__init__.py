"""Variable-length samples: batches under a token budget, against the ways in use.

Measures how ways of batching variable-length samples over ranks balance the ranks' steps
and fill their batches (:mod:`~studies.tokens.batching`) and what their batches cost under
a cost model, padded, quadratic or packed (:mod:`~studies.tokens.costing`), on a real and
a synthetic length distribution (:mod:`~studies.tokens.lengths`); and records the time and
memory to plan an epoch (:mod:`~studies.tokens.bench`), forward and backward passes timed
on CPU (:mod:`~studies.tokens.timing`) and whole epochs timed on a GPU
(:mod:`~studies.tokens.epoch_timing`, read back by :mod:`~studies.tokens.epoch_record`).
A cost is fitted to the CPU timing (:mod:`~studies.tokens.fitting`), and the attention
shapes each epoch asks for are counted (:mod:`~studies.tokens.shapes`). The
``token_batches`` and ``token_costs`` findings render them.
"""
