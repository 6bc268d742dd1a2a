"""The token level of mixing samplers whose weights count tokens (a guarantee of
``MIXTURES``, searched with the others by :mod:`samplers.testing.mixture_search`).

* ``mixture-token-level``, for factories taking ``lengths`` (each sample's length in
  tokens): after every step of epoch 0 and of epoch 1 after it (one stream), and after
  ``set_weights`` (when the sampler has it) called after ``taken`` steps to the end of
  the next epoch (the tokens counted from there, under the new weights), over all
  ranks, the sources' tokens are within one sample of a common level: some ``L`` with
  ``|X_d - L * w_d| <= max_d`` for every source of positive weight ``w_d`` (its share of
  the weights), ``X_d`` its tokens so far and ``max_d`` its longest sample; a source of
  weight 0 draws nothing. So ``|X_d - w_d * X| <= max_d + w_d * (the others' max_e)``,
  ``X`` all the tokens. It holds per step only where the steps are prefixes of the
  sampler's stream (a sampler that hands a window of draws out sorted by length can
  break it inside a window).
"""

from __future__ import annotations

from collections.abc import Sequence

from samplers.testing.mixtures import (
    Mixture,
    _accepted,
    _mixture_guarantee,
    _shares,
    after_reweighting,
    two_epochs,
)
from samplers.testing.running import Factory, Failure, Unsupported

__all__ = ["token_level"]


def _token_failure(
    mixture: Mixture,
    steps: list[list[int]],
    weights: Sequence[int],
    first_step: int,
    epoch_steps: int,
    since: str = "epoch 0 began",
) -> Failure | None:
    """The first step after which no level has every source of positive weight within
    one of its longest samples, the tokens counted from the first of ``steps`` (step
    ``first_step`` of epoch 0, what ``since`` says; epoch 1's steps follow from
    ``epoch_steps`` on)."""
    shares = _shares(weights)
    lengths = mixture.sample_lengths
    longest = [mixture.longest(d) for d in range(len(shares))]
    tokens = [0] * len(shares)
    for number, taken in enumerate(steps, start=first_step):
        epoch, step = (1, number - epoch_steps) if number >= epoch_steps else (0, number)
        for index in taken:
            tokens[mixture.source(index)] += lengths[index]
        where = {"step": step, "tokens": tuple(tokens)}
        for d, share in enumerate(shares):
            if not share and tokens[d]:
                return Failure(
                    None,
                    epoch,
                    f"after step {step} source {d} of weight 0 has {tokens[d]} tokens (since "
                    f"{since}, over all ranks)",
                    "a dataset weighted 0 is trained on",
                    {**where, "source": d},
                )
        weighted = [d for d, share in enumerate(shares) if share]
        # The level each source allows at least and at most: some level is within one
        # sample of every source when the highest floor is at most the lowest ceiling.
        ahead = max(weighted, key=lambda d: (tokens[d] - longest[d]) / shares[d])
        behind = min(weighted, key=lambda d: (tokens[d] + longest[d]) / shares[d])
        floor = (tokens[ahead] - longest[ahead]) / shares[ahead]
        ceiling = (tokens[behind] + longest[behind]) / shares[behind]
        if floor > ceiling:
            return Failure(
                None,
                epoch,
                f"after step {step} ({sum(tokens)} tokens over all ranks since {since}) "
                f"source {ahead} has {tokens[ahead]} tokens and source {behind} "
                f"{tokens[behind]}, weights {weights[ahead]}:{weights[behind]}, longest samples "
                f"{longest[ahead]} and {longest[behind]}: source {ahead} is more than a "
                f"sample ahead of any level source {behind} is within a sample of",
                "a training step sees the sources' tokens in other proportions than asked",
                {**where, "source": ahead, "behind": behind},
            )
    return None


@_mixture_guarantee(
    "mixture-token-level",
    "weights counting tokens: after every step each source's tokens are within one of its "
    "samples of a common level, in the first epoch and the next, and after set_weights",
)
def token_level(factory: Factory, mixture: Mixture) -> None:
    """Every step of epoch 0, and of epoch 1 after it (all ranks together), has a level
    ``L`` with each source of positive weight within its longest sample of ``L`` times
    its weight's share; and, when the sampler has ``set_weights``, so has every step
    after it is called on every rank after ``taken`` steps, to the end of the next epoch,
    its tokens counted from there under the new weights. Only for factories taking
    ``lengths``."""
    if "lengths" not in _accepted(factory):
        raise Unsupported("the factory takes no lengths (weights counting tokens need them)")
    steps, first = two_epochs(factory, mixture)
    failure = _token_failure(mixture, steps, mixture.weights, 0, first)
    if failure is not None:
        raise failure
    after = after_reweighting(factory, mixture)
    if after is None:
        return
    _, steps, taken, epoch_steps = after
    since = f"set_weights after step {taken}"
    failure = _token_failure(mixture, steps, mixture.reweighted, taken, epoch_steps, since)
    if failure is not None:
        failure.details["taken"] = taken
        raise failure
