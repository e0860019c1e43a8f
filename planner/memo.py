"""What capacity searches share: answers remembered per tuple of frozen catalog objects, by
identity (ObjectMemo), and copies that share every attribute (shallow_copy).

Catalog objects (models, GPUs, dtypes) are frozen but hash by value, which costs more than the
answers remembered here. An entry holds its objects, so an id names one object while the entry
lives, and a hit also checks identity: an equal copy (another catalog's entry of the same id)
gets its own answer, never another object's.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import is_
from typing import Generic, TypeVar

T = TypeVar("T")


class ObjectMemo(Generic[T]):
    """compute(*objects, *values) remembered per (objects by identity, values by equality);
    at most `kept` entries, all forgotten when full (a planning run meets a few hundred)."""

    def __init__(self, compute: Callable[..., T], kept: int = 512):
        self._compute, self._kept = compute, kept
        self._entries: dict[tuple, tuple[tuple, T]] = {}

    def __call__(self, objects: tuple, values: tuple = ()) -> T:
        key = (*map(id, objects), *values)
        hit = self._entries.get(key)
        # map(is_) rather than a generator: a search asks thousands of times, and a generator's frame
        # costs more than the check
        if hit is not None and len(hit[0]) == len(objects) and all(map(is_, hit[0], objects)):
            return hit[1]
        if len(self._entries) >= self._kept:
            self._entries.clear()
        answer = self._compute(*objects, *values)
        self._entries[key] = (objects, answer)
        return answer


def shallow_copy(obj: T) -> T:
    """A copy of a plain object sharing every attribute of the original: copy.copy's answer for a
    class with neither __copy__ nor __reduce__ of its own, without the copy protocol's cost (a TTFT
    sweep copies a replica model and its latency model per target, thousands of times)."""
    other = object.__new__(type(obj))
    other.__dict__.update(obj.__dict__)
    return other
