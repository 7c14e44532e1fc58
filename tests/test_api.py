"""`sweeplab.run_sweep`: the CLI's `sweep` as a function, on a real store and real worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

import sweeplab as sl
from sweeplab.store import Store
from sweeplab.types import SweepState

TRIALS = Path(__file__).resolve().parent / "fixtures" / "trials.py"


def test_run_sweep_runs_a_tiny_sweep_to_its_end(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"function: {TRIALS}:quick\nmethod: grid\nmetric: {{name: loss, goal: minimize}}\n"
                    "parameters: {x: {values: [1.0, 2.0]}, steps: {values: [2, 4]}}\n")
    outcome = sl.run_sweep(spec, store=tmp_path / "store", workers=2)
    assert outcome.state is SweepState.FINISHED and outcome.exit_code == 0
    assert outcome.counts.get("completed") == 4
    assert outcome.best_value == pytest.approx(0.25) and outcome.best_params["steps"] == 4
    assert outcome.sweep == "sweep" or outcome.sweep == tmp_path.name   # named after the file, as the CLI does
    st = Store.open(tmp_path / "store", readonly=True)
    try:
        row = st.sweep_row(outcome.sweep)
        assert row is not None and row["backend"] == "local"   # recorded for `resume`, as the CLI does
    finally:
        st.close()
    again = sl.run_sweep({"function": f"{TRIALS}:quick", "method": "grid", "parameters": {"x": {"value": 1.0}}},
                         store=tmp_path / "store", name=outcome.sweep, workers=1)
    assert again.sweep == f"{outcome.sweep}-2" and again.counts.get("completed") == 1


def test_run_sweep_bad_input_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(sl.SpecError, match="method: unknown method"):
        sl.run_sweep({"function": f"{TRIALS}:quick", "method": "gird", "parameters": {}}, store=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_run_sweep_unknown_backend_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(sl.UserError, match="unknown backend 'lcoal'; expected local or ray"):
        sl.run_sweep({"function": f"{TRIALS}:quick", "method": "grid", "parameters": {"x": {"value": 1}}},
                     store=tmp_path / "s", backend="lcoal")
    assert not (tmp_path / "s").exists()


@pytest.fixture
def workers_at_search(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Method `probe` (random search) that records, each time the driver builds it, how many worker
    processes this process has already started."""
    import os

    import psutil

    from sweeplab.search import SEARCHERS, RandomSearcher

    seen: list[int] = []

    class Probe(RandomSearcher):
        def __init__(self, *args, **kwargs) -> None:
            seen.append(sum("sweeplab.backends.worker" in " ".join(c.cmdline())
                            for c in psutil.Process(os.getpid()).children()))
            super().__init__(*args, **kwargs)

    monkeypatch.setitem(SEARCHERS, "probe", Probe)
    return seen


PROBE = {"function": f"{TRIALS}:quick", "method": "probe", "metric": {"name": "loss"},
         "parameters": {"x": {"min": 0.0, "max": 1.0}}}


def test_workers_boot_while_the_searcher_is_built(tmp_path: Path, workers_at_search: list[int]) -> None:
    """As in the CLI, the workers start before the driver builds its searcher (TPE's and the GP's import
    Optuna: ~0.2 s that the first trial used to wait for on top of the workers' own start)."""
    outcome = sl.run_sweep({**PROBE, "budget": {"trials": 2}}, store=tmp_path / "store", workers=2)
    assert outcome.exit_code == 0
    assert workers_at_search and workers_at_search[0] == 2


def test_cli_resume_boots_its_workers_while_the_searcher_is_replayed(tmp_path: Path, workers_at_search: list[int],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweeplab resume` too: its workers start before the driver rebuilds the searcher and replays the
    sweep's history into it (Optuna's import, then every trial told again), not after."""
    import typer

    from sweeplab.cli.resuming import resume

    monkeypatch.chdir(tmp_path)
    first = sl.run_sweep({**PROBE, "budget": {"trials": 1}}, store=tmp_path / "store", name="s", workers=1)
    assert first.counts.get("completed") == 1
    workers_at_search.clear()
    with pytest.raises(typer.Exit) as ended:
        resume("s", trials="+2", workers=2, backend=None, address=None, store=tmp_path / "store", gpus=None,
               hard=False, spec_file=None, fork=None, quiet=True)
    assert ended.value.exit_code == 0
    assert workers_at_search and workers_at_search[0] == 2
    assert sl.load("s", store=tmp_path / "store").status()["counts"].get("completed") == 3
