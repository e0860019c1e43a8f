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

numpy's BLAS runs on one thread (one_blas_thread), before numpy loads, and large arrays reuse the
memory freed by earlier ones (reuse_array_memory)."""

from __future__ import annotations

import ctypes
import gc
import os
import sys

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
    5.6 s against 5.3 s end to end (alternating runs, 2026-12-04, before certification's half-hour
    runs made that command about twice as long), every shipped report the same."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def begin_imports() -> None:
    """Before the imports: no collections while they run (they make no garbage worth one)."""
    gc.disable()


def end_imports() -> None:
    """After them: what they made is moved out of the collector's generations, and it runs again."""
    gc.freeze()
    gc.enable()


def standard_streams() -> None:
    """A descriptor 0, 1 or 2 the command was started without (`planner ... 2>&-`) is opened on the
    null device, and Python's stream for it (None then) writes there: else the next file opened
    takes the number, and what a library writes to "stderr" lands in it (a report, a font file);
    and print(..., file=sys.stderr), traceback.print_exc and click's Ctrl-C line, given None,
    write to stdout."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, once those below are open
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # noqa: SIM115 (the process's own)


def prepare_process() -> None:
    """What every planner process that plans does first, before numpy loads: the command line
    (planner.entry), the tests (tests/conftest.py) and the benches that time or replay as it does."""
    one_blas_thread()
    reuse_array_memory()


# glibc's mallopt settings (reuse_array_memory): (the parameter's number in malloc.h, its value, and
# the environment variable and the glibc tunable that state it, either of which a user's own setting keeps)
ALLOCATOR_SETTINGS = (
    (-8, 1, "MALLOC_ARENA_MAX", "glibc.malloc.arena_max"),  # M_ARENA_MAX: one arena
    (-3, 32 * 2**20, "MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"),  # M_MMAP_THRESHOLD: glibc's most on 64-bit
    (-1, 256 * 2**20, "MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"),  # M_TRIM_THRESHOLD
)


def reuse_array_memory() -> None:
    """Large arrays are carved from memory the process keeps, not mapped fresh from the kernel
    each time; before numpy is imported and before any thread starts (NUMPY_MADVISE_HUGEPAGE, where
    the environment states no setting of its own, is inherited by a worker process; the allocator's
    settings are set in each). An allocator setting the environment states (its MALLOC_ variable or
    its glibc.malloc tunable in GLIBC_TUNABLES) is the user's, and kept.

    A certification replay makes a few dozen arrays of its million steps (8 MB each) and drops them,
    several replays at once in threads. glibc maps every allocation above its mmap threshold (128 KiB,
    rising to at most 32 MiB as it sees such blocks freed) afresh and unmaps it on free, and gives
    each thread an arena of 64 MiB heaps that it unmaps once they empty; either way each array's
    pages are faulted in and zeroed by the kernel again. numpy also asks for transparent huge pages
    on arrays of 4 MB and more, which a kernel that compacts memory on such faults ('defrag: madvise',
    the kernel's default) pays for again at every fault. So: the mmap threshold at 32 MiB, freed
    memory kept up to 256 MiB, one arena for every thread, and no huge-page advice. The replay
    threads, one a core, then share the arena's lock; they allocate a few large arrays a replay,
    and on 2 cores that cost nothing measurable (more cores are not measured).

    Measured on 2 cores, the certified 128k rollout (`planner solve`, default flags), three runs each,
    alternating, the reports byte for byte the same:
    - as glibc and numpy come (the commit before these settings): 12.1-12.8 s end to end, 5.9-6.7
      CPU-s in the kernel, 0.86-1.09 million page faults, peak memory 720-780 MB;
    - all four (the three allocator settings, and no huge-page advice): 8.5-9.1 s, 0.4-0.5 CPU-s in
      the kernel, 0.12-0.18 million faults, 555-586 MB;
    - with numpy's huge-page advice left on: 8.6-8.8 s, 1.0-1.3 CPU-s in the kernel (0.06-0.08
      million faults, of 2 MB pages), 544-599 MB;
    - with glibc's own count of arenas (MALLOC_ARENA_MAX=16, eight a core): 8.6-9.1 s, 0.7-1.5
      CPU-s in the kernel, 0.25-0.65 million faults, 744-802 MB.
    The thresholds make the time; the one arena and no advice spare the kernel's work and memory,
    which a busier machine would feel. The allocator settings are glibc's: other C libraries (macOS,
    musl) keep their own, and only numpy's advice is turned off there."""
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # a C library without mallopt
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    for parameter, value, variable, tunable in ALLOCATOR_SETTINGS:
        if variable not in os.environ and tunable + "=" not in tunables:
            mallopt(parameter, value)
