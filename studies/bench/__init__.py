"""``dsampler bench``: time and memory of the samplers against bare ``torch.randperm``.

:mod:`~studies.bench.variants` (what is measured), :mod:`~studies.bench.probe` (one
measurement in a fresh process), :mod:`~studies.bench.grid` (all of them, side by side),
:mod:`~studies.bench.tables` (ratios and views), :mod:`~studies.bench.plot` (the picture)
and :mod:`~studies.bench.cli` (the subcommand).
"""
