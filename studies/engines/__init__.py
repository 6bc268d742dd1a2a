"""The study in real processes: ``torch.distributed`` ranks, torchrun, Ray, frameworks.

What real ranks, a ``torchrun`` job, Ray Train and the training frameworks hand each rank,
observed, and set against what the in-process simulation predicts.

* :mod:`~studies.engines.local_ranks`: start ranks on this machine in a gloo group on
  127.0.0.1, run one function in each, and never hang.
* :mod:`~studies.engines.case_runs`: run cases in those ranks and collect what each
  rank's DataLoader yielded, as the simulation's tidy rows.
* :mod:`~studies.engines.versus_simulation`: compare those rows with the simulation.
* :mod:`~studies.engines.collectives`: distributed evaluation through real collectives.
* :mod:`~studies.engines.unsharded_evaluation`: exact evaluation, ``tail="uneven"`` and
  ``gather_unsharded``, in real processes.
* :mod:`~studies.engines.collection`: per-sample results collected from the ranks, three
  ways.
* :mod:`~studies.engines.mesh_runs`: what each rank of a data x tensor parallel mesh reads.
* :mod:`~studies.engines.torchrun`: the same observation inside a job that ``torchrun``
  started, on any backend and any number of nodes (``dsampler observe``).
* :mod:`~studies.engines.frameworks`: what accelerate, the Hugging Face Trainer,
  Lightning and torchdata do to a sampler.
* :mod:`~studies.engines.ray_runs` and :mod:`~studies.engines.ray_resized`: what Ray
  Train does to a loader, and a run that loses a worker and goes on with fewer.
"""
