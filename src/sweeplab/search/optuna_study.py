"""The study `sweep.study()` returns: the sweep's Optuna study, read from its journal, that refuses to run
trials of its own. The sweep owns the study (its driver creates and ends every trial, and the store holds
the same trials): trials added by `study.optimize` or `study.ask`/`tell` on it would be in the study but
not in the sweep (`sweep.best`, `trials()`, the dashboard, `sweeplab resume`), a silent disagreement."""

from __future__ import annotations

from functools import cache
from typing import Any

from sweeplab.errors import UserError

__all__ = ["sweep_study"]


def _refused(call: str, name: str) -> UserError:
    return UserError(
        f"study.{call}() on the study of sweep {name!r}: the sweep owns it (its trials are in the store too), "
        f"read it only. To run more trials, start a sweep seeded by these ones: sl.optimize(objective, "
        f"n_trials=N, study=sweep.study()) (or `sweeplab sweep --optuna MODULE:FUNCTION --from-study ...`); "
        f"`sweeplab resume {name}` continues an interrupted one")


@cache
def _study_class() -> type:
    import optuna

    class SweepStudy(optuna.study.Study):  # type: ignore[misc]
        """An Optuna Study whose optimize/ask/tell/add_trial(s) raise a UserError naming what to use
        (`enqueue_trial`, which adds a waiting trial, works: a sweep seeded by the study runs it first)."""

        def optimize(self, *args: Any, **kwargs: Any) -> None:
            raise _refused("optimize", self.study_name)

        def ask(self, *args: Any, **kwargs: Any) -> Any:
            raise _refused("ask", self.study_name)

        def tell(self, *args: Any, **kwargs: Any) -> Any:
            raise _refused("tell", self.study_name)

        def add_trial(self, trial: Any) -> None:
            if trial.state != optuna.trial.TrialState.WAITING:   # enqueue_trial adds a WAITING one: kept
                raise _refused("add_trial", self.study_name)
            super().add_trial(trial)

        def add_trials(self, trials: Any) -> None:
            trials = list(trials)
            if any(t.state != optuna.trial.TrialState.WAITING for t in trials):
                raise _refused("add_trials", self.study_name)
            super().add_trials(trials)

    return SweepStudy


def sweep_study(study: Any) -> Any:
    """`study` (the sweep's, opened from its journal) as a SweepStudy: every reading call works as on
    `optuna.Study` (it is one), the calls that run or add trials raise."""
    study.__class__ = _study_class()
    return study
