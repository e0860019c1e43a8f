"""How a planner process starts (planner.startup): numpy's BLAS on one thread, and large arrays that reuse
their memory."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

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


class _Mallopt:
    """Stands in for the C library's mallopt: records what it is told."""

    def __init__(self):
        self.calls = []

    def __call__(self, parameter, value):
        self.calls.append((parameter, value))
        return 1


def test_the_allocator_settings_are_set_unless_the_environment_states_them(monkeypatch):
    from planner import startup

    mallopt = _Mallopt()
    monkeypatch.setattr(startup.ctypes, "CDLL", lambda name: type("libc", (), {"mallopt": mallopt})())
    monkeypatch.setattr(startup.sys, "platform", "linux")
    for _, _, variable, _ in startup.ALLOCATOR_SETTINGS:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    startup.reuse_array_memory()
    assert mallopt.calls == [(-8, 1), (-3, 32 * 2**20), (-1, 256 * 2**20)]
    assert os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0"
    mallopt.calls.clear()
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    startup.reuse_array_memory()
    assert mallopt.calls == [(-3, 32 * 2**20), (-1, 256 * 2**20)]  # the user's arena count stands
    assert os.environ["NUMPY_MADVISE_HUGEPAGE"] == "1"
    mallopt.calls.clear()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=7:glibc.malloc.trim_threshold=1000000")
    startup.reuse_array_memory()
    assert mallopt.calls == [(-3, 32 * 2**20)]  # the user's trim threshold (and arena count) stand, and no other
    mallopt.calls.clear()
    monkeypatch.setattr(startup.sys, "platform", "darwin")
    monkeypatch.delenv("GLIBC_TUNABLES")
    startup.reuse_array_memory()
    assert mallopt.calls == []
    monkeypatch.setattr(startup.sys, "platform", "linux")
    monkeypatch.setattr(startup.ctypes, "CDLL", lambda name: object())  # a C library without mallopt
    startup.reuse_array_memory()


_REPLAYS = """
import resource, sys
if sys.argv[1] == "planner":
    from planner.startup import reuse_array_memory
    reuse_array_memory()
import numpy as np

before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    records = [np.ones(1_000_000) for _ in range(6)]  # a replay's step records, 8 MB each
    del records
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _huge_pages_always() -> bool:
    """Whether the kernel backs every large mapping with 2 MB pages (transparent_hugepage 'always'):
    then a fresh array faults once a 2 MB page, and the plain run below counts far fewer faults."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            return "[always]" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or _huge_pages_always() or "LD_PRELOAD" in os.environ,
                    reason="glibc's own allocator, with transparent huge pages not 'always'")
def test_arrays_made_and_dropped_again_and_again_reuse_their_memory():
    """Six 8 MB arrays made and dropped twenty times, as a certification replay makes its records: as
    glibc comes (and numpy without huge-page advice, which would count a 2 MB page as one fault),
    every round faults its pages in again; with reuse_array_memory only the first round does. (In
    one thread: with two, how often the plain run faults depends on how their rounds interleave,
    and under a loaded machine it fell to twice the first round's pages.)"""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"} | {"NUMPY_MADVISE_HUGEPAGE": "0"}

    def faults(how: str) -> int:
        run = subprocess.run([sys.executable, "-c", _REPLAYS, how], capture_output=True, text=True, check=True, env=env)
        return int(run.stdout)

    first_round_pages = 6 * 8_000_000 // os.sysconf("SC_PAGE_SIZE")
    reused, plain = faults("planner"), faults("plain")
    assert reused < 1.5 * first_round_pages
    assert plain > 5 * first_round_pages
