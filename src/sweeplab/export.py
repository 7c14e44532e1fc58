"""Exports of a sweep: a table of its trials (CSV, Parquet) or TensorBoard event files (`sweeplab export`).

    from sweeplab.export import export_sweep

    export_sweep("xgb", "xgb.csv")                                  # one row per trial
    export_sweep("xgb", "xgb.parquet", format="parquet")            # the same table (the `export` extra)
    export_sweep("xgb", "runs/xgb", format="tensorboard")           # tensorboard --logdir runs/xgb

The store is opened read-only and never written, and an `out` inside the store directory is refused.
Every export is atomic: it is built beside its target
under a temporary name and renamed into place, so a reader (or a crash) never sees half an export, and an
earlier export at the same path stays whole until the new one replaces it. Standard output (`-o -`,
/dev/stdout, /dev/fd/N) is written through the open descriptor, where the shell put it (`>> all.csv`
appends). A TensorBoard export replaces only a directory that an earlier TensorBoard export wrote (it holds
a marker file), never anything else.

Table columns: number, state, value, attempts, started, ended, seconds, reason, `feasible` (with constraints),
`rank` (with several objectives), then `params.<name>` for every sampled parameter and `metrics.<name>` for
every final metric; a cell is empty where a trial lacks one. In CSV, a text cell that a spreadsheet program
would run as a formula (`=...`, `+`, `-`, `@`, a tab or line break first) is written with a leading single
quote (OWASP's advice against CSV injection); numbers are written as they are.

TensorBoard: one run per trial (`trial-0007/`) with a scalar curve for every metric the trial logged (when
several attempts logged a step, the latest one's value, as in the dashboard), its final metrics at its last
step when it did not log them as curves, and the HParams plugin's records, so the HPARAMS tab lists every
trial with its parameters, its state (`trial.state`: completed, pruned, ...) and metrics. Writing needs
only the `tensorboard` package (no TensorFlow).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
import os
import shutil
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeplab.errors import UserError

__all__ = ["FORMATS", "MARKER", "STATE_HPARAM", "export_sweep"]

FORMATS = ("csv", "parquet", "tensorboard")
MARKER = ".sweeplab-export"   # in a TensorBoard export's directory: it may be replaced by the next export
STATE_HPARAM = "trial.state"  # the trial's state (completed, pruned...) as a column of the HParams table
_FIXED = ("number", "state", "value", "attempts", "started", "ended", "seconds", "reason")
#: columns of a sweep with constraints (`feasible`: true / false / empty) or several objectives (`rank`: the
#: trial's front rank, 1 = on the feasible Pareto front, empty for a trial that is on no front)
_OBJECTIVE_COLUMNS = ("feasible", "rank")


def export_sweep(sweep: str, out: str | os.PathLike[str] | None = None, *, format: str | None = None,
                 store: str | os.PathLike[str] | None = None) -> Path:
    """Export sweep `sweep` of the store at `store` (default: $SWEEPLAB_STORE or ./.sweeplab) to `out`
    (default: `<sweep>.csv`, `<sweep>.parquet` or `<sweep>-tensorboard/` in the current directory) and
    return the path written; an `out` that is a directory (or ends with `/`) gets the table under its default
    name. `format` defaults to the one `out`'s suffix names (`.parquet` / `.pq`: parquet),
    else csv. Raises UserError for an unknown sweep or format, a format that contradicts `out`'s suffix, or
    an `out` it must not replace; MissingExtraError when the format needs a package that is not installed."""
    from sweeplab.store import Store, default_store_dir

    format = _format_for(format, out)
    if format not in FORMATS:
        raise UserError(f"export: unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    target = Path(out) if out is not None else Path(_default_name(sweep, format))
    if out is not None and format != "tensorboard" and (os.fspath(out).endswith(("/", os.sep)) or target.is_dir()):
        target = target / _default_name(sweep, format)   # a directory (`-o exports/`): the table goes in it
    _outside_store(target, Path(store) if store is not None else default_store_dir())
    _check_target(target, format)
    if format == "parquet" and _a_terminal(target):
        raise UserError(f"export: {out} is a terminal; Parquet is binary and would garble it: redirect it "
                        "(`-o - > trials.parquet`, `| python read.py`) or write a file (-o trials.parquet)")
    writer = _writer(format)            # a missing extra is reported before the store is read
    st = Store.open(store, readonly=True)
    try:
        with st.snapshot():   # the table and the curves from one snapshot, even while a driver writes
            writer(_read(st, sweep, with_curves=format == "tensorboard"), target)
    finally:
        st.close()
    return target


#: the table formats a file's suffix names: `-o trials.parquet` is a Parquet file, not CSV under that name
_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def _format_for(format: str | None, out: str | os.PathLike[str] | None) -> str:
    """The format to write: the one given, else the one `out`'s suffix names, else csv. A given table format
    that another suffix contradicts (`--format csv -o t.parquet`) is a mistake, refused before any writing."""
    if isinstance(format, str):   # `-f CSV`, `format="Parquet"`: the name, whatever its case
        format = format.strip().lower()
    path = Path(out) if out is not None else None
    suffix = path.suffix.lower() if path is not None else ""
    named = _SUFFIXES.get(suffix)
    if format is None:
        return named or "csv"
    if path is not None and named is not None and format in ("csv", "parquet") and format != named:
        raise UserError(f"export: --format {format} but {out} ends in {suffix}, a {named} file name; "
                        f"drop --format, or name the file {path.with_suffix('.' + format).name}")
    return format


# ------------------------------------------------------------------------------------------------ reading
def _read(st: Any, sweep: str, *, with_curves: bool) -> dict[str, Any]:
    from sweeplab.store import queries

    columns = queries.trial_columns(st, sweep)
    summary = queries.sweep_summary(st, sweep)
    if not with_curves:
        return {"columns": columns, "summary": summary, "history": iter(()), "keys": []}
    sweep_id = queries.sweep_id(st, sweep)
    keys = queries.sweep_metric_keys(st, sweep_id)
    if keys is None:   # a store before version 4
        keys = queries.metric_keys(st, [tid for tid, _ in queries.trial_states(st, sweep_id)])
    # curves one trial at a time, as the writer goes (inside the caller's snapshot): never the whole sweep's
    return {"columns": columns, "summary": summary, "history": queries.trial_histories(st, sweep), "keys": keys}


def _rows(columns: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The trials table: header and rows (None for a missing cell)."""
    params = sorted(columns["params"])
    metrics = sorted(columns["metrics"])
    extra = [c for c in _OBJECTIVE_COLUMNS if c in columns]   # with constraints, several objectives
    header = [*_FIXED, *extra, *(f"params.{p}" for p in params), *(f"metrics.{m}" for m in metrics)]
    rows = []
    for i in range(columns["n"]):
        started, ended = columns["started"][i], columns["ended"][i]
        seconds = ended - started if started is not None and ended is not None else None
        rows.append([columns["number"][i], columns["state"][i], columns["value"][i], columns["attempts"][i],
                     started, ended, seconds, columns["reason"][i], *(columns[c][i] for c in extra),
                     *(columns["params"][p][i] for p in params), *(columns["metrics"][m][i] for m in metrics)])
    return header, rows


