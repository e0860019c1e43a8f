"""How a planner process starts: its imports with the cyclic garbage collector off, and what they
built set aside from it for good.

The planner's commands are short-lived processes that import about 350 modules (planner, numpy,
pydantic, PuLP, HiGHS; 580 in a worker, with matplotlib) and then plan. Imports make objects that
live as long as the process and form few cycles, yet the collector ran about 200 collections over
them during the 128k rollout's imports (0.05-0.10 CPU-s), and every full collection of the run
walked them all again: measured with gc.callbacks, 0.10-0.13 CPU-s of collections during the run
itself, 0.04-0.05 once the imported objects are frozen (gc.freeze, Python's own remedy for
long-lived startup state). The full candidate set's run spent 0.31-0.36 CPU-s collecting,
0.18-0.20 frozen."""

from __future__ import annotations

import gc


def begin_imports() -> None:
    """Before the imports: no collections while they run (they make no garbage worth one)."""
    gc.disable()


def end_imports() -> None:
    """After them: what they made is moved out of the collector's generations, and it runs again."""
    gc.freeze()
    gc.enable()
