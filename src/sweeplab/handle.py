"""The handle of a sweep in a store: what `sl.sweep`, `sl.optimize` and `sl.load` return.

It reads the store (as `sweeplab status` and the dashboard do) and, for a sweep running in this process,
waits for it or stops it through the runner that `sweeplab.api` gave it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeplab.driver import SweepOutcome
    from sweeplab.store import Store

__all__ = ["Sweep"]


class Sweep:
    """A sweep in a store: running in this process (from `sl.sweep` / `sl.optimize`) or not (`sl.load`).

    All reads go to the store, so they show what the dashboard and `sweeplab status` show.
    """

    def __init__(self, name: str, store: str | Path, *, runner: Any = None) -> None:
        """`runner`: the sweeplab.api runner of a sweep running in this process (wait, stop, outcome)."""
        self.name = name
        self.store = Path(store)
        self._runner = runner

    def __repr__(self) -> str:
        return f"Sweep({self.name!r}, store={str(self.store)!r})"

    # ------------------------------------------------------------------ control
    @property
    def done(self) -> bool:
        """Not running in this process (finished, stopped, failed, or loaded with `sl.load`)."""
        return self._runner is None or self._runner.wait(0)

    def wait(self, timeout: float | None = None) -> SweepOutcome | None:
        """Block until the sweep ends (or `timeout` seconds); its outcome, None while still running.
        An error of the sweep's thread is raised here."""
        runner = self._runner
        if runner is None:
            return None
        if not runner.wait(timeout):
            return None
        if runner.error is not None and not isinstance(runner.error, KeyboardInterrupt):
            raise runner.error
        return runner.outcome

    def stop(self, wait: bool = True) -> SweepOutcome | None:
        """Stop a sweep running in this process as Ctrl-C would (resumable); its outcome when `wait`."""
        runner = self._runner
        if runner is None or runner.wait(0):
            return runner.outcome if runner else None
        runner.driver.request_stop()
        return self.wait() if wait else None

    @property
    def outcome(self) -> SweepOutcome | None:
        return self._runner.outcome if self._runner is not None else None

    # ------------------------------------------------------------------ reading
    def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        from sweeplab.store import Store

        st = Store.open(self.store, readonly=True)
        try:
            return fn(st, self.name, *args)
        finally:
            st.close()

    def status(self) -> dict[str, Any]:
        """{"name", "state", "counts", "trials", "best", "end_reason"}: the sweep at a glance."""
        from sweeplab.store import queries

        summary = self._read(queries.sweep_status)
        trials = summary["trials"]
        counts: dict[str, int] = {}
        for t in trials:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        row = summary["sweep"]
        return {"name": self.name, "state": row.get("state"), "counts": counts, "trials": len(trials),
                "best": self.best, "end_reason": row.get("end_reason")}

    @property
    def best(self) -> dict[str, Any] | None:
        """The best completed trial: {"trial", "value", "params", "metrics"}, or None."""
        from sweeplab.store import queries

        best = self._read(queries.best_trial)
        if best is not None:
            best.pop("sweep", None)
        return best

    def study(self) -> Any:
        """The Optuna study of a sweep of an Optuna objective (`sl.optimize`, `sweeplab sweep --optuna`), as
        the code after `study.optimize` reads it: `study.best_trial`, `study.best_trials`,
        `study.trials_dataframe()`, `optuna.visualization.plot_optimization_history(study)`. Loaded from the
        sweep's journal in the store (Optuna's trial numbers; failed attempts that were retried are one
        trial); read it, do not optimize it (the sweep owns it)."""
        from sweeplab.errors import UserError
        from sweeplab.search.optuna_objective import open_study, study_dir

        directory = study_dir(self.store.resolve(), self.name)
        if not (directory / "settings.pkl").exists():
            raise UserError(f"sweep {self.name!r} is not a sweep of an Optuna objective: it has no Optuna study "
                            f"(sl.optimize or `sweeplab sweep --optuna` make one)")
        from sweeplab.notebook import optuna_settings_kept
        from sweeplab.search.optuna_study import sweep_study

        with optuna_settings_kept():   # loading it quiets Optuna process-wide: put back after
            return sweep_study(open_study(directory))   # optimize/ask/tell on it raise: the sweep owns it

    @property
    def pareto(self) -> list[dict[str, Any]]:
        """The feasible Pareto front when the sweep has several objectives: what `sweeplab best --json` prints,
        [{"trial", "values": {objective: value}, "params"}]; with one objective, [best] (or [] before any
        trial completed)."""
        from sweeplab.store import queries

        if len(self._read(queries.sweep_summary)["sweep"]["objectives"]) < 2:
            best = self.best
            return [best] if best is not None else []
        return self._read(queries.pareto_front)

    def trials(self) -> Any:
        """A pandas DataFrame, one row per trial: number, state, value, params.*, attempts, started, ended,
        duration (seconds), reason, metrics.* (final values). Needs pandas (`pip install 'sweeplab[pandas]'`)."""
        from sweeplab._imports import optional_import
        from sweeplab.store import queries

        pd = optional_import("pandas", "pandas", "Sweep.trials()")
        rows = []
        for t in self._read(queries.sweep_status)["trials"]:
            row = {k: t[k] for k in ("number", "state", "value", "attempts", "started", "ended", "reason")}
            row["duration"] = (t["ended"] - t["started"]) if t["ended"] and t["started"] else None
            row.update({f"params.{k}": v for k, v in _flat(t["params"] or {}).items()})
            row.update({f"metrics.{k}": v for k, v in (t["metrics"] or {}).items()})
            rows.append(row)
        columns = ["number", "state", "value", "attempts", "started", "ended", "reason", "duration"]
        return pd.DataFrame(rows, columns=None if rows else columns).set_index("number")   # no trial yet: empty

    def metrics(self, trial: int | None = None) -> Any:
        """Every reported metric point as a pandas DataFrame: trial, key, step, value (one trial's with
        `trial`)."""
        from sweeplab._imports import optional_import

        pd = optional_import("pandas", "pandas", "Sweep.metrics()")
        if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int) or trial < 0):
            from sweeplab.errors import UserError

            raise UserError(f"metrics(trial={trial!r}): not a trial number; expected an integer >= 0, e.g. 3")
        rows = self._read(_metric_rows, trial)
        return pd.DataFrame(rows, columns=["trial", "key", "step", "value"])


def _metric_rows(st: Store, name: str, trial: int | None) -> list[dict[str, Any]]:
    row = st.sweep_row(name)
    if row is None:   # deleted since the handle was made
        from sweeplab.store.queries import unknown_sweep

        raise unknown_sweep(st, name)
    rows: list[dict[str, Any]] = []
    trials = st.trial_rows(int(row["id"]))
    if trial is not None and not any(int(t["number"]) == trial for t in trials):
        from sweeplab.errors import UserError

        raise UserError(f"sweep {name!r} has no trial {trial} ("
                        f"{f'it has trials 0..{len(trials) - 1}' if trials else 'it has no trials yet'})")
    for t in trials:
        if trial is not None and int(t["number"]) != trial:
            continue
        for key, points in st.metric_history(int(t["id"])).items():
            rows.extend({"trial": int(t["number"]), "key": key, "step": s, "value": v} for s, v in points)
    return rows


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


