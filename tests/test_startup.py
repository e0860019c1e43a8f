"""How a planner process starts (planner.startup): numpy's BLAS on one thread."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from planner.startup import BLAS_THREAD_VARIABLES, one_blas_thread

# A million-term dot product: the size of a long-context replay's sums (planner.sim_measures), and
# large enough that a multi-threaded BLAS splits it into partial sums, one per thread.
_DOT = ("import numpy as np; rng = np.random.default_rng(0); a, b = rng.random(1_000_000), rng.random(1_000_000); "
        "print(repr(float(np.dot(a, b))))")


def _dot_in_a_fresh_process(code: str, **stated: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES} | stated
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout


def test_one_blas_thread_sets_each_variable_unless_the_environment_states_one(monkeypatch):
    for name in BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    one_blas_thread()
    assert {name: os.environ[name] for name in BLAS_THREAD_VARIABLES} == {
        "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "4", "VECLIB_MAXIMUM_THREADS": "1"}


def test_numpy_loaded_after_it_sums_as_on_one_stated_thread_and_so_do_the_tests():
    """The same bits as a process told OPENBLAS_NUM_THREADS=1; and the tests' own process
    (tests/conftest.py) computes as the command line would in this environment (one thread, or
    the count a developer states). Both can fail only on two cores or more: one core sums alike."""
    after = "from planner.startup import one_blas_thread; one_blas_thread(); " + _DOT
    one_thread = _dot_in_a_fresh_process(_DOT, OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", VECLIB_MAXIMUM_THREADS="1")
    assert _dot_in_a_fresh_process(after) == one_thread
    as_stated_here = {k: os.environ[k] for k in BLAS_THREAD_VARIABLES if k in os.environ}
    rng = np.random.default_rng(0)
    a, b = rng.random(1_000_000), rng.random(1_000_000)
    assert repr(float(np.dot(a, b))) + "\n" == _dot_in_a_fresh_process(after, **as_stated_here)
