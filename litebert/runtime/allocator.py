"""Keep freed memory in the process: training allocates the same large buffers every step.

PyTorch's CPU tensors come straight from malloc. glibc serves large blocks with mmap and returns them with
munmap, and hands the top of its heap back to the OS once enough of it is free; either way the next step's
buffers arrive as fresh pages, and the kernel zero-fills every one of them on first touch: a sizeable share
of a CPU step's time goes to page faults that retaining freed memory removes (docs/benchmarks.md).

The cost: resident memory does not shrink after a peak, which is the right trade for a process that will
reach the same peak again at its next step. `litebert` commands turn it on at start (cli.main); library
users who want it call `retain_freed_memory()` once, before training.
"""

from __future__ import annotations

import ctypes

# glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def retain_freed_memory() -> bool:
    """Ask glibc's malloc never to mmap blocks or trim its heap, so freed memory is reused, not re-faulted.
    Process-wide and harmless to call twice; False where the C library has no mallopt (macOS, musl, Windows)."""
    try:  # the symbols already loaded into this process: libc's, without find_library's ldconfig subprocess
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; M_TRIM_THRESHOLD -1 turns trimming off (mallopt(3)).
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, -1) == 1
