from __future__ import annotations

from planner.startup import prepare_process

prepare_process()  # as the command line runs (planner.entry): before numpy loads

import pytest  # noqa: E402

from planner.catalog import load_catalog  # noqa: E402


def pytest_collection_modifyitems(items):
    """The tests marked long first, the rest in their order. pytest-xdist's worksteal (pyproject's
    addopts) hands each process an equal share of the tests in the order collected, and a process
    that runs out takes half of what another has left: with the long ones first, the suite ends on
    short tests. Collected last, tests/test_report.py's shipped reports and fleet forecast (two
    minutes and one and a half) had one process working alone at the end: the suite took 418 and
    428 s on 2 cores, against 388 and 392 s so."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()
