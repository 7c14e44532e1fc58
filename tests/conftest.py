"""Suite-wide setup: trials run as from an activated virtualenv.

`${interpreter}` is `python` on PATH, as under W&B's agent; a user runs sweeplab with their environment
active, so the suite puts the interpreter that runs it first on PATH for the trials it starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_bin = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _bin:
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")
