"""Progress bars with a total and an ETA for the library's stages (planner.progress), drawn on
stderr only when it is a terminal: pipes, files and tests see no byte of them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from planner.progress import listening


class _Bars:
    """Nested stages each get their own line, below the stage that runs them."""

    def __init__(self):
        self.depth = 0

    def __call__(self, label: str, total: int, unit: str) -> _Bar:
        return _Bar(self, label, total, unit)


class _Bar:
    def __init__(self, owner: _Bars, label: str, total: int, unit: str):
        from tqdm import tqdm

        self._owner = owner
        self._bar = tqdm(desc=label, total=total, unit=unit, file=sys.stderr, leave=False, position=owner.depth)
        owner.depth += 1

    def update(self, n: int) -> None:
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()
        self._owner.depth -= 1


@contextmanager
def terminal_progress() -> Iterator[None]:
    """Draw the stages run inside the block, when stderr is a terminal."""
    with listening(_Bars() if sys.stderr.isatty() else None):
        yield