def _table_columns(columns: Mapping[str, Any]) -> tuple[list[str], list[Sequence[Any]]]:
    """The trials table column by column (as Parquet stores it; `_rows`' header and its rows transposed),
    without a Python step per cell: a trial of 100,000 metrics is 100,000 columns."""
    params = sorted(columns["params"])
    metrics = sorted(columns["metrics"])
    extra = [c for c in _OBJECTIVE_COLUMNS if c in columns]
    header = [*_FIXED, *extra, *(f"params.{p}" for p in params), *(f"metrics.{m}" for m in metrics)]
    seconds = [e - s if s is not None and e is not None else None for s, e in zip(columns["started"], columns["ended"])]
    data = [columns["number"], columns["state"], columns["value"], columns["attempts"], columns["started"],
            columns["ended"], seconds, columns["reason"], *(columns[c] for c in extra),
            *(columns["params"][p] for p in params), *(columns["metrics"][m] for m in metrics)]
    return header, [list(d) for d in data]


# ------------------------------------------------------------------------------------------------ writers
def _writer(format: str) -> Callable[[dict[str, Any], Path], None]:
    from sweeplab._imports import optional_import

    if format == "parquet":
        optional_import("pyarrow", "export", "Parquet exports")
        return _write_parquet
    if format == "tensorboard":
        optional_import("tensorboard", "export", "TensorBoard exports")
        return _write_tensorboard
    return _write_csv


