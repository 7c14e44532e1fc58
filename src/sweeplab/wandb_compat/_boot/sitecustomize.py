"""sweeplab's start-up hook for W&B programs in a sweep (put first on PYTHONPATH by the runner).

It arms `_sweeplab_wandb_hook` (which patches `wandb` only if and when the program imports it), then runs
the `sitecustomize` this one hides, if any, so the interpreter starts as it would without sweeplab.
Standard library only: the program may run under a Python that does not have sweeplab installed, and an old
one (a W&B program pinned to Python 3.6): this file keeps to syntax any Python 3 reads (no f-strings, no
annotations Python evaluates), so that an interpreter too old for the hook (before 3.6) gets one warning and
runs the program, rather than "Error in sitecustomize"; the hook itself keeps to Python 3.6's.
"""

_OLDEST = (3, 6)   # the hook's own syntax and library (tests/wandb/test_old_python.py)


def _arm():  # type: () -> None
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        if tuple(sys.version_info[:2]) < _OLDEST:
            raise RuntimeError("it needs Python " + ".".join(map(str, _OLDEST)) + " or newer, this is Python "
                               + ".".join(map(str, sys.version_info[:2])))
        import _sweeplab_wandb_hook

        _sweeplab_wandb_hook.install()
    except Exception as exc:  # never break the program: it runs, its metrics are just not mirrored
        sys.stderr.write("sweeplab: W&B hook not installed: " + str(exc) + " (the program runs; its W&B run is "
                         "read back from its offline files when it ends)\n")
    # run the sitecustomize we shadow (Debian's, a venv's, the user's)
    saved = sys.path[:]
    me = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as exc:
        sys.stderr.write("sweeplab: the hidden sitecustomize failed: " + str(exc) + "\n")
    finally:
        sys.path[:] = saved
        if me is not None:
            sys.modules["sitecustomize"] = me


_arm()
