import collections
import multiprocessing
import os

import wandb

Worker = collections.namedtuple("Worker", ("queue", "process"))


def reset_wandb_env():
    exclude = {"WANDB_PROJECT", "WANDB_ENTITY", "WANDB_API_KEY", "WANDB_DIR"}
    for k in list(os.environ):
        if k.startswith("WANDB_") and k not in exclude:
            del os.environ[k]


def train(sweep_q, worker_q):
    reset_wandb_env()
    num, config = worker_q.get()
    run = wandb.init(group="cv", name=f"fold-{num}", config=config)
    val_accuracy = 0.1 * (num + 1) * config["scale"]
    run.log(dict(val_accuracy=val_accuracy))
    wandb.finish()
    sweep_q.put(val_accuracy)


def main():
    # spin up workers before calling wandb.init(), as W&B's example does
    sweep_q = multiprocessing.Queue()
    workers = []
    for _ in range(2):   # two folds (W&B's example has 5)
        q = multiprocessing.Queue()
        p = multiprocessing.Process(target=train, kwargs=dict(sweep_q=sweep_q, worker_q=q))
        p.start()
        workers.append(Worker(queue=q, process=p))
    sweep_run = wandb.init()
    metrics = []
    for num, worker in enumerate(workers):
        worker.queue.put((num, dict(sweep_run.config)))
        metrics.append(sweep_q.get())
        worker.process.join()
    sweep_run.log(dict(val_accuracy=sum(metrics) / len(metrics)))
    wandb.finish()


if __name__ == "__main__":
    main()