#: a text cell starting with one of these is a formula to a spreadsheet program (OWASP's CSV injection list,
#: with line feed): such a cell is written with a single quote before it, which the program shows as text
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def _csv_cell(v: Any) -> Any:
    """One CSV cell, safe to open in a spreadsheet program: a text value that a spreadsheet would take for a
    formula (`=HYPERLINK(...)`, `+1`, `-cmd`, `@SUM(...)`, a tab or a line break first) gets a single quote
    before it, as does one that already starts with quotes followed by such a character, so that removing one
    leading quote from a text cell matching `'+[=+-@\\t\\r\\n]` gives back the value exactly. Numbers (-0.5),
    booleans and empty cells (None) are written as they are."""
    if v is None:
        return ""
    if isinstance(v, str) and v.lstrip("'").startswith(_FORMULA_START):
        return "'" + v
    return v


def _write_csv(data: dict[str, Any], target: Path) -> None:
    header, rows = _rows(data["columns"])
    with _atomic_file(target, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([_csv_cell(v) for v in header])
        for row in rows:
            w.writerow([_csv_cell(v) for v in row])


def _write_parquet(data: dict[str, Any], target: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    header, data_columns = _table_columns(data["columns"])
    # the fixed columns' own types, so that a column empty in every row is not Arrow's `null` type
    fixed = {"number": pa.int64(), "state": pa.string(), "value": pa.float64(), "attempts": pa.int64(),
             "started": pa.float64(), "ended": pa.float64(), "seconds": pa.float64(), "reason": pa.string(),
             "feasible": pa.bool_(), "rank": pa.int64()}
    arrays = []
    for j, values in enumerate(data_columns):
        try:
            arrays.append(pa.array(values, type=fixed.get(header[j])))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):   # mixed types (3, "auto"), an int past
            # 64 bits (2**64): as text, exact
            arrays.append(pa.array([None if v is None else str(v) for v in values], type=pa.string()))
    table = pa.Table.from_arrays(arrays, names=header)
    with _atomic_file(target, "wb") as f:
        pq.write_table(table, f)


def _write_tensorboard(data: dict[str, Any], target: Path) -> None:
    columns, summary, history = data["columns"], data["summary"]["sweep"], data["history"]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        tmp.chmod(0o777 & ~_umask())   # mkdtemp's directory is 0700: `tensorboard --logdir` by others
        (tmp / MARKER).write_text(f"sweeplab TensorBoard export of sweep {summary['name']}\n")
        params = sorted(columns["params"])
        kinds = {p: _data_type([v for v in columns["params"][p] if v is not None]) for p in params}
        metric_keys = sorted(set(data["keys"]) | set(columns["metrics"]))
        created = float(summary.get("created") or time.time())
        with _EventFile(tmp) as root:
            root.add(_hparams_summary(experiment=_experiment(summary, kinds, columns, metric_keys)), 0, created)
        pending = next(history, None)   # (number, its curves), trials by number as `columns`; the next one
        for i, number in enumerate(columns["number"]):   # is read once this one is written
            if pending is not None and pending[0] == number:
                _write_trial(tmp / f"trial-{number:04d}", i, number, columns, kinds, pending[1], created)
                pending = next(history, None)
            else:
                _write_trial(tmp / f"trial-{number:04d}", i, number, columns, kinds, {}, created)
        _replace_dir(tmp, target)
    except BaseException:
        _quiet_writer_threads()
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _quiet_writer_threads() -> None:
    """An abandoned export (Ctrl-C, `kill`, an error) removes its directory while TensorBoard's writer threads
    may still flush an event file into it: what they then raise ("Exception in thread Thread-2: ...
    FileNotFoundError", printed under the export's own one-line error) is the removal's doing, not news."""
    import threading

    previous = threading.excepthook

    def hook(args: Any) -> None:
        if type(args.thread).__name__ != "_AsyncWriterThread":
            previous(args)

    threading.excepthook = hook


def _write_trial(folder: Path, i: int, number: int, columns: Mapping[str, Any], kinds: Mapping[str, Any],
                 curves: Mapping[str, Iterable[tuple[int, float | None, float]]], created: float) -> None:
    """One trial's run: its curves, its final metrics, and its HParams session (start and end)."""
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    folder.mkdir()
    started = columns["started"][i] or created
    ended = columns["ended"][i]
    state = columns["state"][i]
    with _EventFile(folder) as events:
        start = plugin_data_pb2.SessionStartInfo(group_name=folder.name, start_time_secs=float(started))
        for p, kind in kinds.items():
            if columns["params"][p][i] is not None:          # None (inactive, or null): an empty cell
                _set_value(start.hparams[p], columns["params"][p][i], kind)
        start.hparams[STATE_HPARAM].string_value = str(state)
        events.add(_hparams_summary(session_start_info=start), 0, started)
        last_step, last_time = 0, started
        for key, points in curves.items():
            for step, value, when in points:
                if value is not None:
                    events.add_scalar(key, value, step, when)
                last_step, last_time = max(last_step, step), max(last_time, when)
        for key, values in columns["metrics"].items():   # final metrics with no curve (returned, not logged)
            value = values[i]
            if key not in curves and isinstance(value, (int, float)) and not isinstance(value, bool):
                events.add_scalar(key, float(value), last_step, ended or last_time)
        status = {"completed": api_pb2.STATUS_SUCCESS, "failed": api_pb2.STATUS_FAILURE, "running":
                  api_pb2.STATUS_RUNNING, "queued": api_pb2.STATUS_RUNNING}.get(state, api_pb2.STATUS_UNKNOWN)
        if ended is not None or state not in ("running", "queued"):
            end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=float(ended or last_time))
            events.add(_hparams_summary(session_end_info=end), last_step, ended or last_time)


