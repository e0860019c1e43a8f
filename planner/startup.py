"""How a planner process starts: its imports with the cyclic garbage collector off, and what they
built set aside from it for good.

The planner's commands are short-lived processes that import about 350 modules (planner, numpy,
pydantic, PuLP, HiGHS; 580 in a worker, with matplotlib) and then plan. Imports make objects that
live as long as the process and form few cycles, yet the collector ran about 200 collections over
them during the 128k rollout's imports (0.05-0.10 CPU-s), and every full collection of the run
walked them all again: measured with gc.callbacks, 0.10-0.13 CPU-s of collections during the run
itself, 0.04-0.05 once the imported objects are frozen (gc.freeze, Python's own remedy for
long-lived startup state). The full candidate set's run spent 0.31-0.36 CPU-s collecting,
0.18-0.20 frozen.

numpy's BLAS runs on one thread (one_blas_thread), before numpy loads."""

from __future__ import annotations

import gc
import os

# The variable each BLAS a numpy wheel may carry reads its thread count from, once, when it loads:
# OpenBLAS (Linux and Windows wheels), MKL, Apple's Accelerate (macOS wheels).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def one_blas_thread() -> None:
    """numpy's BLAS on one thread, where the environment states no count of its own; before numpy
    is imported (and inherited by a worker process).

    The planner's only large BLAS calls are np.dot over a replay's million steps (its measures).
    Split over a machine's cores, each such sum was added in another order on a machine with
    another number of cores (measured: the last bits of a million-term dot differ between one
    thread and two), so a report's simulated figures depended on where it ran; and OpenBLAS's idle
    threads spin: the certified 128k rollout spent 8.3 CPU-s on 2 cores, 4.4 on one BLAS thread,
    5.6 s against 5.3 s end to end (alternating runs), every shipped report the same."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def begin_imports() -> None:
    """Before the imports: no collections while they run (they make no garbage worth one)."""
    gc.disable()


def end_imports() -> None:
    """After them: what they made is moved out of the collector's generations, and it runs again."""
    gc.freeze()
    gc.enable()
