"""Requests counted twice: rows of timed logs that copy other rows' arrival instant and token counts
exactly, a file's requests of a tick of the clock copied whole.

A log exported twice into one file, or two exports that overlap (a day's file and a week's that
holds it, two daily exports cut at different hours), hold the same requests twice: every file's
contents differ, so the checks on paths, links and contents (planner.workload.ingest) pass, and
every rate read from them counts those requests twice. The peak is then twice what was served
wherever the repeated stretch holds the busiest minute, and the plan buys for it.

Two distinct requests can be alike too: the same token counts in the same tick of the log's clock.
A fine clock all but never does so (Azure's 2023 conversation and code traces, stamped to 0.1 µs: no
repeat in 28,185 rows; Mooncake's conversation trace: 1 in 12,031), a coarse one often does (the Azure
trace stamped in whole minutes: 3.4% of its rows repeat another, each a distinct request). What tells
a copy is that it copies a file's requests of a tick whole: by itself (a log exported twice) or by
another file (overlapping exports; the other file's part of the tick may hold more requests, a log
given beside one that holds it). Requests alike by chance leave the other requests of their tick
single (a minute of 333 requests is not all pairs), and a chance pair inside a copied tick is two
requests, not one and its copy (copied_rows): whatever the order of the rows or of the files, and
however the copy was sorted. A copy that covers a tick partly (at its first and last tick) is not
counted there; a load test's identical requests sent in one tick are, and the warning says to keep
them if they are distinct.

Instants are compared in whole microseconds, however each file states them (datetime text, a
Parquet timestamp of any unit, epoch numbers integer or fractional): the same request exported by
two tools is the same instant, unless one rounded it to coarser units (milliseconds beside
microseconds: other instants). Each row's key is a 64-bit hash of its instant and token counts
(splitmix64's finaliser, Steele, Lea & Flood, OOPSLA 2014), which two different rows share with
probability 2^-64. Memory stays bounded: past KEYS_KEPT rows only the ticks whose instant's hash has
its low bits zero are kept, one more bit at a time, so a tick is kept whole or not at all, and the
repeats counted in the kept ticks, scaled, estimate the whole's (as a distinct-sampling sketch does:
Gibbons, VLDB 2001); below that many rows every row is kept and the count is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEYS_KEPT = 1 << 19  # rows held (18 bytes each, about twice that while sorted at the end): exact up to 524,288 rows
# Said where the repeats are at least this share of the rows of the files they fall in, and at least
# REPEATS_SAID rows: a fine clock's chance repeats (Mooncake's 1 in 12,031) are not.
SHARE_SAID = 0.001
REPEATS_SAID = 20
US_PER_MINUTE = 60_000_000
_INT64_SAFE = float(2**62)  # within int64, and as a float exactly: 146,000 years of microseconds


def instants_us(values: np.ndarray, per_minute: int) -> np.ndarray:
    """Arrival times read in units of 1/per_minute of a minute (int64 ticks or float64 seconds), as
    whole microseconds (rounded half to even): one instant, however a file states it."""
    if values.dtype.kind == "f":
        # Clipped into int64 first: a time past it (1e22 ms, years past 2200, which the log's reading refuses
        # with its own one line) cast with a numpy RuntimeWarning printed before that line.
        return np.clip(np.rint(values * (US_PER_MINUTE / per_minute)), -_INT64_SAFE, _INT64_SAFE).astype(np.int64)
    values = values.astype(np.int64, copy=False)
    if per_minute <= US_PER_MINUTE:
        return values * (US_PER_MINUTE // per_minute)
    step = per_minute // US_PER_MINUTE  # nanoseconds: 1,000 to a microsecond
    quotient, rest = np.divmod(values, step)
    return quotient + ((2 * rest > step) | ((2 * rest == step) & (quotient % 2 == 1)))


def row_keys(instants: np.ndarray, prompt: np.ndarray, output: np.ndarray,
             sample_bits: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """cell_kernel.row_keys (compiled: the ingestion loop's module) on a batch: the rows kept by a
    sample of ticks (those whose instant's hash has its lowest `sample_bits` bits zero), as (instants,
    keys), each key a hash of the instant and the token counts."""
    from planner.workload import cell_kernel  # numba loads only when a log is read

    kept_instants, kept_keys = np.empty(instants.size, np.int64), np.empty(instants.size, np.uint64)
    kept = cell_kernel.row_keys(np.ascontiguousarray(instants, np.int64), np.ascontiguousarray(prompt, np.int64),
                                np.ascontiguousarray(output, np.int64), np.uint64((1 << sample_bits) - 1),
                                kept_instants, kept_keys)
    # copies: a slice of the batch-sized arrays would hold the whole batch's memory
    return (kept_instants, kept_keys) if kept == instants.size else (kept_instants[:kept].copy(), kept_keys[:kept].copy())


@dataclass(frozen=True)
class Repeats:
    """Rows of one file that repeat rows read before them (in it or in earlier files, `of`, most
    first) copying whole ticks (copied_rows): rows, their count (estimated where `sampled` > 1)."""

    path: str
    of: tuple[str, ...]
    rows: int
    file_rows: int
    sampled: int = 1  # the share of ticks kept is 1 / sampled

    def text(self) -> str:
        share = min(self.rows / max(self.file_rows, 1), 1.0)
        count = (f"about {self.rows:,} rows ({share:.1%}, estimated from the 1 in {self.sampled:,} of instants a "
                 "log this long keeps)") if self.sampled > 1 else f"{self.rows:,} rows ({share:.1%})"
        where = " and ".join("another of its rows" if of == self.path else f"rows of {of}" for of in self.of)
        how = ("a log exported or appended twice" if self.of == (self.path,)
               else "exports that overlap (or a log given beside one that holds it)")
        return (f"{self.path}: {count} repeat {where} exactly (arrival instant and token counts), each tick of the "
                f"clock copied whole, as copies are: {how} {'counts' if self.of == (self.path,) else 'count'} "
                "those requests twice, "
                "and every rate here, the peak's with them; if they are not distinct requests, remove the repeats "
                "(SELECT DISTINCT) and plan again")


class RepeatCounter:
    """The instants and keys of the timed rows read so far, batch by batch, with the file each
    batch came in (files numbered as read)."""

    def __init__(self, keys_kept: int = KEYS_KEPT):
        self._batches: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._held = 0
        self._bits = 0  # ticks kept: those whose instant's hash has its lowest _bits bits zero
        self._keys_kept = keys_kept

    def add(self, file: int, instants: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
        """A batch of a file's usable timed rows: their instants (instants_us) and token counts."""
        if not instants.size:
            return
        kept_instants, keys = row_keys(instants, prompt, output, self._bits)
        if not keys.size:
            return
        self._batches.append((file, kept_instants, keys))
        self._held += keys.size
        while self._held > self._keys_kept and self._bits < 62:  # (a tick is never split: one may stay)
            self._bits += 1
            self._batches = [(f, t[m], k[m]) for f, t, k in self._batches
                             if (m := _in_sample(t, self._bits)).any()]
            self._held = sum(k.size for _, _, k in self._batches)

    def repeats(self, paths: list[str], rows: list[int]) -> list[Repeats]:
        """Each file with rows that copy rows read before them (in it or in earlier files: copied_rows),
        at least REPEATS_SAID and SHARE_SAID of its rows; paths and rows: each file's name and the rows
        it had (by file number)."""
        if not self._batches:
            return []
        keys = np.concatenate([k for _, _, k in self._batches])
        ordered = np.sort(keys)  # most logs repeat no row: one sort says so, and the rest is not done
        if not (ordered[1:] == ordered[:-1]).any():
            return []
        del ordered
        instants = np.concatenate([t for _, t, _ in self._batches])
        files = np.concatenate([np.full(k.size, f, np.int32) for f, _, k in self._batches])
        order = np.argsort(keys, kind="stable")  # a key's rows in the order read: its first is no repeat
        keys, instants, files = keys[order], instants[order], files[order]
        del order
        repeat = copied_rows(keys, instants, files)
        if not repeat.any():
            return []
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])  # each key's first row, read first
        of = files[first[np.searchsorted(first, np.flatnonzero(repeat), side="right") - 1]]
        scale = 1 << self._bits
        out = []
        for file in np.unique(files[repeat]).tolist():
            mine = files[repeat] == file
            count = int(mine.sum()) * scale
            if count < max(REPEATS_SAID, SHARE_SAID * rows[file]):
                continue
            earlier, n = np.unique(of[mine], return_counts=True)
            named = tuple(paths[e] for _, e in sorted(zip((-n).tolist(), earlier.tolist(), strict=True)))
            out.append(Repeats(paths[file], named, min(count, rows[file]), rows[file], scale))
        return out


