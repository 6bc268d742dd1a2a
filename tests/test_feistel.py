"""The Feistel permutation: a bijection, its specification, its quality, its errors.

The quality tests are statistical but deterministic: fixed sizes, seeds and epochs, and
fixed thresholds of about five standard deviations of each statistic under a uniformly
random permutation, so they pass or fail the same way on every run. A permutation with
simple structure (the identity, a rotation, a seed that is ignored) fails them.
"""

from __future__ import annotations

import doctest
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import samplers.cycle_walk
import samplers.feistel
from samplers.feistel import MAX_SIZE, ROUNDS, FeistelPermutation, round_keys

#: How far (in standard deviations under the null hypothesis) a statistic may stray.
Z_LIMIT = 5.0


def _near_powers_of_two(top: int) -> list[int]:
    return sorted({2**k + d for k in range(1, top + 1) for d in (-1, 0, 1)})


PRIMES = [2, 3, 5, 7, 11, 13, 31, 97, 101, 127, 251, 257, 997, 7919, 65521, 65537, 104729]
SIZES = sorted({0, 1, 6, 10, 100, 1000, 100_000, 299_999, *PRIMES, *_near_powers_of_two(18)})


def order(size: int, seed: int, epoch: int) -> torch.Tensor:
    """The whole order ``perm(0), ..., perm(size - 1)`` through the tensor path."""
    return FeistelPermutation(size, seed, epoch)(torch.arange(size))


# -- a permutation, with its inverse -------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("seed", "epoch"), [(0, 0), (2024, 7)])
def test_every_size_gives_a_permutation_and_its_inverse(size: int, seed: int, epoch: int) -> None:
    perm = FeistelPermutation(size, seed, epoch)
    positions = torch.arange(size)
    indices = perm(positions)
    assert indices.dtype == torch.int64
    assert torch.equal(torch.sort(indices).values, positions)
    assert torch.equal(perm.inverse(indices), positions)
    assert torch.equal(perm(perm.inverse(positions)), positions)


@pytest.mark.parametrize("size", [2**62, 2**62 + 1, 2**63 - 1, MAX_SIZE, 10**18 + 9])
def test_positions_near_the_top_of_huge_sizes(size: int) -> None:
    perm = FeistelPermutation(size, 5, 1)
    positions = torch.tensor([0, 1, size // 2, size - 2, size - 1])
    indices = perm(positions)
    assert indices.unique().numel() == positions.numel()
    assert int(indices.min()) >= 0 and int(indices.max()) < size
    assert indices.tolist() == [perm.at(int(p)) for p in positions]
    assert torch.equal(perm.inverse(indices), positions)


def test_any_shape_and_integer_dtype() -> None:
    perm = FeistelPermutation(1000, 3, 4)
    grid = torch.arange(12).reshape(3, 4)
    result = perm(grid.to(torch.int32))
    assert result.shape == (3, 4) and result.dtype == torch.int64
    assert torch.equal(result.reshape(-1), perm(torch.arange(12)))
    assert torch.equal(perm.inverse(result), grid)
    assert perm(torch.empty(0, dtype=torch.int64)).shape == (0,)
    assert FeistelPermutation(0, 0, 0)(torch.empty(2, 0, dtype=torch.int64)).shape == (2, 0)


def test_the_input_is_not_modified() -> None:
    positions = torch.arange(100)
    FeistelPermutation(100, 1, 2)(positions)
    FeistelPermutation(100, 1, 2).inverse(positions)
    assert torch.equal(positions, torch.arange(100))


# -- the pure-Python path and the specification ---------------------------------------------


@st.composite
def sizes_and_positions(draw: st.DrawFn) -> tuple[int, list[int]]:
    size = draw(
        st.one_of(
            st.integers(1, 2**62),
            st.integers(2**62, MAX_SIZE),
            st.sampled_from(_near_powers_of_two(63)).filter(lambda n: n <= MAX_SIZE),
            st.integers(1, 5000),
        )
    )
    positions = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=16))
    return size, [0, size - 1, *positions]


@given(
    sizes_and_positions(),
    st.integers(-(2**70), 2**70),
    st.integers(-(2**70), 2**70),
)
def test_at_equals_the_tensor_path(case: tuple[int, list[int]], seed: int, epoch: int) -> None:
    size, positions = case
    perm = FeistelPermutation(size, seed, epoch)
    indices = perm(torch.tensor(positions, dtype=torch.int64))
    assert indices.tolist() == [perm.at(position) for position in positions]
    assert perm.inverse(indices).tolist() == positions


