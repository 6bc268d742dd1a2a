"""``samplers.testing.check(time_limit=...)`` and ``dsampler check --timeout`` bound every
call into the factory's code, the probe that validates it included, and stop an iteration
that grows past what the configuration can hold (a memory bound)."""

from __future__ import annotations

import time

import kit_samplers
import pytest

import samplers.testing as kit
from samplers.testing.running import Configuration, Unbounded, bounded, iterate, most_items
from studies.cli import main


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "factory", [kit_samplers.endless, kit_samplers.blocking], ids=lambda f: f.__name__
)
def test_check_stops_a_probe_that_never_ends_or_blocks(factory: kit.Factory) -> None:
    began = time.monotonic()
    with pytest.raises(TypeError, match=r"factory (took longer than 2 s|returned a sampler)"):
        kit.check(factory, time_limit=2)
    assert time.monotonic() - began < 15


@pytest.mark.timeout(120)
def test_an_iterator_that_never_ends_on_large_datasets_is_stopped_and_reported() -> None:
    began = time.monotonic()
    result = kit.check_guarantee(
        kit_samplers.endless_when_large, "handles-every-size", time_limit=5
    )
    assert time.monotonic() - began < 60
    assert result.holds is False
    assert "its iterator does not end" in result.detail
    assert result.counterexample is not None
    assert result.counterexample["dataset_size"] > 100


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "expected", "said"),
    [
        # An iterator that never ends is stopped by the memory bound: not a sampler (2).
        ("endless", 2, "returned a sampler"),
        # One that blocks runs out of time: a configuration that did, as the guide says (1).
        ("blocking", 1, "took longer than 2 s"),
    ],
)
def test_the_cli_timeout_bounds_the_probe(
    name: str, expected: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    began = time.monotonic()
    status = main(["check", f"kit_samplers:{name}", "--timeout", "2"])
    err = capsys.readouterr().err
    assert status == expected, err
    assert f"kit_samplers:{name} {said}" in err
    assert time.monotonic() - began < 30


def test_the_bound_is_far_above_any_share_and_stops_what_passes_it() -> None:
    configuration = Configuration(dataset_size=10, world_size=2, batch_size=3)
    most = most_items(configuration)
    assert most == 4 * (10 + 2 * 3) + 16
    with bounded(configuration):
        assert iterate(range(most)) == list(range(most))
        with pytest.raises(Unbounded, match=rf"more than {most} indices"):
            iterate(iter(int, 1))  # endless zeros
        with pytest.raises(Unbounded):
            iterate([[0] * (most + 1)])  # one batch of too many indices
    assert len(iterate(range(10 * most))) == 10 * most  # outside: unbounded
