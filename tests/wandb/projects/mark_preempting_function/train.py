# A W&B function sweep (`wandb.agent(sweep_id, function=train)`) on preemptible machines: the function learns
# that its machine goes away (here: on its first two starts, counted in a file), calls `run.mark_preempting()`
# and raises; W&B requeues such a run ("Signal handling and sweep runs").
import os

import wandb


def train(config=None):
    run = wandb.init(config=config)
    starts = int(open("starts").read()) if os.path.exists("starts") else 0
    with open("starts", "w") as f:
        f.write(str(starts + 1))
    for epoch in range(3):
        run.log({"loss": run.config.lr / (epoch + 1)})
        if starts < 2 and epoch == 1:
            run.mark_preempting()
            raise RuntimeError("this machine is being preempted")
    run.finish()
