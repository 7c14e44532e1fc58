import argparse

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--optimizer", default=None, type=str)
parser.add_argument("--flag1", default=False, type=lambda s: s.lower() == 'true')
args = parser.parse_args()

run = wandb.init(config=args)
run.log(dict(metric=float(args.flag1) + float(run.config.flag1 is True)))
