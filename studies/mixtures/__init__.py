"""Several datasets mixed by weight: ours against the ways of mixing in use.

:mod:`~studies.mixtures.ways` builds each way of mixing over the finding's sources (ours,
a Megatron-style blend, torchdata's, Hugging Face ``datasets``', a weighted sampler in our
wrapper, the stock sampler over a ``ConcatDataset``); :mod:`~studies.mixtures.bench`
measures their time and memory to the first index, and ours over a whole epoch, at scale
and in fresh processes, and records them. The ``mixtures`` and ``speed`` findings render
them.

Packed into rows of tokens: :mod:`~studies.mixtures.corpus` (the sources as documents of
tokens), :mod:`~studies.mixtures.packing` (ours, a Megatron-style blend over concatenated
and chunked documents, ``datasets.interleave_datasets`` then TRL's ``pack_dataset``),
:mod:`~studies.mixtures.token_measures` (what their rows did, read from the token ids) and
:mod:`~studies.mixtures.packed_tables` (the tables the ``mixtures`` finding shows).
"""
