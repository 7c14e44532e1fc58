"""The Python API in a real Jupyter kernel (nbclient + ipykernel, the `notebook` extra): the progress line
renders and updates in the cell's output, a function from a module next to the notebook runs in worker
processes, and so does a function defined in a cell (shipped by value); a failing cell function's traceback
shows the cells' code; interrupting the kernel stops a blocking sweep and leaves it resumable; a module the
kernel imports from a path a cell added is found by the workers."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SRC = str(Path(__file__).resolve().parents[1] / "src")
pytestmark = pytest.mark.slow

CELLS = [
    "import sweeplab as sl\nfrom trials import quick",
    "spec = {'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
    "        'parameters': {'x': {'values': [1.0, 2.0]}, 'steps': {'values': [2, 4]}}}\n"
    "sweep = sl.sweep(spec, fn=quick, store='st', workers=2, name='nb')",
    "import os\n"
    "def train(config, run):\n    return {'loss': config['x'] * 10, 'pid': os.getpid()}\n"
    "cell = sl.sweep(spec, fn=train, store='st', workers=2, name='cell', progress=False)\n"
    "pids = set(cell.trials()['metrics.pid'])\n"
    "print('cell best', cell.best['value'], len(pids) >= 1, os.getpid() not in pids)",
    "print(sweep.trials().shape, sweep.best['value'])",
]


def test_a_sweep_from_a_notebook_shows_progress_and_runs_cell_functions_in_workers(tmp_path, monkeypatch):
    shutil.copy(FIXTURES / "trials.py", tmp_path / "trials.py")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, *sys.path[1:]]))   # the kernel sees this sweeplab
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = [o for o in nb.cells[1].outputs if o.get("output_type") == "display_data"]
    assert len(shown) == 1                                           # one line, updated in place
    text = shown[0]["data"]["text/plain"]
    assert text.startswith("nb: 4 done (0 running) | best 0.25 (trial"), text   # the last update
    ran = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert ran.strip() == "cell best 10.0 True True", ran         # in worker processes, not the kernel
    assert "".join(o.get("text", "") for o in nb.cells[3].outputs).startswith("(4, ")


def _execute(cells, tmp_path, monkeypatch, timeout=300):
    """Run `cells` in a real Jupyter kernel in `tmp_path`; the notebook with its outputs (errors kept)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, *sys.path[1:]]))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _text(cell, name="stdout"):
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == name)


def _errors(cell):
    return [o for o in cell.outputs if o.get("output_type") == "error"]


def test_a_failing_cell_function_shows_its_traceback_with_the_cells_code(tmp_path, monkeypatch):
    """The traceback of a trial that raises names the cells (`Cell In[N]`) and shows their lines, as IPython
    does for code run in the kernel; not cloudpickle's `<dynamic-code>` without source. The sweep's failure
    is shown in the cell that ran it (as the CLI prints it), not only kept in the store."""
    nb = _execute([
        "import sweeplab as sl\n"
        "spec = {'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
        "        'parameters': {'x': {'values': [1.0]}}}",
        "def helper(x):\n    return x / 0",
        "def bad(config, run):\n    y = config['x']\n    return {'loss': helper(y)}\n"
        "sweep = sl.sweep(spec, fn=bad, store='st', workers=1, name='bad', progress=False)",
        "print(sweep.status()['end_reason'])",
    ], tmp_path, monkeypatch)
    assert not any(_errors(c) for c in nb.cells)
    shown = _text(nb.cells[3])
    assert 'File "Cell In[3]", line 3, in bad' in shown and "return {'loss': helper(y)}" in shown, shown
    assert 'File "Cell In[2]", line 2, in helper' in shown and "return x / 0" in shown, shown
    assert "<dynamic-code>" not in shown
    told = _text(nb.cells[2], "stderr")
    assert "ZeroDivisionError" in told and "Cell In[3]" in told, told