@pytest.mark.parametrize("size", [300_000, 2**31 - 1, 2**31 + 1, 2**32 - 5])
def test_tables_built_by_a_large_call_serve_small_calls_and_the_inverse(size: int) -> None:
    """A call with at least a table's worth of values builds the round tables (int32 halves
    below 2**31, int64 at and above); from then on every tensor, however small, and the
    inverse read them. Each path must agree with the pure-Python one."""
    perm = FeistelPermutation(size, 9, 4)
    few = torch.tensor([0, 1, size // 3, size - 2, size - 1])
    expected = [perm.at(int(p)) for p in few]
    assert perm(few).tolist() == expected  # too few values: mixed directly, no table
    assert not perm._tables
    many = torch.arange(size - (1 << 16), size)  # a table has 2**16 entries at most
    through_tables = perm(many)
    assert perm._tables
    assert through_tables[-2:].tolist() == expected[-2:]
    sample = through_tables[:: 1 << 12].tolist()
    assert sample == [perm.at(int(p)) for p in many[:: 1 << 12]]
    assert perm(few).tolist() == expected  # small, now through the tables
    assert perm.inverse(torch.tensor(expected)).tolist() == few.tolist()
    assert torch.equal(perm.inverse(through_tables), many)


@pytest.mark.parametrize("size", [3, 5, 6, 7, 1000, 65_537, 100_000, 299_999, 2**20 - 1])
def test_the_whole_domain_walk_equals_the_walk_of_each_chunk(size: int) -> None:
    """A call for at least half of a small domain walks the whole domain at once; a call
    for less walks its own values. Both give the same indices, and so does ``table()``,
    which keeps the permutation (int32) for every later call."""
    perm = FeistelPermutation(size, 2025, 11)
    positions = torch.arange(size)
    assert perm.whole_pays(size) and not perm.whole_pays((size - 1) // 4)
    whole = perm(positions)
    step = max(1, (size - 1) // 4)  # a quarter of the size: under half the domain
    chunked = torch.cat([perm(positions[lo : lo + step]) for lo in range(0, size, step)])
    assert torch.equal(whole, chunked)
    assert torch.equal(perm.inverse(whole), positions)
    table = perm.table()
    assert table.dtype == torch.int32 and torch.equal(table.long(), whole)
    assert perm.table() is table
    picked = torch.tensor([0, size // 2, size - 1])
    assert perm(picked).tolist() == [perm.at(int(p)) for p in picked]


def test_the_whole_domain_walk_leaves_cycles_above_the_size_alone() -> None:
    """Values above ``size`` on a cycle that never comes below it are no walk's
    continuation: the whole-domain walk must stop on them, not loop, and still give
    the permutation. Some small sizes and seeds have such a cycle; find them."""
    found = 0
    for size in (5, 9, 17, 33):
        domain = 1 << (size - 1).bit_length()
        for seed in range(40):
            perm = FeistelPermutation(size, seed, 0)
            image = [perm._encrypt(v) for v in range(domain)]
            above = set(range(size, domain))
            cycles = any(_cycle_within(image, v, above) for v in above)
            found += cycles
            order = perm(torch.arange(size))
            assert order.tolist() == [perm.at(p) for p in range(size)], (size, seed)
    assert found  # the case was exercised


def _cycle_within(image: list[int], start: int, values: set[int]) -> bool:
    """Whether the cycle of ``start`` under ``image`` stays inside ``values``."""
    value = image[start]
    while value != start:
        if value not in values:
            return False
        value = image[value]
    return True


@pytest.mark.parametrize("size", [3, 37, 1000, 4097])
def test_at_equals_the_tensor_path_at_every_position(size: int) -> None:
    perm = FeistelPermutation(size, 11, 12)
    assert [perm.at(position) for position in range(size)] == order(size, 11, 12).tolist()


def test_different_seed_epoch_pairs_get_different_keys() -> None:
    values = [-2, -1, 0, 1, 2, 3, 2**32, 2**63, 2**64 + 4]
    assert len({value % 2**64 for value in values}) == len(values)
    pairs = [(seed, epoch) for seed in values for epoch in values]
    assert len({round_keys(seed, epoch) for seed, epoch in pairs}) == len(pairs)
    assert all(len(round_keys(*pair)) == ROUNDS for pair in pairs[:3])


def _documented_vectors() -> list[tuple[int, int, int, list[int]]]:
    text = samplers.feistel.__doc__ or ""
    section = text[text.index("Test vectors") : text.index("Example::")]
    found = re.findall(r"size=(\d+) seed=(-?\d+) epoch=(-?\d+):([\d\s]*)", section)
    return [(int(n), int(s), int(e), [int(v) for v in values.split()]) for n, s, e, values in found]


def test_the_documented_test_vectors_hold() -> None:
    vectors = _documented_vectors()
    assert len(vectors) >= 5
    for size, seed, epoch, expected in vectors:
        assert len(expected) == min(size, 10), (size, seed, epoch)
        perm = FeistelPermutation(size, seed, epoch)
        assert [perm.at(position) for position in range(len(expected))] == expected
        assert perm(torch.arange(len(expected))).tolist() == expected


def test_docstring_examples() -> None:
    result = doctest.testmod(samplers.feistel, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_seed_and_epoch_are_reduced_modulo_two_to_the_64() -> None:
    assert torch.equal(order(1000, -1, 3), order(1000, 2**64 - 1, 3))
    assert torch.equal(order(1000, 5, 2**64 + 3), order(1000, 5, 3))
    assert not torch.equal(order(1000, 5, 2**63 + 3), order(1000, 5, 3))


# -- quality ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [5, 16, 37])
def test_the_position_of_each_index_is_uniform_over_seeds(size: int) -> None:
    """Chi-square over the ``size x size`` table of (position, index) counts.

    100 * size seeds give every cell an expected count of 100; under a uniformly random
    permutation the statistic has mean ``df = (size - 1) ** 2`` and standard deviation
    ``sqrt(2 * df)``, and must stay below ``df + Z_LIMIT * sqrt(2 * df)``.
    """
    seeds = 100 * size
    counts = np.zeros((size, size), dtype=np.int64)
    positions = torch.arange(size)
    for seed in range(seeds):
        counts[positions.numpy(), FeistelPermutation(size, seed, 0)(positions).numpy()] += 1
    expected = seeds / size
    statistic = float(((counts - expected) ** 2 / expected).sum())
    df = (size - 1) ** 2
    assert statistic < df + Z_LIMIT * math.sqrt(2 * df), (statistic, df)


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.double(), b.double()]))[0, 1])


QUALITY_CASES = [(100_000, 0, 0), (100_000, 1, 0), (100_000, 0, 1), (2**17 + 3, 42, 9)]


@pytest.mark.parametrize(("size", "seed", "epoch"), QUALITY_CASES)
def test_no_serial_correlation(size: int, seed: int, epoch: int) -> None:
    """Lagged correlations of the order, and with the position, are within noise.

    For a uniformly random permutation each is about normal with standard deviation
    ``1 / sqrt(size)``. Lag 8 is the stride of one rank's share over 8 ranks.
    """
    values = order(size, seed, epoch)
    limit = Z_LIMIT / math.sqrt(size)
    assert abs(_correlation(values, torch.arange(size))) < limit
    for lag in (1, 2, 3, 8, 64):
        assert abs(_correlation(values[:-lag], values[lag:])) < limit, lag


@pytest.mark.parametrize(("size", "seed", "epoch"), QUALITY_CASES)
def test_runs_are_as_many_as_in_a_random_order(size: int, seed: int, epoch: int) -> None:
    """Runs above/below the median (Wald-Wolfowitz) and runs up/down, as z-scores."""
    values = order(size, seed, epoch)

    above = values >= (size + 1) // 2
    n_above, n_below = int(above.sum()), size - int(above.sum())
    runs = 1 + int((above[1:] != above[:-1]).sum())
    product = 2 * n_above * n_below
    mean = 1 + product / size
    variance = product * (product - size) / (size**2 * (size - 1))
    assert abs(runs - mean) / math.sqrt(variance) < Z_LIMIT

    rising = values[1:] > values[:-1]
    runs_up_down = 1 + int((rising[1:] != rising[:-1]).sum())
    mean = (2 * size - 1) / 3
    variance = (16 * size - 29) / 90
    assert abs(runs_up_down - mean) / math.sqrt(variance) < Z_LIMIT


KEY_PAIRS = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 3), (3, 2), (0, 2**64 - 1), (-1, 0), (7, 8)]


@pytest.mark.parametrize("size", [1000, 2**16 + 1])
def test_different_seeds_and_epochs_give_unrelated_orders(size: int) -> None:
    """Every two key pairs (including swapped ones) share about one fixed position.

    Two independent random permutations agree at ``Poisson(1)`` positions; more than
    12 has probability below ``1e-9``. Their correlation is within noise.
    """
    orders = {pair: order(size, *pair) for pair in KEY_PAIRS}
    for i, first in enumerate(KEY_PAIRS):
        for second in KEY_PAIRS[i + 1 :]:
            agreeing = int((orders[first] == orders[second]).sum())
            assert agreeing <= 12, (first, second, agreeing)
            assert abs(_correlation(orders[first], orders[second])) < Z_LIMIT / math.sqrt(size)


def test_consecutive_epochs_are_unrelated() -> None:
    size = 50_000
    previous = order(size, 123, 0)
    for epoch in range(1, 6):
        current = order(size, 123, epoch)
        assert int((current == previous).sum()) <= 12
        assert abs(_correlation(current, previous)) < Z_LIMIT / math.sqrt(size)
        previous = current


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ((-1, 0, 0), ValueError, ["size", "-1"]),
        ((MAX_SIZE + 1, 0, 0), ValueError, ["size", str(MAX_SIZE + 1)]),
        ((10.0, 0, 0), TypeError, ["size", "10.0"]),
        ((True, 0, 0), TypeError, ["size", "True"]),
        ((10, 1.5, 0), TypeError, ["seed", "1.5"]),
        ((10, False, 0), TypeError, ["seed", "False"]),
        ((10, None, 0), TypeError, ["seed", "None"]),
        ((10, 0, "1"), TypeError, ["epoch", "'1'"]),
        ((10, 0, 2.0), TypeError, ["epoch", "2.0"]),
    ],
)
def test_bad_constructor_arguments_are_named(arguments: tuple, error: type, words: list) -> None:
    with pytest.raises(error) as raised:
        FeistelPermutation(*arguments)
    for word in words:
        assert word in str(raised.value)


