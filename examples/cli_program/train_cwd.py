#!/usr/bin/env python3
"""A script that keeps its state in its working directory, as many do: `checkpoint.json` written every epoch
and read back at start (a retried attempt resumes from it), `model.json` saved at the end and loaded again
for the final evaluation. Run by several trials at once in one directory, the trials would read each other's
files; `trial: {workdir: trial}` (sweep_workdir.yaml) gives each trial a directory of its own.

Its data is found through SWEEPLAB_ORIGINAL_CWD, the directory the sweep was started in (the trial's own
directory is elsewhere), falling back to the working directory when not run by sweeplab.
"""

from __future__ import annotations

import argparse
import json
import math
import os


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    args = p.parse_args()
    home = os.environ.get("SWEEPLAB_ORIGINAL_CWD", os.getcwd())   # where relative input paths start
    print(f"running in {os.getcwd()}; input paths relative to {home}", flush=True)

    state = {"epoch": 0, "loss": 2.0}
    if os.path.exists("checkpoint.json"):   # a retry of this trial: its own checkpoint, in its own directory
        with open("checkpoint.json") as f:
            state = json.load(f)
    for epoch in range(state["epoch"], args.epochs):
        loss = 0.2 + abs(math.log10(args.lr) + 2) * 0.3 + math.exp(-(epoch + 1)) + 8 / args.width
        state = {"epoch": epoch + 1, "loss": loss}
        with open("checkpoint.json.tmp", "w") as f:
            json.dump(state, f)
        os.replace("checkpoint.json.tmp", "checkpoint.json")
        print("@sweeplab " + json.dumps({"step": epoch, "loss": loss}), flush=True)

    with open("model.json", "w") as f:
        json.dump({"lr": args.lr, "width": args.width, "loss": state["loss"]}, f)
    with open("model.json") as f:   # "evaluate the saved model": this trial's, not a neighbour's
        model = json.load(f)
    assert (model["lr"], model["width"]) == (args.lr, args.width), "evaluated another trial's model"


if __name__ == "__main__":
    main()
