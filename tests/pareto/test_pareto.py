"""The Pareto module: dominance, front ranks and hypervolume, by hand and against Optuna's implementation."""

from __future__ import annotations

import random

import pytest

from sweeplab.pareto import default_reference, dominates, hypervolume, nondominated_ranks, pareto_front, to_min
from sweeplab.types import Goal

MIN, MAX = Goal.MINIMIZE, Goal.MAXIMIZE


def test_dominates_needs_one_strict_improvement() -> None:
    assert dominates((1, 1), (1, 2))
    assert not dominates((1, 2), (1, 2))
    assert not dominates((0, 3), (1, 2))


def test_to_min_negates_maximised_and_drops_missing() -> None:
    assert to_min((0.9, 10), (MAX, MIN)) == (-0.9, 10.0)
    assert to_min((None, 10), (MAX, MIN)) is None
    assert to_min((float("nan"), 10), (MAX, MIN)) is None


def test_ranks_peel_fronts_with_mixed_goals() -> None:
    # accuracy (maximize) vs latency (minimize)
    pts = [(0.9, 50), (0.8, 20), (0.85, 60), (0.7, 30), (0.9, 50), (None, 1)]
    assert nondominated_ranks(pts, (MAX, MIN)) == [1, 1, 2, 2, 1, None]
    assert pareto_front(pts, (MAX, MIN)) == [0, 1, 4]


def test_hypervolume_two_objectives_by_hand() -> None:
    # minimise both; reference (4, 4): staircase 1x3 + 1x2 + 1x1 minus overlaps = 3 + 2 + 1 = 6
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (MIN, MIN), (4, 4)) == pytest.approx(6.0)
    # a dominated point and one outside the reference add nothing
    assert hypervolume([(1, 3), (2, 2), (3, 1), (3, 3), (5, 0)], (MIN, MIN), (4, 4)) == pytest.approx(6.0)
    # maximised objective: accuracy 0.9 with reference 0.5, latency 10 with reference 20 -> 0.4 * 10
    assert hypervolume([(0.9, 10)], (MAX, MIN), (0.5, 20)) == pytest.approx(4.0)
    assert hypervolume([], (MIN, MIN), (1, 1)) == 0.0


def test_hypervolume_three_objectives_by_hand() -> None:
    # two boxes [0,2]x[0,2]x[0,1] (volume 4) and [0,1]x[0,1]x[0,2] (volume 2) overlapping in 1
    assert hypervolume([(0, 0, 1), (1, 1, 0)], (MIN, MIN, MIN), (2, 2, 2)) == pytest.approx(4 + 2 - 1)


@pytest.mark.parametrize("dims", [2, 3, 4])
def test_hypervolume_matches_optuna(dims: int) -> None:
    hv_mod = pytest.importorskip("optuna._hypervolume")
    np = pytest.importorskip("numpy")
    rng = random.Random(dims)
    for _ in range(5):
        pts = [tuple(rng.random() for _ in range(dims)) for _ in range(25)]
        ref = (1.1,) * dims
        ours = hypervolume(pts, (MIN,) * dims, ref)
        theirs = hv_mod.compute_hypervolume(np.asarray(pts), np.asarray(ref))
        assert ours == pytest.approx(theirs, rel=1e-9)


def test_default_reference_is_past_the_worst_value() -> None:
    ref = default_reference([(0.9, 10), (0.5, 30)], (MAX, MIN))
    assert ref == pytest.approx((0.46, 32.0))
    assert default_reference([(None, 1)], (MAX, MIN)) is None


def test_bad_reference_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="reference point"):
        hypervolume([(1, 1)], (MIN, MIN), (1, float("nan")))
