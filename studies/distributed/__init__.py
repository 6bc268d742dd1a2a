"""The study in real ``torch.distributed`` processes.

* :mod:`~studies.distributed.local_ranks`: start ranks on this machine in a gloo group on
  127.0.0.1, run one function in each, and never hang.
* :mod:`~studies.distributed.case_runs`: run cases in those ranks and collect what each
  rank's DataLoader yielded, as the simulation's tidy rows.
* :mod:`~studies.distributed.versus_simulation`: compare those rows with the simulation.
* :mod:`~studies.distributed.collectives`: distributed evaluation through real collectives.
* :mod:`~studies.distributed.torchrun`: the same observation inside a job that ``torchrun``
  started, on any backend and any number of nodes (``dsampler observe``).
"""
