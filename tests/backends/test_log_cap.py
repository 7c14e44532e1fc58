"""`trial.log_max`: a trial's log keeps its beginning, one marker line and its latest output, whatever the
trial prints (backends/execution.LogCap). Real sweeps, real worker processes, the least cap: 1 MB."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import sweeplab as sl
from sweeplab.backends.execution import LogCap
from sweeplab.errors import SpecError
from sweeplab.spec import parse_spec

CAP = 1 << 20
MARKER = re.compile(rb"^# sweeplab: ([0-9,]+) bytes of output dropped here \(trial\.log_max: 1MB", re.M)

# 5 MB in 50,000 numbered lines, between a first and a last line; `fail` raises at the end
NOISY = textwrap.dedent("""
    import sys

    def noisy(config):
        print("FIRST LINE", dict(config), flush=True)
        for i in range(config["lines"]):
            print(f"{i:06d} " + "x" * 93)
        print("LAST LINE", flush=True)
        print("LAST ERROR LINE", file=sys.stderr, flush=True)
        if config["fail"]:
            raise RuntimeError("boom at the very end")
        return {"loss": 1.0}

    if __name__ == "__main__":
        args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
        noisy({"lines": int(args["lines"]), "fail": args["fail"] == "True"})
        print("@sweeplab " + '{"loss": 1.0}')
""")


def _sweep(tmp_path: Path, kind: str, *, lines: int, fail: bool = False, log_max: object = "1MB",
           workers: int = 1) -> Path:
    """Run one trial printing `lines` lines of 100 bytes; the path of its log."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "noisy.py").write_text(NOISY)
    spec: dict[str, object] = {"method": "grid", "parameters": {"lines": {"value": lines}, "fail": {"value": fail}},
                               "trial": {"log_max": log_max, "retries": 0}}
    if kind == "function":
        spec["function"] = f"{tmp_path / 'noisy.py'}:noisy"
    else:
        spec["program"] = str(tmp_path / "noisy.py")
    if workers > 1:
        spec["resources"] = {"workers": workers}
    store = tmp_path / "store"
    outcome = sl.run_sweep(spec, store=store, workers=1, name="s")
    assert outcome.counts.get("failed" if fail else "completed") == 1, outcome
    logs = sorted((store / "logs" / "s").glob("*.log"))
    assert logs, list(store.rglob("*"))
    return logs[0]


def _numbers(text: bytes) -> list[int]:
    """The numbered lines in `text`: a command's stderr is copied in chunks as they come, so a line of it may
    run into one of stdout ("LAST ERROR LINE049686 xxx", its newline after)."""
    return [int(m) for m in re.findall(rb"([0-9]{6}) x{93}\n", text)]


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_trial_printing_5mb_keeps_its_beginning_a_marker_and_its_last_lines_under_the_cap(tmp_path, kind):
    log = _sweep(tmp_path, kind, lines=50_000, fail=True)
    data = log.read_bytes()
    assert len(data) <= CAP
    assert data.startswith(b"# sweeplab: sweep s, trial 0, attempt 1\n")
    head, marker, tail = data.partition(b"# sweeplab: ")[2].partition(b"\n# sweeplab: ")   # header, marker, rest
    assert marker, data[:2000]
    assert b"FIRST LINE" in head and b"000000 x" in head   # the config and the first lines
    m = MARKER.search(data)
    assert m is not None and data.count(b"bytes of output dropped here") == 1
    numbers = _numbers(data)
    assert numbers[0] == 0 and numbers[-1] == 49_999   # the first and the last line, whole
    assert b"LAST LINE" in tail and b"LAST ERROR LINE" in tail
    # the traceback, last (a command's: on stderr, which its worker copies beside stdout, in either order)
    assert b"Traceback (most recent call last)" in tail and b"RuntimeError: boom at the very end\n" in tail
    assert kind == "command" or tail.endswith(b"RuntimeError: boom at the very end\n")
    after = _numbers(data[m.end():])
    dropped, missing = int(m.group(1).replace(b",", b"")), 50_000 - len(numbers)
    if kind == "command":   # the copier cuts between its writes: only the middle went, and the marker counts it
        assert after == list(range(after[0], 50_000)), after[:3]
        assert dropped == missing * 101
    else:   # the trial writes as the heartbeat cuts: what it printed during a cut may be lost (uncounted)
        assert after == sorted(after) and dropped <= missing * 101


