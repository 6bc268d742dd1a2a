"""Variable-length samples: batches under a token budget, against the ways in use.

Measures how ways of batching variable-length samples over ranks balance the ranks' steps
and fill their batches (:mod:`~studies.tokens.batching`) and what their batches cost under
a cost model, padded, quadratic or packed (:mod:`~studies.tokens.costing`), on a real and
a synthetic length distribution (:mod:`~studies.tokens.lengths`); and records the time and
memory to plan an epoch (:mod:`~studies.tokens.bench`) and forward and backward passes
timed on CPU (:mod:`~studies.tokens.timing`). The ``token_batches`` and ``token_costs``
findings render them.
"""