def _experiment(summary: Mapping[str, Any], kinds: Mapping[str, Any], columns: Mapping[str, Any],
                metric_keys: Sequence[str]) -> Any:
    """The HParams experiment: every parameter (with its values when they are few or not numbers) and every
    metric, so the HPARAMS tab has a column for each."""
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import api_pb2

    infos = []
    for p, values in [*((p, columns["params"][p]) for p in kinds), (STATE_HPARAM, columns["state"])]:
        values = [v for v in values if v is not None]
        info = api_pb2.HParamInfo(name=p, type=_data_type(values))
        if info.type == api_pb2.DATA_TYPE_STRING:                # one type a column: mixed values as text
            values = [str(v) for v in values]
        if values and info.type == api_pb2.DATA_TYPE_FLOAT64 and not all(float(v).is_integer() for v in values):
            info.domain_interval.min_value = float(min(values))   # a continuous parameter: its range
            info.domain_interval.max_value = float(max(values))
        elif values:                                              # choices, integers, text: their values
            domain = struct_pb2.ListValue()
            for v in sorted(set(values), key=lambda x: (str(type(x)), x)):
                _set_value(domain.values.add(), v, info.type)
            info.domain_discrete.CopyFrom(domain)
        infos.append(info)
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k), display_name=k) for k in metric_keys]
    return api_pb2.Experiment(name=str(summary["name"]), description=f"sweeplab sweep {summary['name']}",
                              time_created_secs=float(summary.get("created") or 0.0),
                              hparam_infos=infos, metric_infos=metrics)


def _data_type(values: Sequence[Any]) -> Any:
    from tensorboard.plugins.hparams import api_pb2

    if values and all(isinstance(v, bool) for v in values):
        return api_pb2.DATA_TYPE_BOOL
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return api_pb2.DATA_TYPE_FLOAT64
    return api_pb2.DATA_TYPE_STRING


def _set_value(target: Any, value: Any, kind: Any) -> None:
    """A google.protobuf Value from a parameter value of a column of type `kind` (numbers, booleans, text;
    anything else, and every value of a STRING column, as text)."""
    from tensorboard.plugins.hparams import api_pb2

    if kind == api_pb2.DATA_TYPE_STRING:
        target.string_value = str(value)
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, (int, float)):
        target.number_value = float(value)
    elif value is None:
        target.string_value = ""
    else:
        target.string_value = str(value)