def test_interrupting_the_kernel_stops_a_blocking_sweep_and_leaves_it_resumable(tmp_path, monkeypatch):
    """Jupyter's "interrupt kernel" (SIGINT) during a blocking sweep: the running trials are stopped, no
    worker process is left, the cell ends with KeyboardInterrupt (so "Run All" stops there) after saying how
    to resume, the kernel runs the next cell, and the sweep resumes to its end with the cell's function."""
    gate = tmp_path / "gate"   # the trials run until the resume writes it: both are running at the interrupt
    nb = _execute([
        "import os, signal, subprocess, sys, threading, time\nimport sweeplab as sl\n"
        "spec = {'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
        "        'parameters': {'x': {'values': [1.0, 2.0]}}}\n"
        "def slow(config, run):\n"
        f"    step = 0\n    while not os.path.exists({str(gate)!r}):\n"
        "        time.sleep(0.1)\n        run.log({'loss': config['x']}, step=step)\n        step += 1\n"
        "    return {'loss': config['x']}\n"
        "def interrupt_once_running():\n"
        "    while True:\n        time.sleep(0.05)\n"
        "        try:\n            if sl.load('blk', store='st').status()['counts'].get('running') == 2: break\n"
        "        except sl.SweeplabError:\n            pass\n"
        "    os.kill(os.getpid(), signal.SIGINT)",
        "threading.Thread(target=interrupt_once_running, daemon=True).start()\n"
        "sweep = sl.sweep(spec, fn=slow, store='st', workers=2, name='blk', progress=False)",
        "out = subprocess.run(['ps', '-o', 'pid=', '--ppid', str(os.getpid())], capture_output=True, text=True)\n"
        "print('children', len(out.stdout.split()) - 1)\n"
        "print(sl.load('blk', store='st').status()['counts'])\n"
        f"open({str(gate)!r}, 'w').close()\n"
        "done = subprocess.run([sys.executable, '-m', 'sweeplab', 'resume', 'blk', '--store', 'st'],\n"
        "                      capture_output=True, text=True)\n"
        "print('resumed', done.returncode, sl.load('blk', store='st').status()['counts'])\n"
        "print(done.stderr[-3000:])",
    ], tmp_path, monkeypatch)
    assert [e["ename"] for e in _errors(nb.cells[1])] == ["KeyboardInterrupt"], nb.cells[1].outputs
    assert "sweeplab resume blk" in _text(nb.cells[1], "stderr")
    assert not _errors(nb.cells[2]), nb.cells[2].outputs
    lines = _text(nb.cells[2]).splitlines()
    assert lines[0] == "children 0"                                  # the ps itself is the one child
    assert lines[1] == "{'interrupted': 2}"
    assert lines[2] == "resumed 0 {'completed': 2}", lines