def _in_sample(instants: np.ndarray, bits: int) -> np.ndarray:
    """Whether each row's tick is in the sample of `bits` (row_keys' rule, for the rows kept before)."""
    from planner.workload import cell_kernel

    return (cell_kernel.instant_hashes(np.ascontiguousarray(instants, np.int64)) & np.uint64((1 << bits) - 1)) == 0


def copied_rows(keys: np.ndarray, instants: np.ndarray, files: np.ndarray) -> np.ndarray:
    """For rows sorted by key (a key's rows in the order read), whether each is a copy of rows read
    before it.

    A key is copied where a file's rows in its tick all come twice or more (that file's part of the
    tick copied whole: by itself, a log exported twice; by another file, exports that overlap, the
    other file's part may hold more requests, a log given beside one that holds it). In a tick copied
    m times over (m: the fewest times any copied key of the tick comes), a copied key that comes c
    times is ceil(c / m) requests, the first read, and the rest are their copies: two requests alike
    by chance in a tick copied once are four rows, two of them copies. Requests alike by chance in a
    tick no file copies whole leave others of their tick single, and are no copies."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.diff(np.r_[starts, keys.size])
    row_count = np.repeat(counts, counts)
    # each (tick, file) part: copied whole where every one of its rows' keys comes twice or more
    _, part = np.unique(np.stack([instants, files.astype(np.int64)]), axis=1, return_inverse=True)
    part = part.ravel()
    part_single = np.bincount(part, row_count == 1)
    copied_key = np.maximum.reduceat(part_single[part] == 0, starts)
    # m, per tick: the fewest times a copied key of the tick comes
    tick_of_key = instants[starts]
    ticks, tick_index = np.unique(tick_of_key, return_inverse=True)
    times_copied = np.full(ticks.size, np.iinfo(np.int64).max)
    np.minimum.at(times_copied, tick_index[copied_key], counts[copied_key])
    originals = -(-counts // np.maximum(times_copied[tick_index], 1))  # ceil(c / m)
    position = np.arange(keys.size) - np.repeat(starts, counts)
    return np.repeat(copied_key, counts) & (position >= np.repeat(originals, counts))