def test_integer_likes_are_accepted() -> None:
    reference = order(50, 3, 4)
    assert torch.equal(FeistelPermutation(np.int64(50), 3, 4)(torch.arange(50)), reference)
    assert torch.equal(
        FeistelPermutation(50, torch.tensor(3), np.uint8(4))(torch.arange(50)), reference
    )


@pytest.mark.parametrize("method", ["__call__", "inverse"])
def test_out_of_range_values_are_named(method: str) -> None:
    perm = FeistelPermutation(10, 0, 0)
    name = "positions" if method == "__call__" else "indices"
    for bad in (-1, 10, 2**62):
        with pytest.raises(ValueError, match=rf"{name} must be in \[0, 10\).*got {bad}"):
            getattr(perm, method)(torch.tensor([0, bad, 3]))
    with pytest.raises(ValueError, match=rf"{name} .* got 0"):
        getattr(FeistelPermutation(0, 0, 0), method)(torch.tensor([0]))
    for wrong in (torch.tensor([1.0]), torch.tensor([True]), [1, 2]):
        with pytest.raises(TypeError, match=name):
            getattr(perm, method)(wrong)


def test_bad_single_positions_are_named() -> None:
    perm = FeistelPermutation(10, 0, 0)
    for bad in (-1, 10):
        with pytest.raises(ValueError, match=rf"position must be in \[0, 10\).*got {bad}"):
            perm.at(bad)
    for wrong in (1.0, True, "3"):
        with pytest.raises(TypeError, match="position"):
            perm.at(wrong)  # type: ignore[arg-type]


