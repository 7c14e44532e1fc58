"""search/_sobol.py: the GP's startup design in plain Python (no torch, no scipy before the first trial)."""

from __future__ import annotations

import pytest

from sweeplab.search._sobol import MAX_DIM, Sobol


@pytest.mark.parametrize("dim", [1, 2, 6, 40, MAX_DIM])
def test_the_unscrambled_sequence_is_sobols_as_scipy_gives_it(dim: int) -> None:
    qmc = pytest.importorskip("scipy.stats.qmc")
    reference = qmc.Sobol(dim, scramble=False, bits=30).random(512).tolist()
    mine = Sobol(dim, scramble=False)
    assert [mine.point(k) for k in range(512)] == reference


@pytest.mark.parametrize(("dim", "seed"), [(1, 0), (6, 3), (9, 2**40 + 7), (256, 2**62 + 3)])
def test_the_scrambled_design_is_torchs_to_the_bit(dim: int, seed: int) -> None:
    """The GP's startup design was torch's SobolEngine: the same seed must give the same points (its measured
    search quality, docs/benchmarks.md, then holds), the first one in float32 as torch computes it."""
    torch = pytest.importorskip("torch")
    reference = torch.quasirandom.SobolEngine(dim, scramble=True, seed=seed).draw(130, dtype=torch.float64)
    design = Sobol(dim, seed)
    assert [design.point(k) for k in range(130)] == reference.tolist()


@pytest.mark.parametrize("seed", [0, 7, 2**40])
def test_a_scrambled_design_puts_one_point_in_each_stratum_of_every_axis(seed: int) -> None:
    design = Sobol(9, seed)
    for m in range(1, 8):
        points = [design.point(k) for k in range(2**m)]
        for axis in range(9):
            assert sorted(int(p[axis] * 2**m) for p in points) == list(range(2**m))


def test_the_design_depends_on_the_seed_only() -> None:
    a, b, c = Sobol(4, 3), Sobol(4, 3), Sobol(4, 4)
    assert [a.point(k) for k in range(20)] == [b.point(k) for k in reversed(range(20))][::-1]
    assert a.point(5) != c.point(5)
    assert all(0.0 <= x < 1.0 for k in range(100) for x in a.point(k))


def test_more_axes_than_the_direction_numbers_are_refused() -> None:
    with pytest.raises(ValueError, match=str(MAX_DIM)):
        Sobol(MAX_DIM + 1)
