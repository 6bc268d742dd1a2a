"""The kit searches where features meet: a state read in the loop under a prefetching
loader, a mixture weight rounded to 0, a cost that overflows. Ours hold each guarantee;
a deliberately wrong sampler (the code of before each fix) fails it, with the smallest
counterexample the search finds."""

from __future__ import annotations

from typing import Any

import kit_mixtures
import kit_samplers
import kit_tokens
import pytest

from samplers import testing as kit
from samplers.testing import check_mixture_guarantee

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


# A state read in the loop, under a loader whose workers fetch ahead ---------------------


@pytest.mark.parametrize(
    "factory",
    [kit_samplers.ours_uneven, kit_samplers.ours_batches_pad, kit_tokens.quadratic_uneven],
    ids=lambda factory: factory.__name__,
)
def test_ours_give_the_loops_state_under_a_loader_with_workers(factory: Any) -> None:
    for configuration in (
        kit.Configuration(dataset_size=23, world_size=2, batch_size=3, taken=3, epoch=1),
        kit.Configuration(dataset_size=40, world_size=3, batch_size=2, taken=4),
    ):
        kit.loop_state_with_workers(factory, configuration)


def test_a_state_that_counts_what_the_workers_fetched_is_caught() -> None:
    result = kit.check_guarantee(kit_samplers.per_rank_resume, "loop-state-with-workers")
    assert result.holds is False
    found = result.counterexample
    assert found is not None
    assert "ahead (what the workers fetched)" in found["what"]
    assert found["world_size"] == 1  # one rank, from the state before its first batch on


# A mixture weight rounded to 0 ----------------------------------------------------------


@pytest.mark.parametrize(
    "factory", [kit_mixtures.ours, kit_mixtures.ours_batches, kit_mixtures.ours_tokens_window1]
)
def test_ours_keep_every_positive_weight(factory: Any) -> None:
    assert check_mixture_guarantee(factory, "mixture-positive-share").holds is True


def test_a_rounding_that_drops_a_small_weight_is_caught_smallest() -> None:
    result = check_mixture_guarantee(kit_mixtures.rounding_to_zero, "mixture-positive-share")
    assert result.holds is False
    found = result.counterexample
    assert found is not None and "it is never drawn" in found["what"]
    source = found["source"]
    assert found["weights"][source] > 0
    # The bug needs a weight far above the others (a period past 65536) and more small
    # weights bumped to one part than larger sources to take them back from.
    assert max(found["weights"]) > 1 << 16
    assert sum(0 < w <= 3 for w in found["weights"]) >= 2
    assert found["world_size"] == 1 and len(found["sizes"]) <= 6


# A cost that overflows ------------------------------------------------------------------


@pytest.mark.parametrize(
    "factory",
    [kit_tokens.flops_uneven, kit_tokens.quadratic_uneven, kit_tokens.packed_uneven],
    ids=lambda factory: factory.__name__,
)
def test_ours_keep_every_batch_within_the_budget(factory: Any) -> None:
    assert kit.check_guarantee(factory, "within-budget").holds is True


def test_prefix_sums_that_wrap_are_caught_at_the_smallest_dataset() -> None:
    result = kit.check_guarantee(kit_tokens.wrapping_flops, "within-budget")
    assert result.holds is False
    found = result.counterexample
    assert found is not None and "more than the budget" in found["what"]
    # The chunk's prefix sums pass 2**63 once its lengths pass 1024 tokens: a few dozen
    # samples, never one.
    lengths = kit_tokens.lengths_of(range(found["dataset_size"]))
    assert sum(lengths) * kit_tokens.FLOPS_UNIT >= 1 << 63
    assert found["dataset_size"] < 40


def test_samplers_without_a_budget_are_not_supported() -> None:
    result = kit.check_guarantee(kit_samplers.ours_uneven, "within-budget")
    assert result.holds is None and "no lengths" in result.detail


def test_the_guide_names_every_guarantee() -> None:
    from pathlib import Path

    guide = (Path(__file__).parents[1] / "docs" / "guides" / "check-your-sampler.md").read_text()
    missing = [name for name in (*kit.REGISTRY, *kit.MIXTURES) if f"`{name}`" not in guide]
    assert not missing


# An error in what a guarantee exercises, not in building or iterating ------------------


def test_a_state_dict_that_raises_at_the_epochs_end_violates_the_resume_guarantees() -> None:
    # The sampler builds and iterates every configuration, so the error is not a
    # configuration it refuses: it breaks resuming (it was counted as skipped, "held").
    for guarantee in ("resumes-same-world-size", "resumes-other-world-size"):
        result = kit.check_guarantee(kit_samplers.state_fails_at_end, guarantee)
        assert result.holds is False, result.detail
        found = result.counterexample
        assert found is not None
        assert found["error"] == "RuntimeError: no state after the last index"
        assert "although it builds and iterates this configuration" in found["what"]
    # What it does not exercise still holds, and a refused build is still skipped.
    assert kit.check_guarantee(kit_samplers.state_fails_at_end, "exactly-once").holds is True
    skipped = kit.check_guarantee(kit_samplers.wrong_handles_every_size, "exactly-once")
    assert skipped.holds is True
    assert "skipped" in skipped.detail


def test_a_mixture_sampler_that_raises_only_when_reweighted_violates_reweighting() -> None:
    result = check_mixture_guarantee(kit_mixtures.reweight_raises, "mixture-reweight")
    assert result.holds is False, result.detail
    found = result.counterexample
    assert found is not None
    assert found["error"] == "RuntimeError: no new weights"
    assert check_mixture_guarantee(kit_mixtures.reweight_raises, "mixture-prefix-exact").holds


def test_a_mixture_state_wrong_on_ranks_other_than_0_is_caught() -> None:
    # Rank 0's state resumes right; the search loaded only it before.
    result = check_mixture_guarantee(kit_mixtures.rank_states, "mixture-elastic-resume")
    assert result.holds is False, result.detail
    found = result.counterexample
    assert found is not None and found["world_size"] >= 2
    assert "new rank j loading saved rank j %" in found["what"]


@pytest.mark.parametrize(
    ("factory", "guarantee", "epoch"),
    [
        (kit_mixtures.drifts_after_epoch_0, "mixture-prefix-exact", 1),
        (kit_mixtures.reverts_weights, "mixture-reweight", 1),
    ],
    ids=["drifts after epoch 0", "reverts the weights at the next epoch"],
)
def test_a_mixture_exact_only_in_its_first_epoch_is_caught(
    factory: Any, guarantee: str, epoch: int
) -> None:
    # Both are exact up to the end of epoch 0, all the checks looked at before.
    result = check_mixture_guarantee(factory, guarantee)
    assert result.holds is False, result.detail
    assert f"(epoch {epoch})" in result.detail
