"""Requests counted twice: rows of timed logs that repeat another row's arrival time and token
counts exactly.

A log exported twice into one file, or two exports that overlap (a day's file and a week's that
holds it, two daily exports cut at different hours), hold the same requests twice: every file's
contents differ, so the checks on paths, links and contents (planner.workload.ingest) pass, and
every rate read from them counts those requests twice. The peak is then twice what was served
wherever the repeated stretch holds the busiest minute, and the plan buys for it. In real traces
an exact repeat is all but absent: none in Azure's 2023 conversation (19,366 rows) and code (8,819)
traces, whose times have 0.1 µs, and 1 in Mooncake's conversation trace (12,031 rows, milliseconds).
Two requests alike in one tick of a coarse clock repeat a row by chance, and do so often where the
clock is coarse: the Azure trace stamped in whole minutes repeats 3.4% of its rows, each a distinct
request. Chance repeats come one at a time among other rows; copies come as copies do, in runs of
rows that all repeat (a stretch copied), or each right after the row it repeats (a copy sorted by
time beside its original). So repeats are said only where they come so (copied_rows), with their
count, and never removed: a load test's identical requests, sent together, are the user's to judge.

Each row is a 64-bit key (its time's bits and its two counts, mixed: splitmix64's finaliser,
Steele, Lea & Flood, OOPSLA 2014), which two different rows share with probability 2^-64 (a
collision among the kept keys: below 1e-6). Memory stays bounded: past KEYS_KEPT keys only those
whose low bits are zero are kept, one more bit at a time, so that a kept row's repeats are kept
with it (the same key) and the count of repeats among them, scaled, estimates the whole's, as a
distinct-sampling sketch does (Gibbons, VLDB 2001); below that many rows, every row is kept and the
count is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEYS_KEPT = 1 << 20  # 8 MiB of keys (16 while they are sorted at the end): exact up to a million rows read
# Said where the repeats are at least this share of a file's rows, and at least REPEATS_SAID rows: a
# real log's chance repeats (Mooncake's 1 in 12,031) are not, a day's export overlapping a week's is.
SHARE_SAID = 0.001
REPEATS_SAID = 20
STRETCH_ROWS = 8  # consecutive kept rows that all repeat: a copied stretch (copied_rows)


def row_keys(times: np.ndarray, prompt: np.ndarray, output: np.ndarray, sample_bits: int = 0,
             previous: int | None = None) -> tuple[np.ndarray, int, int]:
    """cell_kernel.row_keys (compiled: the ingestion loop's module) on a batch: the keys of its rows
    (their arrival time's 64 bits as read, int64 ticks or float64 seconds, and their token counts)
    whose lowest `sample_bits` bits are zero, how many rows have the key of the row before them
    (`previous`: the key of the row before the batch's first), and its last row's key."""
    from planner.workload import cell_kernel  # numba loads only when a log is read

    bits = np.ascontiguousarray(times, dtype=times.dtype if times.dtype.itemsize == 8 else np.int64).view(np.uint64)
    keys, adjacent, last = cell_kernel.row_keys(
        bits, np.ascontiguousarray(prompt, np.int64), np.ascontiguousarray(output, np.int64),
        np.uint64((1 << sample_bits) - 1), np.uint64(previous or 0), previous is not None)
    return keys, int(adjacent), int(last)


@dataclass(frozen=True)
class Repeats:
    """Rows of one file that repeat rows read before them as copies do (copied_rows): rows, their
    count (estimated where `sampled`); of: the files whose rows they repeat, most first (the file
    itself where it holds its own rows twice)."""

    path: str
    of: tuple[str, ...]
    rows: int
    file_rows: int
    sampled: int = 1  # the share of keys kept is 1 / sampled

    def text(self) -> str:
        count = f"about {self.rows:,}" if self.sampled > 1 else f"{self.rows:,}"
        share = self.rows / max(self.file_rows, 1)
        where = " and ".join("another of its rows" if of == self.path else f"rows of {of}" for of in self.of)
        how = ("a log exported or appended twice into one file holds" if self.of == (self.path,)
               else "exports that overlap (or a log given beside one that holds it) hold")
        estimate = (f" (estimated from the 1 in {self.sampled:,} of rows whose keys a log this long keeps)"
                    if self.sampled > 1 else "")
        return (f"{self.path}: {count} rows ({share:.1%}){estimate} repeat {where} exactly (arrival time and token "
                f"counts), as copies do, in runs of rows or each right after its original: {how} those requests "
                "twice, and every rate here, the peak's with them, counts them twice; if they are not distinct "
                "requests, remove the repeats (SELECT DISTINCT) and plan again")


@dataclass
class _File:
    """What the counter holds of one file besides its keys: the key of its last row read, and how many
    of its rows had the key of the row before them."""

    last: int | None = None
    adjacent: int = 0


class RepeatCounter:
    """The keys of the timed rows read so far, batch by batch, with the file each batch came in
    (files numbered as read)."""

    def __init__(self, keys_kept: int = KEYS_KEPT):
        self._batches: list[tuple[int, np.ndarray]] = []
        self._files: dict[int, _File] = {}
        self._held = 0
        self._bits = 0  # keys kept: those whose lowest _bits bits are zero
        self._keys_kept = keys_kept

    def add(self, file: int, times: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
        """A batch of a file's usable timed rows (the batches of a file in the order read)."""
        state = self._files.setdefault(file, _File())
        keys, adjacent, state.last = row_keys(times, prompt, output, self._bits, state.last) if times.size else (
            times[:0].view(np.uint64), 0, state.last)
        state.adjacent += adjacent
        if not keys.size:
            return
        self._batches.append((file, keys))
        self._held += keys.size
        while self._held > self._keys_kept:
            self._bits += 1
            mask = np.uint64((1 << self._bits) - 1)
            self._batches = [(f, k[(k & mask) == 0]) for f, k in self._batches]
            self._held = sum(k.size for _, k in self._batches)

    def repeats(self, paths: list[str], rows: list[int]) -> list[Repeats]:
        """Each file whose rows repeat others as copies do (copied_rows: in runs of STRETCH_ROWS kept
        rows or more, or right after the row they repeat), at least REPEATS_SAID rows and SHARE_SAID of
        its rows, with the files they repeat (each repeat counted against the file its key first came
        in); paths and rows: each file's name and the rows it had (by file number).

        The keys that come more than once are found by one sort of them all; then each batch, in the
        order read, is matched against those alone: no array of a file number per key, and no more
        memory at the end than the keys' own again."""
        if not self._batches:
            return []
        keys = np.concatenate([k for _, k in self._batches])
        keys.sort()
        repeated = np.unique(keys[1:][keys[1:] == keys[:-1]])
        del keys
        if not repeated.size:
            return []
        first = np.full(repeated.size, -1)  # the file each repeated key first came in
        counted: dict[tuple[int, int], int] = {}
        flags: dict[int, list[np.ndarray]] = {}  # each file's kept rows in order: whether each repeats
        for file, batch in self._batches:
            at = np.minimum(np.searchsorted(repeated, batch), repeated.size - 1)
            hit = repeated[at] == batch
            repeats = np.zeros(batch.size, bool)
            flags.setdefault(file, []).append(repeats)
            at = at[hit]
            if not at.size:
                continue
            new, where = np.unique(at, return_index=True)
            new_here = first[new] == -1
            first[new[new_here]] = file  # each key's first row here is no repeat; every other row is
            is_repeat = np.ones(at.size, bool)
            is_repeat[where[new_here]] = False
            repeats[np.flatnonzero(hit)[is_repeat]] = True
            of, count = np.unique(first[at[is_repeat]], return_counts=True)
            for earlier, n in zip(of.tolist(), count.tolist(), strict=True):
                counted[file, earlier] = counted.get((file, earlier), 0) + n
        scale = 1 << self._bits
        out = []
        for file, f in sorted(flags.items()):
            copied = copied_rows(np.concatenate(f), scale, self._files[file].adjacent)
            if copied < max(REPEATS_SAID, SHARE_SAID * rows[file]):
                continue
            of = sorted(((n, earlier) for (later, earlier), n in counted.items() if later == file), reverse=True)
            out.append(Repeats(paths[file], tuple(paths[earlier] for _, earlier in of), copied, rows[file], scale))
        return out


def copied_rows(repeats: np.ndarray, scale: int, adjacent: int) -> int:
    """How many of a file's rows repeat others as copies do: in runs of STRETCH_ROWS or more kept rows
    that all repeat (a copied stretch: a log appended to itself, an export overlapping another), scaled
    by the sample, or right after the row they repeat (a copy sorted by time beside its original),
    whichever is more. Repeats by chance (two requests alike in one tick of a coarse clock) come one at
    a time, each among other rows: a log stamped in whole minutes repeats 3.4% of its rows so, in runs
    of eight with a chance of 1e-12."""
    edges = np.diff(np.concatenate([[0], repeats.astype(np.int8), [0]]))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    return max(int(runs[runs >= STRETCH_ROWS].sum()) * scale, adjacent)
