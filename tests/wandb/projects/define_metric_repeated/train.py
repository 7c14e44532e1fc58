import wandb

run = wandb.init(config={"learning_rate": 0.3})
for name in ("eval/mean_reward", "eval/mean_ep_length"):
    wandb.define_metric(name, summary="min")    # wandb merges these: the summary holds min, max and mean
    wandb.define_metric(name, summary="max")
    wandb.define_metric(name, summary="mean")
for i in range(4):
    wandb.log({"eval/mean_reward": [1.0, 4.0, 2.0, 3.0][i] * wandb.config.learning_rate,
               "eval/mean_ep_length": 10 + i})
wandb.finish()
