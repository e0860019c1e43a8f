"""Golden files: exact expected outputs, rewritten only on request and then not compared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


def assert_matches_golden(name: str, text: str) -> None:
    """`text` equals tests/golden/<name>. Set PLANNER_UPDATE_GOLDEN=1 to rewrite the file after an
    intended change: the test then skips (a file compared with itself proves nothing); review
    its diff and run again without the variable."""
    golden = GOLDEN / name
    if os.environ.get("PLANNER_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
        pytest.skip(f"{name} rewritten, not compared: review its diff, then run again without PLANNER_UPDATE_GOLDEN")
    assert text == golden.read_text(encoding="utf-8")
