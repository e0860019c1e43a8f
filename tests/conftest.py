from __future__ import annotations

from planner.startup import prepare_process

prepare_process()  # as the command line runs (planner.entry): before numpy loads

import pytest  # noqa: E402

from planner.catalog import load_catalog  # noqa: E402


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()
