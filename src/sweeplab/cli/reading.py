"""`sweeplab status` and `sweeplab best`: what the store says about sweeps and trials."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from sweeplab.cli.app import _open_store, app, store_option
from sweeplab.cli.output import Table, _fmt, _print_json, command, console, escape, utf8_argument

STATUS_ROWS = 20   # trials `status SWEEP` shows by default: a 10,000-trial sweep answers as fast as a small one


# ---------------------------------------------------------------------------------------------- reading
@app.command()
def status(
    sweep_name: Optional[str] = typer.Argument(None, callback=utf8_argument, metavar="[SWEEP]",
                                                    help="one sweep's trials (default: every sweep)"),
    as_json: bool = typer.Option(False, "--json", help="stable JSON (see docs/api.md)"),
    store: Optional[Path] = store_option(),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0,
                                        help=f"show the N newest trials (and the running ones, the best) "
                                             f"(default {STATUS_ROWS}; --json: every trial)"),
    show_all: bool = typer.Option(False, "--all", "-a", help="show every trial"),
) -> None:
    """Sweeps in the store, or one sweep's trials (the newest, the running ones, the best; --all: every one)."""
    from sweeplab.store import queries

    st = _open_store(store, readonly=True)
    if sweep_name is None:
        sweeps = queries.list_sweeps(st)
        if as_json:
            _print_json({"sweeps": sweeps})
            return
        table = Table("sweep", "state", "method", "trials", "completed", "pruned", "failed", "running", "best")
        for s in sweeps:
            c = s["counts"]
            how, _ = _driver(st, s)
            state = s["state"] + (f" (driver {how})" if how else "")
            table.add_row(s["name"], state, s["method"], str(s["trials"]), str(c.get("completed", 0)),
                          str(c.get("pruned", 0) + c.get("stopped_by_rule", 0)), str(c.get("failed", 0)),
                          str(c.get("running", 0)), _best_cell(st, s))
        console.print(table)
        return
    if show_all or (as_json and limit is None):
        limit = None
    elif limit is None:
        limit = STATUS_ROWS
    data = queries.sweep_status(st, sweep_name, limit=limit)
    if as_json:
        _print_json(data)
        return
    s = data["sweep"]
    console.print(f"[bold]{escape(s['name'])}[/bold]  {s['state']}  {escape(s['method'])}  "
                  f"{escape(_headline(st, s, data['trials']))}", markup=True)
    if s.get("end_reason"):
        console.print(f"ended: {s['end_reason'].splitlines()[0]}")
    how, pid = _driver(st, s)
    if how == "gone":
        console.print(f"its driver (pid {pid}) is gone: its running trials stay `running` until "
                      f"`{command('resume', s['name'])}` continues the sweep", markup=False)
    elif how == "paused":
        console.print(f"its driver (pid {pid}) is paused (Ctrl-Z or SIGSTOP): nothing happens until "
                      f"`kill -CONT {pid}` or `fg` in its terminal continues it", markup=False)
    budget, spend = s.get("budget") or {}, s.get("spend") or {}
    if budget or spend:
        parts = []
        if budget.get("trials"):
            parts.append(f"trials {s['trials']}/{budget['trials']}")
        if spend.get("seconds") is not None:
            parts.append(f"time {spend['seconds']:.0f}s" + (f"/{_limit(budget['time'], 's')}" if budget.get("time")
                                                            else ""))
        if spend.get("cpu_seconds"):
            parts.append(f"cpu-hours {_hours(spend['cpu_seconds'])}"
                         + (f"/{_limit(budget['cpu_hours'])}" if budget.get("cpu_hours") else ""))
        if spend.get("gpu_seconds"):
            parts.append(f"gpu-hours {_hours(spend['gpu_seconds'])}"
                         + (f"/{_limit(budget['gpu_hours'])}" if budget.get("gpu_hours") else ""))
        for name, limit in (budget.get("cost") or {}).items():
            parts.append(f"{name} {spend.get(f'cost.{name}', 0.0):.4g}/{_limit(limit)}")
        console.print("spend: " + ", ".join(parts))
    objectives = [o["name"] for o in s.get("objectives") or []]
    several = len(objectives) > 1
    marks = any("feasible" in t for t in data["trials"])
    if marks and s.get("method") == "optuna":   # its one constraint is Optuna's own, on every sweep of an objective:
        marks = any(t.get("feasible") is False for t in data["trials"])   # shown once it sets some apart
    head = ["#", "state", *(objectives if several else ["value"]), *(["rank"] if several else []),
            *(["feasible"] if marks else []), "attempts", "params", "reason"]
    table = Table(*head)
    for t in data["trials"]:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in (t.get("params") or {}).items())
        reason = " ".join((t.get("reason") or "").split())   # one line per trial
        values = ([_fmt((t.get("values") or {}).get(n)) for n in objectives] + [_rank(t.get("rank"))]
                  if several else [_fmt(t.get("value"))])
        feasible = [{True: "yes", False: "INFEASIBLE"}.get(t.get("feasible"), "")] if marks else []
        table.add_row(str(t["number"]), t["state"], *values, *feasible, str(t.get("attempts", "")),
                      params, reason[:80] if console.is_terminal else reason)   # a pipe gets it whole
    console.print(table)
    if data.get("omitted"):
        best = "the Pareto front" if several else "the best"
        console.print(f"{len(data['trials'])} of {s['trials']} trials shown: the newest, the running ones and "
                      f"{best}; --all shows every trial, --limit N the N newest", markup=False)
    if several:
        console.print("rank 1: the feasible Pareto front (`sweeplab best` lists it)")


