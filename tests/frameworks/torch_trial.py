"""A function trial written as docs/torch.md's training loop (`sweeplab.torch`): one code path for one process
and for DDP ranks. Each rank writes what it did into `<trial>-<attempt>-<rank>.json` under the sweep's
directory (its working directory): the epoch it started at, the epochs it trained, its final parameters.
`hold_at`: after that epoch's report the rank waits (up to 60 s) for a stop request, so a test can signal it
at that exact point of the loop."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import sweeplab as sl
import sweeplab.torch


def train(config: Any, run: sl.Run) -> dict[str, float]:
    strategy = sweeplab.torch.strategy()
    torch.manual_seed(0)
    model, optimizer = strategy.setup(nn.Linear(4, 1), None)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    start = 0
    state = run.restore()
    if state is not None:
        strategy.load_state_dict(model, state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    loader = strategy.loader(data, batch_size=16, seed=run.seed)
    facts: dict[str, Any] = {"start": start, "epochs": [], "pid": os.getpid()}
    out = Path(f"{run.trial}-{run.attempt}-{strategy.rank}.json")
    val = float("nan")
    for epoch in range(start, config.epochs):
        strategy.epoch(epoch)
        for xb, yb in loader:
            xb, yb = strategy.to_device((xb, yb))
            strategy.backward((model(xb) - yb).pow(2).mean())
            strategy.step(optimizer)
        with torch.no_grad():
            val = strategy.all_reduce_mean(float((model(x) - x.sum(1, keepdim=True)).pow(2).mean()))
        run.log({"val_loss": val}, step=epoch)
        facts["epochs"].append(epoch)
        out.write_text(json.dumps(facts))
        if epoch == config.hold_at:   # the rest of an epoch's work, during which a SIGTERM arrives
            deadline = time.monotonic() + 60
            while not run.should_stop and time.monotonic() < deadline:
                time.sleep(0.02)
        # docs/torch.md: agree on the stop first, so that the checkpoint of a stopping epoch is always written
        stop = strategy.should_stop(run)
        run.checkpoint({"model": strategy.state_dict(model), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       step=epoch, force=stop)
        if stop:
            break
    facts["params"] = [p.tolist() for p in strategy.unwrap(model).parameters()]
    out.write_text(json.dumps(facts))
    strategy.cleanup()
    return {"val_loss": val}
