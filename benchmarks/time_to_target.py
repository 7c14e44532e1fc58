"""Time to target (issue 18, item 5) -- NOT RUN YET: a skeleton, its figures are not in docs/benchmarks.md.

    python benchmarks/time_to_target.py --dry-run     # prints the plan; nothing else is implemented yet

The planned measurement, on the XGBoost demo (benchmarks/search_quality.py's diabetes regression) and
examples/torch_digits, with 2 workers, the same target value and 5 seeds, in one run:
  * sweeplab: `sweeplab sweep` with the default method (`bayes`), + ASHA for torch_digits;
  * Optuna: TPESampler + SuccessiveHalvingPruner, n_jobs=2, and 2 processes sharing journal storage;
  * Ray Tune: OptunaSearch + ASHAScheduler, 2 concurrent trials.
Reported per tool: median wall time and compute (CPU seconds of all processes) until the best value first
reaches the target, and the ratio to sweeplab's.

Why it is not run: the issue-18 session (2026-11-23) spent its time on parallel search quality, TPE's cost
in long sweeps and the startup/many-worker figures on a 2-core machine shared with six other sessions
(load average ~15), where wall-time races between tools are not meaningful. The script refuses to report
numbers until it is implemented.
"""

from __future__ import annotations

import argparse
import sys

PLAN = __doc__.split("\n\n")[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    print(PLAN)
    if not args.dry_run:
        sys.exit("time_to_target.py is a skeleton: not implemented, no figures (see its docstring)")


if __name__ == "__main__":
    main()
