#!/bin/bash
PYTHONPATH=. python train.py "$@"
