"""Files put first on a trial's PYTHONPATH (W&B programs): `sitecustomize` loads `_sweeplab_wandb_hook`.

Both are self-contained (standard library only): the program may run under a Python without sweeplab."""
