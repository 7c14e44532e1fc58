# In the style of public programs that save their model under the run's name and sweep id
# (`torch.save(model, f"models/{wandb.run.sweep_id}_{wandb.run.name}.pt")`)
import os

import wandb

run = wandb.init()
os.makedirs("models", exist_ok=True)
with open(os.path.join("models", f"{run.sweep_id}_{run.name}.pt"), "w") as f:
    f.write(str(run.config.lr))
run.log({"loss": run.config.lr})