def _hparams_summary(**plugin_data: Any) -> Any:
    """A Summary holding one HParams plugin record (experiment, session_start_info or session_end_info)."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    (field,) = plugin_data
    tag = {"experiment": metadata.EXPERIMENT_TAG, "session_start_info": metadata.SESSION_START_INFO_TAG,
           "session_end_info": metadata.SESSION_END_INFO_TAG}[field]
    meta = metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(**plugin_data))
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta)])


class _EventFile:
    """One TensorBoard event file in `folder`: TFRecord-framed `Event` records, written in this thread.

    TensorBoard's `EventFileWriter` hands every event to a writer thread through a queue (a lock handoff per
    event), a scalar was three protobuf objects, and each record's two CRC-32C checksums are pure Python
    loops over its bytes: a trial of 100,000 points took 15 s (150 s on a busy machine). Scalars are encoded
    here directly (the `Event` / `Summary` wire format, a few bytes each) and their checksums computed in
    batches with numpy, a byte column of every record of one length at a time; the HParams records, a few
    per trial, still go through protobuf."""

    BATCH = 8192   # records checksummed at once

    _files = itertools.count()

    def __init__(self, folder: Path) -> None:
        from tensorboard.compat.proto import event_pb2

        # the name TensorBoard's own writer gives (`tensorboard --logdir` reads files named *tfevents*)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(self._files)}"
        self._file = open(folder / name, "wb", buffering=1 << 20)   # closed by __exit__
        self._heads: dict[str, bytes] = {}
        self._pending: list[bytes] = []
        self._record(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def add(self, summary: Any, step: int, wall_time: float) -> None:
        from tensorboard.compat.proto import event_pb2

        self._record(event_pb2.Event(summary=summary, step=int(step), wall_time=float(wall_time)).SerializeToString())

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        """`Event{wall_time, step, summary: Summary{value: [Value{tag, simple_value}]}}`, as protobuf encodes it."""
        head = self._heads.get(tag)
        if head is None:
            name = tag.encode("utf-8", "replace")
            head = self._heads[tag] = b"\x0a" + _varint(len(name)) + name + b"\x15"
        try:
            f32 = _F32.pack(value)
        except OverflowError:   # beyond float32 (simple_value's type): infinite, as protobuf stores it
            f32 = _F32.pack(math.copysign(math.inf, value))
        summary = b"\x0a" + _varint(len(head) + 4) + head + f32
        self._record(b"\x09" + _F64.pack(wall_time) + b"\x10" + _varint(int(step) & 0xFFFFFFFFFFFFFFFF)
                     + b"\x2a" + _varint(len(summary)) + summary)

    def _record(self, data: bytes) -> None:
        self._pending.append(data)
        if len(self._pending) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        """Each pending record as a TFRecord: length (uint64), its masked CRC-32C, the data, the data's."""
        records, self._pending = self._pending, []
        lengths = [_LEN.pack(len(r)) for r in records]
        data_crcs, length_crcs = _masked_crc32c(records), _masked_crc32c(lengths)
        self._file.write(b"".join(b"".join((n, _CRC.pack(nc), r, _CRC.pack(rc)))
                                  for n, nc, r, rc in zip(lengths, length_crcs, records, data_crcs)))

    def __enter__(self) -> _EventFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None:
                self._flush()
        finally:
            self._file.close()


_SMALL = [bytes([n]) for n in range(128)]
_F32, _F64, _LEN, _CRC = struct.Struct("<f"), struct.Struct("<d"), struct.Struct("<Q"), struct.Struct("<I")


def _masked_crc32c(chunks: Sequence[bytes]) -> list[int]:
    """TFRecord's masked CRC-32C of each chunk, computed for all chunks of one length at once (numpy: one
    table lookup per byte position, not per byte)."""
    import numpy as np
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import CRC_TABLE, masked_crc32c

    table = np.array(CRC_TABLE, dtype=np.uint32)
    out = [0] * len(chunks)
    by_length: dict[int, list[int]] = {}
    for i, c in enumerate(chunks):
        by_length.setdefault(len(c), []).append(i)
    for length, where in by_length.items():
        if len(where) < 32:   # a few records (a long HParams record): a column at a time would be slower
            for i in where:
                out[i] = masked_crc32c(chunks[i])
            continue
        rows = np.frombuffer(b"".join(chunks[i] for i in where), dtype=np.uint8).reshape(len(where), length)
        crc = np.full(len(where), 0xFFFFFFFF, dtype=np.uint32)
        for j in range(length):
            crc = table[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> np.uint32(8))
        crc ^= np.uint32(0xFFFFFFFF)
        masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)   # wraps at 2**32
        for i, v in zip(where, masked.tolist()):
            out[i] = v
    return out


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# ------------------------------------------------------------------------------------------------ atomicity
def _default_name(sweep: str, format: str) -> str:
    """The sweep's name as the store's directories spell it (`store.layout.safe_name`: letters, digits, `-_.`,
    at most 200 bytes, a long name cut and given a hash), so the file name fits the 255-byte limit."""
    from sweeplab.store.layout import safe_name

    safe = safe_name(sweep)
    return f"{safe}-tensorboard" if format == "tensorboard" else f"{safe}.{format}"


