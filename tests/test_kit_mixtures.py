"""The kit's mixture guarantees: ours hold them; the search finds the smallest
counterexample in a deliberately wrong mixing sampler and in the peers' ways of mixing."""

from __future__ import annotations

from fractions import Fraction

import kit_mixtures
import pytest
import torch

from samplers import DistributedMixtureSampler
from samplers.testing import (
    MIXTURES,
    Mixture,
    Result,
    check_mixture,
    check_mixture_guarantee,
)
from samplers.testing.mixture_search import _smaller
from samplers.testing.mixtures import elastic_resume, prefix_exact
from samplers.testing.token_levels import token_level


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
    """Every guarantee of weights counting samples; the token level is not theirs (they
    take no lengths), and the search says so."""
    results = {result.guarantee: result for result in check_mixture(factory)}
    assert {name: result.holds for name, result in results.items()} == {
        **dict.fromkeys(MIXTURES, True),
        "mixture-token-level": None,
    }
    assert "the factory takes no lengths" in results["mixture-token-level"].detail


@pytest.mark.parametrize(
    "factory",
    [kit_mixtures.ours_tokens_lengths_window1, kit_mixtures.ours_packed_lengths_window1],
)
def test_ours_whose_steps_are_their_stream_keep_the_token_level(factory) -> None:
    """Weights counting tokens, a window of one draw: after every step, in the first
    epoch and the next, the sources are within a sample of a common level."""
    result = check_mixture_guarantee(factory, "mixture-token-level")
    assert (result.holds, result.examples) == (True, 20)


def _tokens_after(factory, mixture: Mixture, steps: int, reweighted: bool) -> list[int]:
    """Each source's tokens over all ranks in ``steps`` steps from the start of epoch 0,
    or from ``set_weights`` after ``mixture.taken`` steps (on through epoch 1), counted
    here from the ranks' own samplers, not by the kit."""
    ranks = [
        factory(
            datasets=[range(n) for n in mixture.sizes],
            weights=list(mixture.weights),
            lengths=list(mixture.lengths),
            num_replicas=mixture.world_size,
            rank=rank,
            seed=mixture.seed,
        )
        for rank in range(mixture.world_size)
    ]
    for sampler in ranks:
        sampler.set_epoch(0)
    if reweighted:
        iterators = [iter(sampler) for sampler in ranks]
        for _ in range(mixture.taken):
            for iterator in iterators:
                next(iterator, None)
        for sampler in ranks:
            sampler.set_weights(list(mixture.reweighted))
    taken: list[int] = []
    for epoch in (0, 1):
        if epoch:
            for sampler in ranks:
                sampler.set_epoch(epoch)
        shares = [list(sampler) for sampler in ranks]
        for step in range(max(len(share) for share in shares)):
            if steps == 0:
                break
            taken += [share[step] for share in shares if step < len(share)]
            steps -= 1
    tokens = [0] * len(mixture.sizes)
    for index in taken:
        tokens[mixture.source(index)] += mixture.lengths[index]
    return tokens


def test_a_mixture_of_samples_given_token_weights_breaks_the_level_smallest() -> None:
    """The sample mixture ignores the lengths: a source of longer samples draws as often
    as one of short ones, so its tokens run ahead. The counterexample's tokens are those
    its sampler gives (from the epoch's start, or from set_weights), and no level is
    within a sample of both sources."""
    result = check_mixture_guarantee(kit_mixtures.samples_for_tokens, "mixture-token-level")
    assert result.holds is False
    found = result.counterexample
    assert found is not None and found["world_size"] == 1
    reweighted = "since set_weights" in found["what"]
    mixture = _mixture_of(found)
    first = found["taken"] if reweighted else 0
    later = _epoch_steps(mixture) if "(epoch 1)" in result.detail else 0
    tokens = _tokens_after(
        kit_mixtures.samples_for_tokens, mixture, later + found["step"] + 1 - first, reweighted
    )
    assert tuple(tokens) == found["tokens"]
    ahead, behind = found["source"], found["behind"]
    weights = mixture.reweighted if reweighted else mixture.weights
    share = [Fraction(w, sum(weights)) for w in weights]
    assert (tokens[ahead] - mixture.longest(ahead)) / share[ahead] > (
        tokens[behind] + mixture.longest(behind)
    ) / share[behind]
    assert mixture.longest(ahead) != mixture.longest(behind)


