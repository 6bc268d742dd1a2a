"""The guarantee kit on the token sampler under each cost model and on the packed sampler
(the factories of ``kit_tokens``): each guarantee they give, checked by the kit's own
check functions on configurations from tiny to large, both tails.

The full hypothesis search (``samplers.testing.check``) runs the same checks on 40
configurations per guarantee; it takes minutes per factory, so it is run by hand
(``dsampler check kit_tokens:packed_uneven`` with ``tests`` on the path), not here.
"""

from __future__ import annotations

import kit_tokens
import pytest

from samplers.testing import CHECKS, Configuration

#: Guarantees of ``tail="uneven"`` (every sample once) and of ``tail="pad"`` (equal steps).
UNEVEN = (
    "handles-every-size",
    "len-matches-iteration",
    "covers-dataset",
    "exactly-once",
    "reshuffles-with-set-epoch",
    "seed-changes-order",
    "resumes-other-world-size",
)
PAD = ("equal-batch-counts", "len-matches-iteration", "resumes-same-world-size")
FACTORIES = ("quadratic", "summed", "named", "packed")
CONFIGURATIONS = (
    Configuration(dataset_size=0, world_size=3),
    Configuration(dataset_size=5, world_size=7, taken=1, other_world_size=2),
    Configuration(dataset_size=257, world_size=4, epoch=1, taken=5, other_world_size=7, seed=7),
    Configuration(dataset_size=600, world_size=8, epoch=2, taken=9, other_world_size=3),
)


# Fewer samples than ranks: the documented warning that the last ranks get a batch fewer.
@pytest.mark.filterwarnings("ignore:.*tail='uneven'. gives ranks:UserWarning")
@pytest.mark.parametrize("guarantee", (*UNEVEN, "within-budget"))
@pytest.mark.parametrize("name", FACTORIES)
def test_uneven_gives_every_sample_once_and_resumes_anywhere(name: str, guarantee: str) -> None:
    factory = getattr(kit_tokens, f"{name}_uneven")
    for configuration in CONFIGURATIONS:
        CHECKS[guarantee](factory, configuration)  # raises a Violation if it fails


@pytest.mark.parametrize("guarantee", PAD)
@pytest.mark.parametrize("name", FACTORIES)
def test_pad_gives_equal_steps_and_resumes(name: str, guarantee: str) -> None:
    factory = getattr(kit_tokens, f"{name}_pad")
    for configuration in CONFIGURATIONS:
        CHECKS[guarantee](factory, configuration)


# The token and packed mixtures need a sample per source (no empty dataset): every size
# from 1.
@pytest.mark.filterwarnings("ignore:.*tail='uneven'. gives ranks:UserWarning")
@pytest.mark.parametrize("guarantee", (*UNEVEN, "within-budget"))
@pytest.mark.parametrize("name", ["mixture", "packed_mixture"])
def test_the_mixtures_weighted_by_tokens_give_every_sample_once(name: str, guarantee: str) -> None:
    for configuration in CONFIGURATIONS[1:]:
        CHECKS[guarantee](getattr(kit_tokens, f"{name}_uneven"), configuration)


@pytest.mark.parametrize("guarantee", PAD)
@pytest.mark.parametrize("name", ["mixture", "packed_mixture"])
def test_the_mixtures_give_equal_steps_and_resume(name: str, guarantee: str) -> None:
    for configuration in CONFIGURATIONS[1:]:
        CHECKS[guarantee](getattr(kit_tokens, f"{name}_pad"), configuration)
