"""A training program run as a command trial (`command: [python, program.py, --framework=..., ${args}]`): the
tiny trials of tests/fixtures/frameworks.py, given the Run that `sl.Run.from_env()` builds from the trial's
environment instead of the one a function trial is handed. It writes its pid into `pid-<trial>-<attempt>` in
the sweep's directory (so a test can signal the program itself) and reports `epochs_run` and `start_epoch`
at the end."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))

import frameworks

import sweeplab as sl


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--framework", required=True)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--delay", type=float, default=0.0)
    args = p.parse_args()
    run = sl.Run.from_env(vars(args))
    home = Path(os.environ.get("SWEEPLAB_ORIGINAL_CWD") or ".")
    (home / f"pid-{run.trial}-{run.attempt}").write_text(str(os.getpid()))
    result = getattr(frameworks, f"{args.framework}_trial")(run.config, run)
    print(f"framework-test: result {result}", flush=True)
    sl.report({k: result[k] for k in ("epochs_run", "start_epoch")})


if __name__ == "__main__":
    main()
