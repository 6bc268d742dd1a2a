"""The samplers inside the frameworks people train with: one supported path per framework.

Each module imports its framework when it is imported (``import samplers`` imports none of
them), and raises ``ImportError`` naming the extra to install when the framework is
missing:

* :mod:`samplers.integrations.accelerate`: ``prepare_data_loader(loader, accelerator)``, a
  loader accelerate treats as prepared without sharding it again, whose sampler state
  ``accelerator.save_state``/``load_state`` carry (extra ``accelerate``);
* :mod:`samplers.integrations.transformers`: ``ShardedTrainer``, a Hugging Face ``Trainer``
  that trains with a sampler of ours and keeps its state in the Trainer's checkpoints
  (extra ``transformers``);
* :mod:`samplers.integrations.lightning`: ``ShardedDataLoader``, a DataLoader Lightning's
  Trainer and Fabric leave as it is, whose ``set_epoch`` they call and whose sampler state
  Lightning's checkpoints carry (extra ``lightning``);
* :mod:`samplers.integrations.torchdata`: ``sampler_node(sampler)``, the sampler as the
  source node of a ``torchdata.nodes`` pipeline, saved and restored through our state
  (extra ``torchdata``);
* :mod:`samplers.integrations.ray`: ``prepare_data_loader(loader)``, a loader Ray Train
  leaves as it is, counting its epochs, whose state ``save_state``/``load_state`` carry
  through Ray Train's checkpoints (extra ``ray``).

:mod:`samplers.integrations.loop` holds what they share: finding the sampler of ours in a
loader and its state at the step the training loop reached.
"""