def _outside_store(target: Path, store: Path) -> None:
    """Refuse a target inside the store directory (its database, its WAL, a log, the directory itself),
    symlinks followed: the export is renamed over its target, and over `store.db` that would lose every sweep."""
    root, real = store.resolve(), target.resolve()
    if real == root or root in real.parents:
        raise UserError(f"export: {target} is inside the store {store}; an export never writes into the "
                        "store: choose an --out outside it")


def _check_target(target: Path, format: str) -> None:
    """Refuse, before reading anything, a target the export must not replace."""
    if format == "tensorboard":
        if target.exists() and not (target.is_dir() and ((target / MARKER).is_file() or not any(target.iterdir()))):
            raise UserError(f"export: {target} exists and is not an earlier TensorBoard export of sweeplab "
                            f"(no {MARKER} in it); choose another --out or remove it")
    elif target.is_dir():
        raise UserError(f"export: {target} is a directory; expected a file path for the {format} table")


@contextlib.contextmanager
def _atomic_file(target: Path, mode: str, **kwargs: Any):  # type: ignore[no-untyped-def]
    """A file object for `target`'s contents: written beside it, fsynced, then renamed over it.

    A symlink is followed (the file it points to is replaced, the link stays), and a target that exists but
    is not a regular file (`/dev/stdout`, `/dev/null`, a FIFO) is written straight into: renaming over it
    would replace the device or pipe itself, for every process of the machine."""
    fd = _stream_fd(target)
    if fd is not None:   # `-o -`, /dev/fd/N: through the open descriptor, at its position (`>>` appends), never
        with os.fdopen(os.dup(fd), mode, **kwargs) as stream:   # the file it names reopened (truncated) or replaced
            yield stream
        return
    real = target.resolve() if target.is_symlink() else target
    if (target.exists() and not target.is_file()) or real.parts[:2] == ("/", "proc"):   # /dev/stdout: a /proc fd
        with open(target, mode, **kwargs) as stream:
            yield stream
        return
    target = real
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    try:
        try:   # mkstemp's file is 0600: the export gets the replaced file's permissions, else the umask's
            keep = target.stat().st_mode & 0o7777
        except OSError:
            keep = 0o666 & ~_umask()
        os.fchmod(fd, keep)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _a_terminal(target: Path) -> bool:
    """Whether `target` (`/dev/stdout` for `-o -`, `/dev/fd/N`, `/dev/tty`, a `/dev/pts/N`) is a terminal."""
    fd = _stream_fd(target)
    if fd is not None:
        try:
            return os.isatty(fd)
        except OSError:
            return False
    try:
        if not target.is_char_device():
            return False
        opened = os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.isatty(opened)
    finally:
        os.close(opened)


def _stream_fd(target: Path) -> int | None:
    """The file descriptor a path such as /dev/stdout, /dev/fd/3 or /proc/self/fd/3 names, as written; else None."""
    text = os.fspath(target)
    named = {"/dev/stdout": 1, "/dev/stderr": 2}.get(text)
    if named is not None:
        return named
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if text.startswith(prefix) and text[len(prefix):].isdigit():
            return int(text[len(prefix):])
    return None


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _replace_dir(tmp: Path, target: Path) -> None:
    """Put the finished directory `tmp` at `target`; an earlier export there is moved aside first and
    deleted after, so `target` is at every moment either the old export or the new one (or, between the
    two renames, absent)."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / "export")
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
