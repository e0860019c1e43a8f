from __future__ import annotations

from planner.startup import one_blas_thread, reuse_array_memory

one_blas_thread()  # as the command line runs (planner.entry): before numpy loads
reuse_array_memory()

import pytest  # noqa: E402

from planner.catalog import load_catalog  # noqa: E402


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()
