"""Helpers of no topic, under the rest of the study; they measure nothing themselves.

:mod:`~studies.common.extras` (which optional extra to install, in one error),
:mod:`~studies.common.figures` (pictures rendered to byte-identical PNGs),
:mod:`~studies.common.interrupts` (SIGTERM handled as Ctrl-C),
:mod:`~studies.common.options` (the option types and parser the ``dsampler`` commands
share) and :mod:`~studies.common.parts` (the report's parts run side by side in worker
processes). None of them imports anything else of the study.
"""
