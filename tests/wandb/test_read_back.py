"""Where the offline read-back finds a run that ran without the hook (see offline_run_lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeplab import wandb_compat
from sweeplab.wandb_compat import _find_run_files


def _run(root: Path, run_id: str, name: str = "") -> Path:
    folder = root / "wandb" / (name or f"offline-run-20260101_000000-{run_id}")
    folder.mkdir(parents=True)
    (folder / f"run-{run_id}.wandb").write_bytes(b":W&B")
    return folder / f"run-{run_id}.wandb"


def test_a_quiet_run_below_the_working_directory_is_found_past_a_large_data_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # WANDB_SILENT and WANDB_DIR=outputs/2026-01-01/run set by the program: nothing in the log names the folder
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(wandb_compat, "_WALK_FOLDER", 100)
    for i in range(300):   # more entries than the walk looks at in one folder: it goes on, shallowest first
        (data / f"{i}.png").touch()
    want = _run(tmp_path / "outputs" / "2026-01-01" / "run", "abc123xy")
    _run(tmp_path / "old", "zzzzzzzz")   # another run's files
    assert _find_run_files("abc123xy", [str(tmp_path)], None) == [str(want)]


def test_a_run_outside_the_working_directory_is_found_where_wandb_printed_it(tmp_path: Path) -> None:
    want = _run(tmp_path / "elsewhere", "abc123xy")
    log = tmp_path / "0-1.log"
    log.write_text("epoch 1\n" * 5 + f"wandb: Run data is saved locally in \x1b[35m\x1b[1m{want.parent}\x1b[0m\n"
                   + "x" * (3 << 20) +   # a progress bar's long line between
                    f"\nwandb: \x1b[33mwandb sync {want.parent}\x1b[0m\n")
    cwd = tmp_path / "work"
    cwd.mkdir()
    assert _find_run_files("abc123xy", [str(cwd)], str(log))[:1] == [str(want)]
    assert _find_run_files("abc123xy", [str(cwd)], None) == []


def test_every_run_of_the_trials_id_is_found_in_the_order_they_started(tmp_path: Path) -> None:
    # `wandb.init(reinit=True)` in a loop: wandb names a folder already taken `...-<id>-1`; they were not found
    first = _run(tmp_path, "abc123xy", "offline-run-20260101_000000-abc123xy")
    second = _run(tmp_path, "abc123xy", "offline-run-20260101_000000-abc123xy-1")
    third = _run(tmp_path, "abc123xy", "offline-run-20260101_000001-abc123xy")
    _run(tmp_path, "abc123xyz", "offline-run-20260101_000000-abc123xyz")   # not this trial's
    found = _find_run_files("abc123xy", [str(tmp_path)], None)
    assert sorted(found, key=wandb_compat._run_order) == [str(first), str(second), str(third)]
    elsewhere = _run(tmp_path / "out", "zzzzzzzz", "offline-run-20260101_000000-zzzzzzzz-2")   # where wandb
    log = tmp_path / "0-1.log"                                                               # printed it
    log.write_text(f"wandb: Run data is saved locally in {elsewhere.parent}\n")
    assert _find_run_files("zzzzzzzz", [str(tmp_path / "work")], str(log)) == [str(elsewhere)]
