"""A dependency-free objective: a noisy quadratic bowl whose 'training' converges over steps.

    sweeplab sweep examples/quadratic/sweep.yaml
    sweeplab run examples/quadratic/train.py:train x=0.5 y=-1 --config examples/quadratic/config.yaml
    python examples/quadratic/train.py x=0.5 y=-1                   # the same, from `sl.main` below
"""

from __future__ import annotations

import math


def train(config, run):
    x, y = float(config.x), float(config.y)
    optimum = (x - 1.0) ** 2 + (y + 2.0) ** 2 + 0.1 * math.sin(5 * x)
    loss = optimum + 1.0
    for step in range(int(config.steps)):
        loss = optimum + 1.0 / (step + 1)           # approaches the optimum as steps go on
        run.log({"loss": loss}, step=step)
        if run.should_stop:
            break
    return {"loss": loss}


if __name__ == "__main__":   # a plain `python train.py key=value ...`: one trial, recorded as `sweeplab run` does
    import sweeplab as sl

    sl.main(train, config="config.yaml")
