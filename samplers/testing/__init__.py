"""Check any distributed sampler against the guarantees this project's samplers give.

Import it explicitly (``import samplers.testing``); ``import samplers`` does not, and the
search (:func:`check`) needs the ``study`` extra (hypothesis and pandas), imported only
when it runs.

A *factory* is a callable taking the keyword arguments ``dataset``, ``num_replicas``,
``rank``, ``seed`` and ``batch_size`` (it is passed only those its signature names, or
all of them when it takes ``**kwargs``) and returning a sampler that yields dataset
indices, or a batch sampler that yields lists of indices; the kit tells them apart by
the first item they yield, never by an epoch that yields nothing. The dataset is
``range(dataset_size)``.

Each guarantee is a plain function ``(factory, configuration) -> None`` that raises
:class:`Violation` (an ``AssertionError``) naming the rank, the epoch and what went wrong,
:class:`Unsupported` when the sampler lacks what the guarantee needs (``set_epoch``,
``state_dict``, ``__len__``), or :class:`Rejected` when the factory raises for the
configuration (any other error of the sampler passes through); call them from your
own tests. :func:`check` searches configurations for each guarantee with hypothesis and
reports the smallest counterexample it shrinks to.

Modules: :mod:`~samplers.testing.registry` (every guarantee's id, statement and check,
registered once), :mod:`~samplers.testing.epochs`, :mod:`~samplers.testing.resumes` and
:mod:`~samplers.testing.states` and :mod:`~samplers.testing.usage` (the checks),
:mod:`~samplers.testing.mixtures` (the guarantees of samplers that mix datasets by weight,
and their search), :mod:`~samplers.testing.running` (building and running a factory's
samplers, within a time limit and a bound on what an iteration may yield),
:mod:`~samplers.testing.factories`
(factories by name, and the fresh-process comparison) and :mod:`~samplers.testing.search`
(the search).

Example::

    >>> from samplers import DistributedSampler
    >>> from samplers.testing import Configuration, exactly_once
    >>> def factory(dataset, num_replicas, rank, seed):
    ...     return DistributedSampler(dataset, num_replicas, rank, seed=seed, tail="uneven")
    >>> exactly_once(factory, Configuration(dataset_size=10, world_size=4))
"""

# isort: off
# The guarantees register as their modules are imported: this is the order the kit
# reports them in.
from samplers.testing.epochs import (
    RESHUFFLE_MIN_DISTINCT,
    covers_dataset,
    equal_batch_counts,
    equal_length_across_ranks,
    exactly_once,
    handles_every_size,
    len_matches_iteration,
    no_tiny_batch,
    reshuffles_with_set_epoch,
    seed_changes_order,
)
from samplers.testing.factories import (
    deterministic,
    deterministic_across_processes,
    fresh_outputs,
    load_factory,
    reference,
    validated,
)
from samplers.testing.resumes import resumes_other_world_size, resumes_same_world_size
from samplers.testing.states import (
    loads_version_1_states,
    refuses_impossible_states,
    version_1_state,
)
from samplers.testing.usage import (
    bool_like_attributes,
    second_iterator,
    state_read_concurrently,
)
from samplers.testing.loaders import loader_epochs, loop_state_with_workers
from samplers.testing.budgets import within_budget

# isort: on
from samplers.testing.mixture_search import check_mixture, check_mixture_guarantee
from samplers.testing.mixtures import Mixture
from samplers.testing.registry import CHECKS, GUARANTEES, MIXTURES, REGISTRY
from samplers.testing.running import (
    ARGUMENTS,
    Configuration,
    Factory,
    Rejected,
    Unsupported,
    Violation,
    epoch_outputs,
)
from samplers.testing.search import (
    EXAMPLES,
    MAX_BATCH_SIZE,
    MAX_DATASET_SIZE,
    MAX_EPOCH,
    MAX_WORLD_SIZE,
    Result,
    TimedOut,
    check,
    check_all,
    check_guarantee,
)

__all__ = [
    "ARGUMENTS",
    "CHECKS",
    "EXAMPLES",
    "GUARANTEES",
    "MAX_BATCH_SIZE",
    "MAX_DATASET_SIZE",
    "MAX_EPOCH",
    "MAX_WORLD_SIZE",
    "MIXTURES",
    "REGISTRY",
    "RESHUFFLE_MIN_DISTINCT",
    "Configuration",
    "Factory",
    "Mixture",
    "Rejected",
    "Result",
    "TimedOut",
    "Unsupported",
    "Violation",
    "bool_like_attributes",
    "check",
    "check_all",
    "check_guarantee",
    "check_mixture",
    "check_mixture_guarantee",
    "covers_dataset",
    "deterministic",
    "deterministic_across_processes",
    "epoch_outputs",
    "equal_batch_counts",
    "equal_length_across_ranks",
    "exactly_once",
    "fresh_outputs",
    "handles_every_size",
    "len_matches_iteration",
    "load_factory",
    "loader_epochs",
    "loads_version_1_states",
    "loop_state_with_workers",
    "no_tiny_batch",
    "reference",
    "refuses_impossible_states",
    "reshuffles_with_set_epoch",
    "resumes_other_world_size",
    "resumes_same_world_size",
    "second_iterator",
    "seed_changes_order",
    "state_read_concurrently",
    "validated",
    "version_1_state",
    "within_budget",
]
