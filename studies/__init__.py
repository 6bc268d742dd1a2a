"""The study: what ``DistributedSampler`` and ours hand each rank, measured, and the reports.

Arranged in layers, each importing only from itself and the layers below it
(``ARCHITECTURE.md`` draws the map and the layers; ``tests/test_architecture.py`` checks
both against the code): :mod:`studies.common`, helpers of no topic; :mod:`studies.core`,
the core study (cases run in-process, summarized and judged); :mod:`studies.bench`, the
samplers' speed; the topics :mod:`studies.tokens`, :mod:`studies.mixtures`,
:mod:`studies.engines` and :mod:`studies.kit`; :mod:`studies.findings`, the reports'
sections; and on top :mod:`studies.report` and the ``dsampler`` command
(:mod:`studies.cli`, :mod:`studies.console`).
"""
