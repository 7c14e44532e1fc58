"""Multi-objective TPE with early stopping: the "good" group is the best tenth of the trials that have
values. Optuna sizes it as a tenth of every finished trial, pruned ones included, although with several
objectives it can rank only the completed ones; with ASHA pruning most trials, that made most completed
trials "good" and TPE stopped telling good regions from mediocre ones (benchmarks/multiobjective.py)."""

from __future__ import annotations

import pytest

from sweeplab.search import make_searcher
from sweeplab.space import parse_parameters
from sweeplab.types import Goal, TrialState

optuna = pytest.importorskip("optuna")

SPACE = parse_parameters({"x": {"min": 0.0, "max": 1.0}, "y": {"min": 0.0, "max": 1.0}})
GOALS = ("maximize", "minimize")


@pytest.mark.parametrize("method", ["tpe", "bayes"])
def test_the_good_group_is_a_tenth_of_the_completed_trials_not_of_the_pruned_ones_too(method, monkeypatch):
    import optuna.samplers._tpe.sampler as tpe

    seen: list[list[int]] = []
    split = tpe._split_trials

    def spy(study, trials, n_below):
        below, above = split(study, trials, n_below)
        seen.append(sorted(t.number for t in below))
        return below, above

    monkeypatch.setattr(tpe, "_split_trials", spy)
    s = make_searcher(method, SPACE, Goal.MAXIMIZE, 3, prefetch=False, goals=GOALS)
    for k in range(50):   # 10 completed, trial 0 dominating the rest (a chain of ranks), then 40 pruned
        p = s.ask()
        if k < 10:
            s.tell(k, p, TrialState.COMPLETED, (1.0, 0.0) if k == 0 else (0.5 - 0.01 * k, 1.0 + k))
        else:
            s.tell(k, p, TrialState.PRUNED, None)
    seen.clear()
    s.ask()
    assert seen and all(below == [0] for below in seen), seen   # ceil(0.1 * 10) = 1; was 5 (ceil(0.1 * 50))
    trials = s.study.get_trials(deepcopy=False)
    assert sum(t.state.name == "PRUNED" for t in trials) == 40   # still told: their regions count as bad


def test_without_pruned_trials_the_good_group_is_optunas():
    import optuna.samplers._tpe.sampler as tpe

    s = make_searcher("tpe", SPACE, Goal.MAXIMIZE, 3, prefetch=False, goals=GOALS)
    for k in range(30):
        p = s.ask()
        s.tell(k, p, TrialState.COMPLETED, (p["x"], p["y"] + p["x"] ** 2))
    s.ask()
    assert s.study.sampler._gamma(30) == tpe.default_gamma_multiobjective(30) == 3
