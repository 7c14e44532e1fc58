"""sweeplab's start-up hook for W&B programs in a sweep (put first on PYTHONPATH by the runner).

It arms `_sweeplab_wandb_hook` (which patches `wandb` only if and when the program imports it), then runs
the `sitecustomize` this one hides, if any, so the interpreter starts as it would without sweeplab.
Standard library only: the program may run under a Python that does not have sweeplab installed.
"""

from __future__ import annotations


def _arm() -> None:
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import _sweeplab_wandb_hook

        _sweeplab_wandb_hook.install()
    except Exception as exc:  # never break the program: it runs, its metrics are just not mirrored
        sys.stderr.write(f"sweeplab: W&B hook not installed: {exc}\n")
    # run the sitecustomize we shadow (Debian's, a venv's, the user's)
    saved = sys.path[:]
    me = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as exc:
        sys.stderr.write(f"sweeplab: the hidden sitecustomize failed: {exc}\n")
    finally:
        sys.path[:] = saved
        if me is not None:
            sys.modules["sitecustomize"] = me


_arm()
