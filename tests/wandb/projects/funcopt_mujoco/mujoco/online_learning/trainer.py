# Shaped like WilderLavington/FunctionalStochasticOptimization, mujoco/online_learning/trainer.py and parser.py:
# argparse with parse_known_args (the sweep's `--label=mujoco` is ignored), the program setting WANDB_MODE itself
# ("online" unless --offline_wandb), `wandb.init(project=, config=vars(args), entity=)`, a row per episode
# logged with plain `wandb.log(info)`, `run.dir` read, `run.finish()`.
import argparse
import math
import os

import wandb


def get_args():
    parser = argparse.ArgumentParser(description='PyTorch Soft Actor-Critic Args')
    parser.add_argument('--algo', type=str, default='OGD')
    parser.add_argument('--episodes', type=int, default=100)
    parser.add_argument('--log_lr', type=float, default=-4)
    parser.add_argument('--offline_wandb', type=int, default=0, metavar='N')
    parser.add_argument('--seed', type=int, default=0, metavar='N')
    parser.add_argument('--model_type', type=str, default='nn', metavar='N')
    parser.add_argument('--eta_schedule', type=str, default='constant')
    parser.add_argument('--project', type=str, default='FunctionalOptimizationFinal')
    parser.add_argument('--entity', type=str, default='wilderlavington')
    args, knk = parser.parse_known_args()
    print('the following args were ignored...', knk)
    return args, parser


def train_il_agent(args=None):
    if args is None:
        args, _ = get_args()
    os.environ["WANDB_MODE"] = "offline" if args.offline_wandb else "online"
    run = wandb.init(project=args.project, config=vars(args), entity=args.entity)
    lr = 10 ** args.log_lr
    for episode in range(args.episodes):
        grad_norm = abs(args.log_lr + 1) + (1 if args.algo == 'SSO_SLS' else 0) + 1 / (episode + 1)
        wandb.log({'episode': episode, 'grad_norm': grad_norm, 'lr': lr, 'avg_loss': math.log1p(grad_norm)})
    assert os.path.isdir(run.dir)
    run.finish()
