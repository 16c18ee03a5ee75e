"""A process that ends with the one that started it, by the kernel's hand (Linux's parent-death
signal): however the parent ends, a SIGKILL included, and whatever this process is doing, a call
into C code that holds the interpreter included, which no thread of its own could interrupt."""

from __future__ import annotations

import ctypes
import os

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent: int, signal_number: int) -> bool:
    """Have the kernel send ``signal_number`` to this process when ``parent`` ends, and send it now
    if ``parent`` has ended already (this process was then given another parent). The kernel counts
    the end of the parent's *thread* that started this process: ``parent`` must have started it from
    a thread that lives as long as it does. False where there is no ``prctl`` (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0)
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it ended before the kernel was asked
        os.kill(os.getpid(), signal_number)
    return True