def test_a_cell_function_uses_a_module_the_kernel_imports_from_a_path_it_added(tmp_path, monkeypatch):
    """`sys.path.append("lib")` then `import mylib` in a cell, the usual way a notebook reaches code beside
    it: the workers, which do not run that cell, find `mylib` too (the function takes the kernel's extra
    import path with it), instead of every trial failing with ModuleNotFoundError."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "mylib.py").write_text("def double(x):\n    return 2 * x\n")
    nb = _execute([
        "import os, sys\nsys.path.append(os.path.abspath('lib'))\nimport mylib\nimport sweeplab as sl",
        "def train(config, run):\n    return {'loss': mylib.double(config['x'])}\n"
        "sweep = sl.sweep({'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
        "                  'parameters': {'x': {'values': [1.0, 2.0]}}}, fn=train, store='st', workers=1,\n"
        "                 progress=False)\n"
        "print(sweep.status()['counts'], sweep.best['value'])",
    ], tmp_path, monkeypatch)
    assert _text(nb.cells[1]).strip() == "{'completed': 2} 2.0", nb.cells[1].outputs


def test_a_cell_function_typed_by_a_cells_dataclass_gets_its_config(tmp_path, monkeypatch):
    """`def train(config: Cfg, run)` with `Cfg` a dataclass of a cell (docs/config.md's typed config, written
    in a notebook): the class travels by value with the function, and its fields' `dataclasses.MISSING`
    arrived as a copy, so the worker read every field as having a default and a default_factory (every
    trial failed: "cannot specify both default and default_factory")."""
    nb = _execute([
        "import sweeplab as sl\nfrom dataclasses import dataclass, field\n"
        "@dataclass\nclass Opt:\n    lr: float = 0.1\n    betas: list = field(default_factory=lambda: [0.9, 0.99])\n"
        "@dataclass\nclass Cfg:\n    opt: Opt = field(default_factory=Opt)\n    epochs: int = 2\n"
        "def train(config: Cfg, run):\n    return {'loss': config.opt.lr * config.epochs + len(config.opt.betas)}\n"
        "sweep = sl.sweep({'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
        "                  'parameters': {'opt.lr': {'values': [0.5, 1.0]}}}, fn=train, store='st', workers=1,\n"
        "                 progress=False)\n"
        "print(sweep.status()['counts'], sweep.best['value'])",
    ], tmp_path, monkeypatch)
    assert _text(nb.cells[0]).strip() == "{'completed': 2} 3.0", nb.cells[0].outputs


def test_a_cell_function_uses_the_cells_cached_and_dispatching_helpers(tmp_path, monkeypatch):
    """`@functools.cache` / `@functools.lru_cache` helpers of a cell (a data loader, a memoized recursion):
    pickle sends the cache wrapper by its name, which the workers cannot import from the kernel's
    `__main__`, so every trial failed ("Can't get attribute 'load_data'"); they travel by value, with an
    empty cache, and a recursive one still calls itself through its cache. A `functools.singledispatch`
    helper (a recursive walker) could not be sent at all (its cache holds weak references), nor a cell
    class with a `functools.cached_property` on Python < 3.12 (it holds a lock): the sweep was refused."""
    nb = _execute([
        "import functools\nimport sweeplab as sl\n"
        "@functools.lru_cache(maxsize=8)\ndef load_data(n):\n    return list(range(n))\n"
        "@functools.cache\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "@functools.singledispatch\ndef total(x):\n    return float(x)\n"
        "@total.register\ndef _(x: list):\n    return sum(total(v) for v in x)\n"
        "class Data:\n    @functools.cached_property\n    def rows(self):\n        return [1, 2]\n"
        "def train(config, run):\n"
        "    loss = sum(load_data(3)) * config['x'] + fib(20) + total([1, [2, 3]]) + sum(Data().rows)\n"
        "    return {'loss': loss, 'cached': fib.cache_info().currsize}\n"
        "sweep = sl.sweep({'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
        "                  'parameters': {'x': {'values': [1.0, 2.0]}}}, fn=train, store='st', workers=1,\n"
        "                 progress=False)\n"
        "print(sweep.status()['counts'], sweep.best['value'], sweep.best['metrics']['cached'])",
    ], tmp_path, monkeypatch)
    assert _text(nb.cells[0]).strip() == "{'completed': 2} 6777.0 21.0", nb.cells[0].outputs


def test_a_cell_function_checkpoints_an_instance_of_a_cells_class_and_resumes_from_it(tmp_path, monkeypatch):
    """`run.checkpoint(State(...))` with `State` a class of a cell (DESIGN's `state = run.restore() or
    init_state(config)`, written in a notebook): pickle looks a class up by module and name, and the
    workers' `__main__` had no `State`, so every trial failed ("attribute lookup State on __main__ failed").
    The retried attempt reads the checkpoint back as a `State`."""
    nb = _execute([
        "import sweeplab as sl\nfrom dataclasses import dataclass, field\n"
        "@dataclass\nclass State:\n    epoch: int = 0\n    losses: list = field(default_factory=list)\n"
        "def init_state():\n    return State()\n"
        "def train(config, run):\n"
        "    state = run.restore() or init_state()\n"
        "    resumed_at = state.epoch\n"
        "    for epoch in range(state.epoch, 3):\n"
        "        state.losses.append(config['x'] / (epoch + 1))\n"
        "        state.epoch = epoch + 1\n"
        "        run.checkpoint(state, step=epoch)\n"
        "        if epoch == 1 and run.attempt == 1:\n"
        "            raise RuntimeError('crash after a checkpoint')\n"
        "    return {'loss': state.losses[-1], 'resumed_at': resumed_at, 'kept': len(state.losses)}\n"
        "sweep = sl.sweep({'method': 'grid', 'metric': {'name': 'loss', 'goal': 'minimize'},\n"
        "                  'parameters': {'x': {'values': [3.0]}}, 'trial': {'checkpoint_every': 1, 'retries': 1}},\n"
        "                 fn=train, store='st', workers=1, progress=False)\n"
        "t = sweep.trials().iloc[0]\n"
        "print(t['state'], t['attempts'], t['metrics.resumed_at'], t['metrics.kept'], sweep.best['value'])",
    ], tmp_path, monkeypatch)
    assert _text(nb.cells[0]).strip() == "completed 2 2.0 3.0 1.0", nb.cells[0].outputs


def _kernel_outputs(cells, tmp_path, monkeypatch):
    """Run `cells` one after the other in a real Jupyter kernel in `tmp_path`: for each cell, every output
    message the kernel sent for it (msg_type, content), late ones included, until the last cell is idle.
    nbclient keeps only the running cell's outputs, so it cannot show where a background thread's went."""
    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, *sys.path[1:]]))
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        ids = [kc.execute(code) for code in cells]
        outputs: dict[str, list] = {i: [] for i in ids}
        while True:
            msg = kc.get_iopub_msg(timeout=120)
            parent = msg["parent_header"].get("msg_id")
            if msg["msg_type"] in ("stream", "display_data", "update_display_data", "error"):
                outputs.setdefault(parent, []).append((msg["msg_type"], msg["content"]))
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" and parent == ids[-1]:
                return [outputs[i] for i in ids], {p: o for p, o in outputs.items() if p not in ids}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


BACKGROUND = ("import time\nimport sweeplab as sl\n"
              "def {fn}(config, run):\n    time.sleep(0.3)\n{body}\n"
              "bg = sl.sweep({{'method': 'grid', 'metric': {{'name': 'loss', 'goal': 'minimize'}},\n"
              "               'parameters': {{'x': {{'values': [1.0, 2.0]}}}}}}, fn={fn}, store='st', workers=1,\n"
              "              name='bg', background=True, progress={progress})")


def test_a_background_sweep_shows_its_progress_under_the_cell_that_started_it(tmp_path, monkeypatch):
    """`sl.sweep(..., background=True)` returns at once and the cell ends; its thread's progress line is
    shown and updated in place under that cell, not under a cell that runs later (here one that waits)."""
    (started, waits), others = _kernel_outputs([
        BACKGROUND.format(fn="slow", body="    return {'loss': config['x']}", progress=True),
        "bg.wait()\nprint('other cell')",
    ], tmp_path, monkeypatch)
    assert waits == [("stream", {"name": "stdout", "text": "other cell\n"})] and not others, (waits, others)
    kinds = [kind for kind, _ in started]
    assert kinds[0] == "display_data" and set(kinds[1:]) == {"update_display_data"}, started
    assert started[-1][1]["data"]["text/plain"].startswith("bg: 2 done"), started[-1]


def test_a_background_sweeps_notes_go_under_the_cell_that_started_it_while_another_cell_runs(tmp_path,
                                                                                              monkeypatch):
    """Why a background sweep failed (a note its thread writes when it ends) belongs to the cell that started
    it, not to whichever cell runs when the sweep ends (here one that waits for it)."""
    (started, waits), others = _kernel_outputs([
        BACKGROUND.format(fn="bad", body="    raise ValueError(f\"boom {config['x']}\")", progress=False),
        "bg.wait()\nprint('other cell')",
    ], tmp_path, monkeypatch)
    assert waits == [("stream", {"name": "stdout", "text": "other cell\n"})] and not others, (waits, others)
    noted = "".join(c["text"] for kind, c in started if kind == "stream" and c["name"] == "stderr")
    assert "sweep bg failed: no trial completed" in noted and "boom 1.0" in noted, started


def test_interrupting_the_kernel_stops_an_optuna_sweep_of_a_cells_objective_and_rerunning_the_cell_works(
        tmp_path, monkeypatch):
    """`sl.optimize` of an objective defined in a cell, interrupted by the kernel: no worker is left, the
    interrupted trials stay RUNNING in the sweep's study (neither told complete nor failed: `sweeplab resume`
    reruns them on the same Optuna trials), resume finishes the sweep with the cell's objective, and running
    the cell again starts a new sweep that completes."""
    gate = tmp_path / "gate"   # the trials run until the resume writes it: both are running at the interrupt
    nb = _execute([
        "import os, signal, subprocess, sys, threading, time\nimport optuna, sweeplab as sl\n"
        "def objective(trial):\n"
        "    x = trial.suggest_float('x', -1, 1)\n"
        f"    step = 0\n    while not os.path.exists({str(gate)!r}):\n"
        "        time.sleep(0.1)\n        trial.report(x * x, step)\n        step += 1\n"
        "    return x * x\n"
        "def interrupt_once_running():\n"
        "    while True:\n        time.sleep(0.05)\n"
        "        try:\n            if sl.load('opt', store='st').status()['counts'].get('running') == 2: break\n"
        "        except sl.SweeplabError:\n            pass\n"
        "    os.kill(os.getpid(), signal.SIGINT)",
        "threading.Thread(target=interrupt_once_running, daemon=True).start()\n"
        "sweep = sl.optimize(objective, n_trials=3, workers=2, store='st', name='opt', progress=False)",
        "out = subprocess.run(['ps', '-o', 'pid=', '--ppid', str(os.getpid())], capture_output=True, text=True)\n"
        "print('children', len(out.stdout.split()) - 1)\n"
        "print(sl.load('opt', store='st').status()['counts'])\n"
        "print(sorted(t.state.name for t in sl.load('opt', store='st').study().trials))\n"
        f"open({str(gate)!r}, 'w').close()\n"
        "done = subprocess.run([sys.executable, '-m', 'sweeplab', 'resume', 'opt', '--store', 'st'],\n"
        "                      capture_output=True, text=True)\n"
        "again = sl.load('opt', store='st')\n"
        "print('resumed', done.returncode, again.status()['counts'])\n"
        "print(sorted(t.state.name for t in again.study().trials))\n"
        "print(done.stderr[-3000:])",
        "second = sl.optimize(objective, n_trials=2, workers=2, store='st', name='opt', progress=False)\n"
        "print(second.name, second.status()['counts'])",
    ], tmp_path, monkeypatch)
    assert [e["ename"] for e in _errors(nb.cells[1])] == ["KeyboardInterrupt"], nb.cells[1].outputs
    assert not _errors(nb.cells[2]), nb.cells[2].outputs
    lines = _text(nb.cells[2]).splitlines()
    assert lines[0] == "children 0", lines
    assert lines[1] == "{'interrupted': 2}", lines
    assert lines[2] == "['RUNNING', 'RUNNING']", lines
    assert lines[3] == "resumed 0 {'completed': 3}", lines
    assert lines[4] == "['COMPLETE', 'COMPLETE', 'COMPLETE']", lines
    assert not _errors(nb.cells[3]), nb.cells[3].outputs
    assert _text(nb.cells[3]).strip() == "opt-2 {'completed': 2}", nb.cells[3].outputs


def test_optunas_quickstart_notebook_runs_with_sl_optimize_in_place_of_study_optimize(tmp_path, monkeypatch):
    """quickstart.ipynb of optuna-examples with `study.optimize(objective, n_trials=100)` replaced by
    `sl.optimize(objective, ..., study=study)`: the next lines read `study.best_trial` and plot `study`.
    The study stayed empty ('No trials are completed yet') and the plot had no point."""
    nb = _execute([
        "import optuna, sweeplab as sl\n"
        "def objective(trial):\n"
        "    classifier = trial.suggest_categorical('classifier', ['RandomForest', 'SVC'])\n"
        "    if classifier == 'RandomForest':\n"
        "        return trial.suggest_int('n_estimators', 2, 20) / 20\n"
        "    return trial.suggest_float('svc_c', 1e-10, 1e10, log=True) / 1e10",
        "study = optuna.create_study(direction='maximize')\n"
        "sl.optimize(objective, n_trials=4, study=study, workers=2, store='st', progress=False)\n"
        "trial = study.best_trial\n"
        "print('Accuracy: {}'.format(trial.value == max(t.value for t in study.trials)))\n"
        "print('Best hyperparameters: {}'.format(sorted(trial.params) == sorted(study.best_params)))",
        "fig = optuna.visualization.plot_optimization_history(study)\nprint(len(fig.data[0].x))",
    ], tmp_path, monkeypatch)
    assert not _errors(nb.cells[1]), nb.cells[1].outputs
    assert _text(nb.cells[1]).splitlines() == ["Accuracy: True", "Best hyperparameters: True"]
    assert _text(nb.cells[2]).strip() == "4", nb.cells[2].outputs
