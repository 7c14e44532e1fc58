# Shaped like WilderLavington/FunctionalStochasticOptimization, mujoco/mujoco_ex.py: the directory the agent runs
# in is put on sys.path (`os.path.dirname(os.path.dirname('./'))` is ''), then the package is imported from it.
import argparse
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname('../../')))
sys.path.append(os.path.dirname(os.path.dirname('./')))
from mujoco.online_learning.trainer import train_il_agent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--train_expert_flag', type=int, default=0, metavar='N')
    args, _ = parser.parse_known_args()
    if not args.train_expert_flag:
        train_il_agent()


if __name__ == "__main__":
    main()
