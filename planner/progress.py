"""How far the slow stages of a plan have gone: candidates searched, certification's replays,
the explorations, the pools `planner simulate` replays. The library reports; a command that
listens (on a terminal only) draws the bars. Nobody listening costs nothing and prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Bar(Protocol):
    """One stage's bar: `update(n)` after n more items, `close()` when the stage ends."""

    def update(self, n: int) -> object: ...

    def close(self) -> None: ...


BarFactory = Callable[[str, int, str], Bar]  # (label, total, unit) -> a bar

_LISTENER: ContextVar[BarFactory | None] = ContextVar("planner_progress", default=None)


@contextmanager
def listening(factory: BarFactory | None) -> Iterator[None]:
    """Report every stage run inside the block to `factory` (None: to nobody)."""
    token = _LISTENER.set(factory)
    try:
        yield
    finally:
        _LISTENER.reset(token)


class _Stage:
    def __init__(self, bar: Bar | None):
        self._bar = bar

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)


@contextmanager
def stage(label: str, total: int, unit: str) -> Iterator[_Stage]:
    """A stage of `total` items (`unit`: ' pairs', ' pools', ...); call advance() as items finish."""
    factory = _LISTENER.get()
    bar = factory(label, total, unit) if factory is not None and total > 0 else None
    try:
        yield _Stage(bar)
    finally:
        if bar is not None:
            bar.close()