def _mixture_of(found: dict) -> Mixture:
    """The mixture of a counterexample (its ``taken``: the steps before set_weights)."""
    names = ("sizes", "weights", "world_size", "seed", "taken", "other_world_size")
    return Mixture(
        *(found[name] for name in names),
        new_weights=found["new_weights"],
        lengths=found["lengths"],
    )


def _epoch_steps(mixture: Mixture) -> int:
    sampler = kit_mixtures.samples_for_tokens(
        [range(n) for n in mixture.sizes], list(mixture.weights), None, 1, 0, mixture.seed
    )
    return len(sampler)


def test_default_windows_break_the_level_where_one_draw_at_a_time_keeps_it() -> None:
    """A window of draws sorted by length is handed out shortest first: the token
    mixture's steps are not its stream, and the search finds a step where the level
    breaks; the same mixture one draw at a time keeps it."""
    result = check_mixture_guarantee(kit_mixtures.ours_tokens_lengths, "mixture-token-level")
    assert result.holds is False and result.counterexample is not None
    found = result.counterexample
    mixture = _mixture_of(found)
    token_level(kit_mixtures.ours_tokens_lengths_window1, mixture)
    with pytest.raises(AssertionError, match="mixture-token-level"):
        token_level(kit_mixtures.ours_tokens_lengths, mixture)


def test_a_source_weighted_0_must_draw_no_tokens() -> None:
    with pytest.raises(AssertionError, match="source 1 of weight 0 has 2 tokens"):
        token_level(kit_mixtures.stock_for_tokens, Mixture((2, 2), (1, 0), lengths=(1, 1, 2, 2)))
    with pytest.raises(ValueError, match="lengths must be one positive length per sample"):
        Mixture((2, 2), (1, 0), lengths=(1, 1, 2))


def test_shrinking_keeps_each_sample_its_length() -> None:
    mixture = Mixture((2, 3), (1, 1), lengths=(1, 2, 3, 4, 5))
    smaller = {(m.sizes, m.lengths) for m in _smaller(mixture)}
    assert ((3,), (3, 4, 5)) in smaller  # source 0 dropped
    assert ((2,), (1, 2)) in smaller  # source 1 dropped
    assert ((2, 1), (1, 2, 3)) in smaller  # source 1 cut to its first sample
    assert ((2, 3), (1, 2, 3, 3, 3)) in smaller  # source 1's lengths down to its shortest
    assert ((2, 3), (1, 2, 3, 4, 3)) in smaller  # its longest halved
    assert all(len(m.lengths) == sum(m.sizes) for m in _smaller(mixture))


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

    def holds(guarantee: str) -> bool | None:
        return check_mixture_guarantee(kit_mixtures.ours_packed, guarantee).holds

    assert holds("mixture-elastic-resume") is True
    assert holds("mixture-positive-share") is True
    assert holds("mixture-once-per-pass") is True
    assert holds("mixture-prefix-exact") is False


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

    def searched(guarantee: str) -> Result:
        return check_mixture_guarantee(kit_mixtures.ours_tokens, guarantee)

    assert searched("mixture-elastic-resume").holds is True
    prefix = searched("mixture-prefix-exact").counterexample
    assert prefix is not None and prefix["sizes"] == (1, 1) and prefix["weights"] == (1, 1)
    sampler = kit_mixtures.ours_tokens([range(1), range(1)], [1, 1], 1, 0, 0)
    assert sampler.lengths.tolist() == [1, 40] and sampler.proportions == (
        Fraction(40, 41),
        Fraction(1, 41),
    )
    passes = searched("mixture-once-per-pass").counterexample
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


def test_a_factory_taking_keywords_is_not_passed_lengths_unless_it_names_them() -> None:
    """``**kwargs`` passed on to a sampler that takes no lengths keeps working (and the
    token level is not its guarantee); naming ``lengths`` beside them gets them."""

    def passing_on(**keywords):
        return DistributedMixtureSampler(**keywords, tail="uneven")

    def naming(lengths, **keywords):
        return kit_mixtures.ours_tokens_lengths_window1(lengths=lengths, **keywords)

    assert check_mixture_guarantee(passing_on, "mixture-prefix-exact").holds is True
    assert check_mixture_guarantee(passing_on, "mixture-token-level").holds is None
    assert check_mixture_guarantee(naming, "mixture-token-level").holds is True