def _hours(seconds: float) -> str:
    """Hours spent, to 3 decimals, or 3 significant digits below 0.001 (a tiny budget's spend is not 0.000)."""
    hours = seconds / 3600
    return f"{hours:.3f}" if hours >= 0.001 else f"{hours:.3g}"


def _limit(value: Any, unit: str = "") -> str:
    """A budget's limit: a number with its unit (`1800s`), or as the store holds it when that is text (`2h`: a
    spec kept as written, by the synthetic store or another writer; the driver stores numbers)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}{unit}"
    return str(value)


def _headline(st: Any, s: dict[str, Any], trials: list[dict[str, Any]]) -> str:
    """The sweep's result in one line: its best value, or with several objectives its front and the front's
    hypervolume (the best value of the first objective alone would not be the answer)."""
    objectives = s.get("objectives") or []
    if len(objectives) < 2:
        return f"{(s.get('goal') or '')} {s.get('metric') or ''}  best {_fmt(s['best'])}"
    from sweeplab.store import queries

    goals = ", ".join(f"{o['goal']} {o['name']}" for o in objectives)
    front = sum(1 for t in trials if t.get("rank") == 1)   # every front trial is among the rows shown
    volumes = [v for v in queries.hypervolume_series(st, s["name"])["hypervolume"] if v is not None]
    hv = f", hypervolume {_fmt(volumes[-1])}" if volumes else ""
    return f"{goals}  front {front} trial(s){hv}"


def _driver(st: Any, s: dict[str, Any]) -> tuple[str, int]:
    """How the recorded driver of a `running` sweep is, when that is worth saying, and its pid: "gone"
    (`queries.driver_status`), "paused" (a stopped process, Ctrl-Z or SIGSTOP: it does nothing until continued,
    though the sweep reads `running`), else ""."""
    if s.get("state") != "running":
        return "", 0
    from sweeplab.store import queries

    row = st.sweep_row(s["name"])
    status, driver, proc = queries.driver_status(row) if row is not None else ("none", None, None)
    if status == "gone" and driver is not None:
        return "gone", int(driver["pid"])
    if status == "alive" and proc is not None:
        import psutil

        try:
            if proc.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                return "paused", int(proc.pid)
        except psutil.Error:
            pass
    return "", 0


def _best_cell(st: Any, s: dict[str, Any]) -> str:
    """A sweep's result in the list of sweeps: its best value, or with several objectives the size of its
    feasible Pareto front (no one value is best; the first objective's best is one end of the front)."""
    if len(s.get("objectives") or []) < 2:
        return _fmt(s["best"])
    from sweeplab.store import queries

    return f"front {len(queries.pareto_front(st, s['name']))}"


def _rank(rank: Optional[int]) -> str:
    return "" if rank is None else ("1 (front)" if rank == 1 else str(rank))


@app.command()
def best(
    sweep_name: str = typer.Argument(..., callback=utf8_argument, metavar="SWEEP", help="a sweep in the store"),
    as_json: bool = typer.Option(False, "--json", help="stable JSON (see docs/api.md)"),
    store: Optional[Path] = store_option(),
) -> None:
    """The best completed trial of a sweep (with several objectives: its Pareto front)."""
    from sweeplab.store import queries

    st = _open_store(store, readonly=True)
    # The sweep alone (a clear error when it does not exist): its trials are read only where needed.
    data: dict[str, Any] = {"sweep": queries.sweep_summary(st, sweep_name)["sweep"], "trials": []}
    if len(data["sweep"].get("objectives") or []) > 1:
        _print_front(sweep_name, queries.pareto_front(st, sweep_name), data, as_json)
        return
    b = queries.best_trial(st, sweep_name)
    if b is None and not data["sweep"].get("metric"):
        data = queries.sweep_status(st, sweep_name)   # no metric: every trial, to find the one completed
        b = _only_completed(data)
    if b is None:
        if as_json:
            _print_json(None)
        elif not data["sweep"].get("metric") and any(t["state"] == "completed" for t in data["trials"]):
            console.print(f"{sweep_name}: the sweep declares no metric.name, so no trial is best; "
                          f"`{command('status', sweep_name, '--json')}` lists each trial's metrics")
        else:
            console.print(f"{sweep_name}: {_no_best_why(data['sweep'])}", markup=False)
        raise typer.Exit(1)
    if as_json:
        _print_json(b)
        return
    if b["value"] is None:
        console.print(f"best of {sweep_name}: trial {b['trial']} (its only completed trial; no metric declared)")
    else:
        console.print(f"best of {sweep_name}: trial {b['trial']}, value {_fmt(b['value'])}")
    for k, v in (b.get("params") or {}).items():
        console.print(f"    {k} = {v!r}", markup=False)
    if b["value"] is None:
        for k, v in (b.get("metrics") or {}).items():
            console.print(f"    metric {k} = {_fmt(v)}", markup=False)


def _no_best_why(sweep: dict[str, Any]) -> str:
    """Why a sweep with a metric has no best trial: none completed with a value yet, or those that did broke
    a constraint (they have values, which `status` shows beside INFEASIBLE)."""
    completed = (sweep.get("counts") or {}).get("completed", 0)
    if sweep.get("constraints") and completed:
        return (f"no completed feasible trial yet: the {completed} completed trial(s) are infeasible or have no "
                "value (`sweeplab status` shows which constraint each broke)")
    return "no completed trial with a value yet"


def _print_front(sweep_name: str, front: list[dict[str, Any]], data: dict[str, Any], as_json: bool) -> None:
    """Several objectives: the feasible Pareto front (JSON: a list of {"trial", "values", "params"})."""
    if not front:
        if as_json:
            _print_json([])
        else:
            console.print(f"{sweep_name}: no completed feasible trial with every objective yet")
        raise typer.Exit(1)
    if as_json:
        _print_json(front)
        return
    goals = ", ".join(f"{o['goal']} {o['name']}" for o in data["sweep"]["objectives"])
    console.print(f"Pareto front of {sweep_name} ({goals}): {len(front)} trial(s)", markup=False)
    for f in front:
        values = ", ".join(f"{k} {_fmt(v)}" for k, v in f["values"].items())
        params = ", ".join(f"{k}={v!r}" for k, v in (f.get("params") or {}).items())
        console.print(f"  trial {f['trial']}: {values}    {params}", markup=False)


def _only_completed(data: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Without a declared metric, the answer for a sweep with exactly one completed trial (a `run`): it,
    with its final metrics and no value. With several, nothing says which is best."""
    done = [t for t in data["trials"] if t["state"] == "completed"]
    if len(done) != 1:
        return None
    t = done[0]
    return {"sweep": data["sweep"]["name"], "trial": t["number"], "value": None,
            "params": t.get("params") or {}, "metrics": t.get("metrics")}
