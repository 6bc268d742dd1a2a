"""``torch.randperm`` with ``dtype=torch.int32`` draws the same permutation as int64.

Why it should: torch's CPU ``randperm`` (``aten/src/ATen/native/TensorFactories.cpp``) is
one template over the result's element type. The random draws (``random() % (n - i)``
for ``n < UINT32_MAX // 20``, ``random64() % (i + 1)`` above) and the swaps depend on
``n`` and the generator only; the element type only decides how the values are stored.
Before drawing, it refuses an ``n`` whose largest value ``n - 1`` does not fit the type
(so int32 takes ``n <= 2**31``), and float types beyond their exact integers (float32:
``n <= 2**24 + 1``).

These tests check it on the installed torch: the same values and the same generator
state afterwards (so later draws from the generator agree too), at small sizes, around
the parallel fill's grain (2**15) and around 2**24. The switch to the second algorithm
at ``UINT32_MAX // 20 = 214748364`` needs about 2.6 GB and tens of seconds, too much for
the test suite; run by hand at 214748363 and 214748364 (seed 0), both agreed. 10**8, the
size of the speed targets, is checked here.
"""

from __future__ import annotations

import pytest
import torch

#: Where torch's CPU randperm switches from ``random() % (n - i)`` to ``random64()``.
ALGORITHM_SWITCH = (2**32 - 1) // 20

SMALL_SIZES = [0, 1, 2, 3, 10, 1000, 2**15 - 1, 2**15, 2**15 + 1, 100_003]
LARGE_SIZES = [2**24 - 1, 2**24, 2**24 + 1]


def _draw(size: int, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``randperm(size)`` from a fresh generator, and the generator's state afterwards."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(size, dtype=dtype, generator=generator)
    assert order.dtype == dtype
    return order, generator.get_state()


def _assert_same_draws(size: int, seed: int) -> None:
    narrow, narrow_state = _draw(size, seed, torch.int32)
    wide, wide_state = _draw(size, seed, torch.int64)
    assert torch.equal(narrow.to(torch.int64), wide)
    assert torch.equal(narrow_state, wide_state)


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**40 + 3])
@pytest.mark.parametrize("size", SMALL_SIZES)
def test_int32_draws_the_int64_permutation(size: int, seed: int) -> None:
    _assert_same_draws(size, seed)


@pytest.mark.parametrize(("size", "seed"), list(zip(LARGE_SIZES, [0, 7, 12345], strict=True)))
def test_int32_draws_the_int64_permutation_around_2_to_the_24(size: int, seed: int) -> None:
    _assert_same_draws(size, seed)


def test_the_comparison_can_fail() -> None:
    """Another seed gives another order: equal orders above are not a vacuous check."""
    first, _ = _draw(100_003, 0, torch.int32)
    second, _ = _draw(100_003, 1, torch.int64)
    assert not torch.equal(first.to(torch.int64), second)


@pytest.mark.parametrize("size", [2, 5, 1000])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_below_the_switch_randperm_is_fisher_yates_on_32_bit_draws(
    size: int, dtype: torch.dtype
) -> None:
    """The model of the reading above, rebuilt from the generator's own draws.

    ``torch.randint(0, m)`` with ``m < 2**32`` returns one 32-bit draw ``% m``; swapping
    position ``i`` with ``i + randint(0, size - i)`` for each ``i`` rebuilds randperm of
    either dtype, and nothing in it depends on the dtype.
    """
    assert size < ALGORITHM_SWITCH
    generator = torch.Generator().manual_seed(2024)
    model = list(range(size))
    for i in range(size - 1):
        z = int(torch.randint(0, size - i, (1,), generator=generator))
        model[i], model[i + z] = model[i + z], model[i]
    order, state = _draw(size, 2024, dtype)
    assert order.tolist() == model
    assert torch.equal(state, generator.get_state())


def test_int32_refuses_sizes_past_2_to_the_31() -> None:
    out = torch.empty(0, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="overflow"):
        torch.randperm(2**31 + 1, out=out, generator=torch.Generator().manual_seed(0))


@pytest.mark.timeout(180)
def test_int32_draws_the_int64_permutation_at_10_to_the_8() -> None:
    """The size the benchmark and the issue's targets use (about 1.2 GB, several seconds)."""
    _assert_same_draws(10**8, 0)
