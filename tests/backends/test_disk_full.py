"""How a worker tells a trial that found its disk full (not the trial's fault) from one that failed."""

from __future__ import annotations

import errno
import os
import signal

import pytest

from sweeplab.backends._diskfull import disk_full_data, full_disk_error, names_full_disk
from sweeplab.errors import StoreError


def _chained(err: int) -> BaseException:
    try:
        try:
            raise OSError(err, os.strerror(err))
        except OSError as exc:
            raise StoreError(f"cannot write checkpoint under /ckpt: {exc}") from exc
    except StoreError as outer:
        return outer


@pytest.mark.parametrize("exc, full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (OSError(errno.EFBIG, "File too large"), True),
    (_chained(errno.ENOSPC), True),                   # a checkpoint save's StoreError, from the OSError
    (OSError(errno.EACCES, "Permission denied"), False),
    (ValueError("No space left on device"), False),   # the words alone, in an exception of the trial's
], ids=["enospc", "edquot", "efbig", "chained", "eacces", "words"])
def test_a_function_trial_found_the_disk_full_when_an_oserror_in_its_chain_says_so(exc, full):
    assert (full_disk_error(exc) is not None) is full


@pytest.mark.parametrize("line, sig, full", [
    ("OSError: [Errno 28] No space left on device: '/data/x'", None, True),
    ("write /data/x: no space left on device", None, True),                      # Go
    ("Error: Os { code: 122, kind: FilesystemQuotaExceeded, message: \"Disk quota exceeded\" }", None, True),
    ("OSError: [Errno 27] File too large", None, True),
    ("", signal.SIGXFSZ, True),                                                     # RLIMIT_FSIZE, default action
    ("bash: line 1: 4242 File size limit exceeded head -c 9 /dev/zero > f", None, True),   # ... a shell's child
    ("HTTP 413: File too large", None, False),                                      # not an errno
    ("RuntimeError: CUDA out of memory", None, False),
    ("", signal.SIGKILL, False),
], ids=["python", "go", "rust-quota", "efbig", "sigxfsz", "shell-sigxfsz", "http-413", "cuda-oom", "sigkill"])
def test_a_command_trial_found_the_disk_full_when_its_last_error_line_names_it(line, sig, full):
    assert names_full_disk(line, sig) is full


def test_the_reason_names_the_full_place_when_the_error_does_not(tmp_path):
    data = disk_full_data("[Errno 28] No space left on device", [str(tmp_path)])
    assert data["disk_full"] and data["reason"].startswith("found the disk full: [Errno 28]")
    named = disk_full_data(f"cannot write checkpoint under {tmp_path}: [Errno 28] No space left on device",
                           [str(tmp_path)])
    assert named["message"].count(str(tmp_path)) == 1
    program = disk_full_data(f"sweeplab.errors.StoreError: cannot write checkpoint under {tmp_path}: [Errno 28]")
    assert program["reason"].startswith("found the disk full: StoreError: cannot write checkpoint under ")