@pytest.mark.parametrize("with_numpy", [True, False])
@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000, 65537, 299_999, 2**21 + 3])
def test_a_range_of_positions_equals_the_positions_mapped(
    monkeypatch: pytest.MonkeyPatch, with_numpy: bool, size: int
) -> None:
    """``range(lo, hi)`` (no positions built or checked; numpy or torch finding the values
    still walking) gives what ``perm(arange(lo, hi))`` gives, tables or not, and so does
    the order's ``between``."""
    monkeypatch.setattr(samplers.cycle_walk, "numpy", np if with_numpy else None)
    from samplers.plan.orders import FeistelOrder

    bounds = {(0, size), (size // 3, min(size // 3 + 5, size)), (size // 2, size), (size, size)}
    for lo, hi in sorted(bounds):
        expected = FeistelPermutation(size, 5, 2)(torch.arange(lo, hi))
        assert torch.equal(FeistelPermutation(size, 5, 2).range(lo, hi), expected)
        assert torch.equal(FeistelOrder(size, 5, 2).between(lo, hi), expected)
        assert FeistelPermutation(size, 5, 2).range(lo, hi).dtype == torch.int64
        narrow = FeistelOrder(size, 5, 2).between(lo, hi, narrow=True)
        assert torch.equal(narrow.to(torch.int64), expected)
        # In int32 when computed from the round tables (a fresh permutation builds them
        # for a call of at least a table's entries), else in int64.
        bits = (size - 1).bit_length() if size > 1 else 0
        tabled = hi - lo >= 1 << (bits - bits // 2)
        assert narrow.dtype == (torch.int32 if tabled else torch.int64)


@pytest.mark.parametrize("lo, hi", [(-1, 3), (4, 3), (0, 11), ("a", 3)])
def test_a_bad_range_is_named(lo: object, hi: object) -> None:
    with pytest.raises((ValueError, TypeError), match="lo"):
        FeistelPermutation(10, 0, 0).range(lo, hi)  # type: ignore[arg-type]


def test_a_range_reaching_two_to_the_63_is_mapped() -> None:
    perm = FeistelPermutation(MAX_SIZE, 3, 1)
    top = torch.tensor([MAX_SIZE - 3, MAX_SIZE - 2, MAX_SIZE - 1])
    assert torch.equal(perm.range(MAX_SIZE - 3, MAX_SIZE), perm(top))
    assert torch.equal(perm.range(MAX_SIZE - 3, MAX_SIZE, narrow=True), perm(top))
