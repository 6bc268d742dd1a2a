"""A peek through a DataLoader in the middle of its loop (``next(iter(loader))``): the
sampler's state, epoch and copies stay the loop's (:mod:`samplers.side_reads`), for every
sampler we ship, through torch's DataLoader with and without workers and torchdata's
``StatefulDataLoader``; and where the later iteration is the loop's, it stays the loop's.
Every test but that last one fails without :mod:`samplers.side_reads` (the state was the
peek's, one batch into the epoch, and ``auto_epoch`` counted the peek as an epoch)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import composition  # the composition matrix's samplers and loaders
import pytest

from samplers import SamplerWarning

LOADERS = ("torch", "torch 2 workers", "stateful")
#: The step after which the loop peeks, and the step at which its state is taken.
PEEK, CHECK = 1, 3


def _sampler(kind: str, **settings: Any) -> Any:
    sampler = composition.SAMPLERS[kind](1, 0)
    sampler.set_epoch(composition.EPOCH)
    for name, value in settings.items():
        setattr(sampler, name, value)
    return sampler


def _loop(kind: str, loader: str, *, peek: bool) -> tuple[list[int], list[Any]]:
    """One rank's epoch through ``loader``, a peek after step :data:`PEEK` (or none):
    the items the loop received, and the sampler's state after the peek, at step
    :data:`CHECK`, of a copy then, and after the loop."""
    sampler = _sampler(kind)
    loading = composition.make_loader(kind, loader, sampler)
    received: list[int] = []
    states: list[Any] = []
    with warnings.catch_warnings():
        # The peek is a second iter() at the epoch without set_epoch: warned, as any.
        warnings.simplefilter("ignore", SamplerWarning)
        for step, batch in enumerate(loading):
            received += composition.items(batch)
            if step == PEEK:
                if peek:  # (not inside an assert: pytest would keep the iterator)
                    peeked = composition.items(next(iter(loading)))  # the epoch's first batch
                    assert peeked
                states.append(sampler.state_dict())
            if step == CHECK:
                states += [sampler.state_dict(), copy.copy(sampler).state_dict()]
    states.append(sampler.state_dict())
    return received, states


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("kind", composition.SAMPLERS)
def test_a_peek_leaves_the_loop_s_state_and_items(kind: str, loader: str) -> None:
    received, states = _loop(kind, loader, peek=True)
    expected, unpeeked = _loop(kind, loader, peek=False)
    if loader == "stateful":  # it keeps the peek's iterator: the latest, until a step
        states, unpeeked = states[1:], unpeeked[1:]
    assert (received, states) == (expected, unpeeked)
    assert states[-1]["finished"] and not states[-2]["finished"]


@pytest.mark.parametrize("kind", ["index", "batch", "token", "mixture"])
def test_a_peek_is_no_epoch_of_auto_epoch(kind: str) -> None:
    """Three epochs with ``auto_epoch=True``, a peek in the first: the same epochs, in
    the same order, as without it."""

    def epochs(peek: bool) -> list[list[int]]:
        sampler = _sampler(kind, auto_epoch=True)
        loading = composition.make_loader(kind, "torch", sampler)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SamplerWarning)
            for epoch in range(3):
                items: list[int] = []
                for step, batch in enumerate(loading):
                    items += composition.items(batch)
                    if peek and epoch == 0 and step == PEEK:
                        next(iter(loading))
                seen.append(items)
        return seen

    peeked = epochs(True)
    assert peeked == epochs(False)
    assert peeked[0] != peeked[1]  # three epochs, not one three times


@pytest.mark.parametrize("kind", ["token", "mixture token", "packed mixture"])
@pytest.mark.parametrize("loader", ["torch", "torch 2 workers"])
def test_after_a_peek_len_is_the_loop_s_epoch(kind: str, loader: str) -> None:
    """``len(sampler)`` and ``len(loader)`` right after a peek in a loop of an
    ``auto_epoch`` sampler whose epochs differ in length: the loop's epoch's, not the
    next one's (which the peek's iteration counted as its own until taken back)."""

    def lengths(peek: bool) -> list[int]:
        sampler = _sampler(kind, auto_epoch=True)
        loading = composition.make_loader(kind, loader, sampler)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SamplerWarning)
            for step, _ in enumerate(loading):
                if step == PEEK:
                    if peek:
                        next(iter(loading))
                    seen += [len(sampler), len(loading)]
        return seen

    peeked, unpeeked = lengths(True), lengths(False)
    assert peeked == unpeeked
    sampler = _sampler(kind)
    counts = []
    for epoch in (composition.EPOCH, composition.EPOCH + 1):
        sampler.set_epoch(epoch)
        counts.append(len(sampler))
    assert counts[0] == unpeeked[0] != counts[1]  # the next epoch would say another length


def _two_steps(loader: str) -> tuple[Any, Any, Any]:
    """An index sampler, a ``loader`` over it, and that loader's iterator two steps in."""
    sampler = _sampler("index")
    loading = composition.make_loader("index", loader, sampler)
    iterator = iter(loading)
    next(iterator), next(iterator)
    return sampler, loading, iterator


def test_a_peek_and_the_state_at_once_is_the_loop_s() -> None:
    """The state taken in the same step as the peek, before the loop goes on."""
    sampler, loading, iterator = _two_steps("torch 2 workers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        next(iter(loading))
    assert sampler.state_dict()["position"] == 2 * composition.BATCH
    del iterator


def test_a_loop_begun_again_while_the_left_one_is_alive_is_the_loop_s() -> None:
    """An iterator kept (``it = iter(loader)``, two steps), then a whole epoch over the
    loader: that epoch is the loop's, in it and at its end."""
    sampler, loading, kept = _two_steps("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        for step, _ in enumerate(loading):
            if step == CHECK:
                assert sampler.state_dict()["position"] == (CHECK + 1) * composition.BATCH
    assert sampler.state_dict()["finished"]
    assert kept is not None


def test_a_peek_kept_alive_while_the_loop_goes_on_is_the_latest() -> None:
    """Left to the caller (see the module): a peek whose iterator is kept alive is the
    latest iteration until the loop takes its next step."""
    sampler, loading, iterator = _two_steps("torch")
    held = []  # a name for the peek's iterator: a frame's locals outlive a del on 3.11
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        held.append(iter(loading))
        next(held[0])
    assert sampler.state_dict()["position"] == composition.BATCH  # the peek's, alive
    next(iterator)
    assert sampler.state_dict()["position"] == 3 * composition.BATCH
    held.clear()
    assert sampler.state_dict()["position"] == 3 * composition.BATCH


@pytest.mark.parametrize("kind", ["index", "mixture batch"])
def test_set_epoch_after_a_peeked_epoch_is_the_next_epoch(kind: str) -> None:
    """A peek in epoch ``e``, the loop run to its end, then ``set_epoch(e + 1)``: the next
    loop is epoch ``e + 1`` (the peek's bookkeeping is undone before, not after, the
    change), and a state loaded then is taken up as usual."""
    sampler = _sampler(kind)
    loading = composition.make_loader(kind, "torch", sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        for step, _ in enumerate(loading):
            if step == PEEK:
                next(iter(loading))
    sampler.set_epoch(composition.EPOCH + 1)
    following = _items(loading)
    fresh = _sampler(kind)
    fresh.set_epoch(composition.EPOCH + 1)
    assert following == _items(composition.make_loader(kind, "torch", fresh))
    assert sampler.state_dict()["epoch"] == composition.EPOCH + 1


def _items(loading: Any) -> list[int]:
    return [item for batch in loading for item in composition.items(batch)]
