#!/usr/bin/env python3
"""A plain argparse training script that knows nothing of sweeplab's Python API.

It reports metrics two ways a program in any language can: printing `@sweeplab {json}` lines on stdout,
and (Python only) `sweeplab.report(...)`, which does nothing when not run by sweeplab.
"""

from __future__ import annotations

import argparse
import json
import math


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--model.width", dest="width", type=int, default=32)
    args = p.parse_args()

    speed = 1.5 if args.optimizer == "adam" else 1.0
    loss = 2.0
    for epoch in range(args.epochs):
        loss = 0.2 + abs(math.log10(args.lr) + 2) * 0.3 + math.exp(-speed * (epoch + 1)) + 8 / args.width
        print("@sweeplab " + json.dumps({"step": epoch, "loss": loss}), flush=True)
    try:
        import sweeplab

        sweeplab.report({"final_loss": loss}, step=args.epochs)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