@pytest.mark.parametrize("kind", ["function", "command"])
def test_the_dashboards_log_view_shows_a_capped_log_with_its_marker(tmp_path, kind):
    pytest.importorskip("starlette")
    import warnings

    from sweeplab.dashboard import create_app

    log = _sweep(tmp_path, kind, lines=20_000, fail=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    with TestClient(create_app(tmp_path / "store"), base_url="http://127.0.0.1:8765") as client:
        body = client.get(f"/api/sweeps/s/trials/0/log?tail={CAP}").json()
    assert body["size"] == log.stat().st_size <= CAP and not body["truncated"]
    assert MARKER.search(body["text"].encode()) and "RuntimeError: boom at the very end" in body["text"]


@pytest.mark.parametrize("kind", ["function", "command"])
def test_a_log_under_the_cap_is_unchanged(tmp_path, kind):
    capped = _sweep(tmp_path / "a", kind, lines=300).read_bytes()
    uncapped = _sweep(tmp_path / "b", kind, lines=300, log_max=0).read_bytes()
    assert len(capped) < CAP and b"dropped here" not in capped
    assert len(capped.splitlines()) == 307 + (kind == "command")   # the header's 4, 3 + 300 printed (+ report)
    # after the header (which names the paths), the same bytes; a command's stdout and stderr interleave as they
    # come (a stderr line's newline may come after a stdout line), so its stdout lines are compared
    body, same = (b"\n".join(ln for ln in log.splitlines() if not ln.startswith(b"# ")) for log in (capped, uncapped))
    if kind == "command":
        body, same = (sorted(ln for ln in b.replace(b"LAST ERROR LINE", b"").splitlines() if ln) for b in (body, same))
    assert body == same


@pytest.mark.parametrize("log_max", [0, None], ids=["zero", "null"])
def test_log_max_0_or_null_keeps_everything(tmp_path, log_max):
    data = _sweep(tmp_path, "function", lines=20_000, log_max=log_max).read_bytes()
    assert len(data) > 2_000_000 and b"dropped here" not in data
    assert _numbers(data) == list(range(20_000))


def test_each_rank_of_a_multi_process_trial_is_capped(tmp_path):
    log = _sweep(tmp_path, "function", lines=20_000, workers=2)
    for path in (log, log.with_name(f"{log.stem}.rank1.log")):
        data = path.read_bytes()
        assert len(data) <= CAP and MARKER.search(data), path
        assert _numbers(data)[0] == 0 and _numbers(data)[-1] == 19_999


def test_a_cut_keeps_cutting_while_the_log_grows(tmp_path):
    """Many cuts in a row: one marker, whose count grows with what was dropped; the kept part is whole lines."""
    path = tmp_path / "t.log"
    path.write_bytes(b"# header\n")
    with open(path, "ab") as fh:
        cap = LogCap(str(path), CAP)
        for i in range(0, 60_000, 100):
            fh.write(b"".join(f"{n:06d} {'y' * 40}\n".encode() for n in range(i, i + 100)))
            fh.flush()
            assert cap.check() <= CAP
        cap.close()
    data = path.read_bytes()
    assert data.startswith(b"# header\n000000 y") and data.count(b"dropped here") == 1
    before, marker, after = data.partition(b"\n# sweeplab: ")
    assert marker and b"\n" in after
    head = [int(n) for n in re.findall(rb"^([0-9]{6}) y{40}$", before, re.M)]
    tail = [int(n) for n in re.findall(rb"^([0-9]{6}) y{40}$", after.split(b"\n", 1)[1], re.M)]
    assert head == list(range(len(head))) and tail == list(range(tail[0], 60_000))   # whole lines, in order
    numbers = head + tail
    dropped = int(re.search(rb"# sweeplab: ([0-9,]+) bytes", data).group(1).replace(b",", b""))
    assert dropped == (60_000 - len(numbers)) * 48


@pytest.mark.parametrize("raw, size", [("100MB", 100 << 20), ("2 MiB", 2 << 20), ("1.5GB", 3 << 29),
                                       (1 << 20, 1 << 20), (0, 0), (None, 0)])
def test_log_max_reads_sizes(raw, size):
    spec = parse_spec({"function": "a:b", "method": "grid", "parameters": {"x": {"value": 1}},
                       "trial": {"log_max": raw}})
    assert spec.trial.log_max == size
    assert parse_spec(spec.to_jsonable()).trial.log_max == size   # as a resumed sweep reads it back


def test_log_max_defaults_to_100mb_and_refuses_what_is_no_size():
    assert parse_spec({"function": "a:b", "method": "grid", "parameters": {"x": {"value": 1}}}).trial.log_max \
        == 100 << 20
    for bad in ("lots", -1, "64KB", True):
        with pytest.raises(SpecError, match="trial.log_max"):
            parse_spec({"function": "a:b", "method": "grid", "parameters": {"x": {"value": 1}},
                        "trial": {"log_max": bad}})
