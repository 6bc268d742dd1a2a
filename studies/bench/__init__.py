"""``dsampler bench``: time and memory of the samplers against bare ``torch.randperm``.

:mod:`~studies.bench.variants` (what is measured), :mod:`~studies.bench.probe` (one
measurement in a fresh process), :mod:`~studies.bench.grid` (all of them, side by side),
:mod:`~studies.bench.tables` (ratios and views), :mod:`~studies.bench.plot` (the picture),
:mod:`~studies.bench.record` (the recorded run the speed finding renders) and
:mod:`~studies.bench.cli` (the subcommand). The token and mixture benchmarks
(:mod:`studies.tokens.bench`, :mod:`studies.mixtures.bench`) measure in fresh processes
with its :func:`~studies.bench.probe.in_fresh_interpreter` and record its machine facts,
as does :mod:`~studies.bench.packed` (the packed sampler and the packed mixture against
the token sampler, ``python -m studies.bench.packed --record``).
"""
