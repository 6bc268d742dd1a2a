"""The kit's mixture guarantees: ours hold them; the search finds the smallest
counterexample in a deliberately wrong mixing sampler and in the peers' ways of mixing."""

from __future__ import annotations

from fractions import Fraction

import kit_mixtures
import pytest
import torch

from samplers.testing import MIXTURES, Mixture, check_mixture, check_mixture_guarantee
from samplers.testing.mixtures import elastic_resume, prefix_exact


def outcomes(factory) -> dict[str, bool | None]:
    return {result.guarantee: result.holds for result in check_mixture(factory)}


@pytest.mark.parametrize(
    "factory",
    [
        kit_mixtures.ours,
        kit_mixtures.ours_batches,
        kit_mixtures.ours_packed_window1,
    ],
)
def test_ours_hold_every_mixture_guarantee(factory) -> None:
    assert outcomes(factory) == dict.fromkeys(MIXTURES, True)


def test_the_token_mixture_one_draw_at_a_time_holds_the_token_level_not_the_draws_quota():
    """Equal lengths and a window of one draw: the token mixture merges the draws by
    tokens over weight (each source within half a sample of a common level), which is
    not the draws' quota the kit checks per step (within 1 of ``k * w_d``): weights
    1:8:1:1 break it after 4 draws (source 1 has 4, 2.91 expected). The guarantees that
    are not about the quota hold."""
    found = outcomes(kit_mixtures.ours_tokens_window1)
    for guarantee in ("mixture-once-per-pass", "mixture-elastic-resume", "mixture-positive-share"):
        assert found[guarantee] is True
    with pytest.raises(AssertionError, match=r"source 1 has 4 samples, 2\.90909 expected"):
        prefix_exact(kit_mixtures.ours_tokens_window1, Mixture((40, 40, 40, 40), (1, 8, 1, 1)))


def test_the_packed_mixture_resumes_anywhere_keeps_every_weight_and_each_pass() -> None:
    """Default windows, in which the rows are handed out in an order of the packing's:
    the proportions hold at the windows' boundaries, not at every step (so the per-step
    guarantees do not hold), but each source's passes are handed out in order."""
    found = {r.guarantee: r.holds for r in check_mixture(kit_mixtures.ours_packed)}
    assert found["mixture-elastic-resume"] is True
    assert found["mixture-positive-share"] is True
    assert found["mixture-once-per-pass"] is True


def test_a_reweight_that_restarts_the_passes_is_caught_smallest() -> None:
    result = check_mixture_guarantee(kit_mixtures.wrong_restarting, "mixture-reweight")
    assert result.holds is False
    found = result.counterexample
    assert found is not None and "repeats index" in found["what"]
    # The smallest: one source of two samples on one rank, reweighted after one step.
    assert (found["sizes"], found["world_size"], found["taken"]) == ((2,), 1, 1)
    assert check_mixture_guarantee(kit_mixtures.wrong_restarting, "mixture-prefix-exact").holds


def test_weighted_random_sampler_in_the_wrapper_breaks_proportions_and_passes() -> None:
    found = outcomes(kit_mixtures.peer_weighted_random)
    assert found["mixture-prefix-exact"] is False
    assert found["mixture-once-per-pass"] is False
    assert found["mixture-reweight"] is None  # it has no set_weights


def test_concat_and_the_stock_sampler_ignore_the_weights() -> None:
    result = check_mixture_guarantee(kit_mixtures.peer_concat_stock, "mixture-prefix-exact")
    assert result.holds is False
    found = result.counterexample
    assert found is not None and len(found["sizes"]) == 2 and found["world_size"] == 1
    assert check_mixture_guarantee(kit_mixtures.peer_concat_stock, "mixture-reweight").holds is None


def test_the_checks_run_on_one_mixture_directly() -> None:
    mixture = Mixture(sizes=(3, 5), weights=(1, 1), world_size=2, taken=2, other_world_size=3)
    prefix_exact(kit_mixtures.ours, mixture)
    elastic_resume(kit_mixtures.ours, mixture)
    with pytest.raises(AssertionError, match="mixture-prefix-exact"):
        prefix_exact(kit_mixtures.peer_concat_stock, Mixture(sizes=(1, 3), weights=(1, 1)))


def test_the_token_mixture_resumes_anywhere_and_its_steps_are_windows_not_prefixes() -> None:
    """With lengths that differ and windows sorted by length, the token mixture keeps
    elastic resume; the per-step guarantees in draws do not apply, and the search shows
    why in the smallest mixtures: weights count tokens (equal token weights over lengths
    1 and 40 draw 40 to 1), and a window holding the end of one pass and the start of the
    next hands them out in length order, not pass by pass."""
    found = {r.guarantee: r for r in check_mixture(kit_mixtures.ours_tokens)}
    assert found["mixture-elastic-resume"].holds is True
    prefix = found["mixture-prefix-exact"].counterexample
    assert prefix is not None and prefix["sizes"] == (1, 1) and prefix["weights"] == (1, 1)
    sampler = kit_mixtures.ours_tokens([range(1), range(1)], [1, 1], 1, 0, 0)
    assert sampler.lengths.tolist() == [1, 40] and sampler.proportions == (
        Fraction(40, 41),
        Fraction(1, 41),
    )
    passes = found["mixture-once-per-pass"].counterexample
    assert passes is not None and "repeats index" in passes["what"]
    sizes, weights = passes["sizes"], passes["weights"]
    sampler = kit_mixtures.ours_tokens(
        [range(n) for n in sizes], list(weights), 1, 0, passes["seed"]
    )
    draws = sampler.order().stream.stream_at(torch.arange(3 * sum(sizes))).tolist()
    for d, size in enumerate(sizes):
        offset = sum(sizes[:d])
        mine = [i for i in draws if offset <= i < offset + size]
        assert all(
            len(set(mine[k : k + size])) == len(mine[k : k + size])
            for k in range(0, len(mine), size)
        )


def test_a_resume_refusing_token_parts_past_the_period_is_caught_at_the_period() -> None:
    """The search of the resume draws weights far apart too: a token mixture that checks
    a loaded schedule against the draws' period (as ours did) refuses its own state there:
    the counterexample's parts pass it; ours resumes."""
    result = check_mixture_guarantee(kit_mixtures.period_checked_states, "mixture-elastic-resume")
    assert result.holds is False
    found = result.counterexample
    assert found is not None and "state field 'schedule'" in found["what"]
    assert sum(found["weights"]) > 1 << 16
    ours = check_mixture_guarantee(kit_mixtures.ours_tokens, "mixture-elastic-resume")
    assert ours.holds is True
