"""Report figures drawn in worker processes while the plan is computed.

Importing matplotlib and drawing a report's figures take about as long as planning a small
scenario (bench/solve.py: over a second of the 128k rollout's 2.9 s, in a process that planned
for 1.7 s). Figures depend on nothing the planner computes in between, so worker processes import
matplotlib while the plan is made and draw the figures side by side when the report is written;
the report writers write the PNG bytes themselves, after every plan is made, as before.

A worker is `python -m planner.figure_pool`: jobs and answers are pickled over its stdin and
stdout, and a thread per worker reads its answers, so neither side ever waits on a full pipe.
(multiprocessing's fork server would re-import the caller's __main__ in each worker, and a fork of
the planner mid-run is unsafe once the solver has threads.) Outside `drawing_ahead`, or when a
worker cannot start or dies, figures are drawn in this process.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from pathlib import Path

# One worker from the start: a second one's imports slow the planner more than its drawing saves
# (2 cores). A second starts when jobs queue up (a fleet report has three figures per service).
MAX_WORKERS = 2
QUEUE_FOR_ANOTHER = 3


class _Worker:
    """One worker process, its jobs in the order sent, and the thread that reads its answers."""

    def __init__(self):
        package_root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])])
        self.proc = subprocess.Popen([sys.executable, "-m", "planner.figure_pool"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONPATH": path})
        self.pending: list[Future] = []
        self.gone = False  # its answers have ended: later jobs are drawn by the caller
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def submit(self, name: str, kwargs: dict) -> Future:
        """Send a job (from one thread: answers come back in the order jobs were sent)."""
        future: Future = Future()
        with self.lock:  # not held while writing: the reader needs it to hand over an answer
            if self.gone:
                future.set_exception(_WorkerGone())
                return future
            self.pending.append(future)
        with suppress(OSError, ValueError):  # the worker is gone: its reader fails what it left
            pickle.dump((name, kwargs), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        return future

    def _read(self) -> None:
        while True:
            try:
                ok, value = pickle.load(self.proc.stdout)
            except (EOFError, OSError, ValueError, pickle.UnpicklingError):
                break
            with self.lock:
                future = self.pending.pop(0)
            if ok:
                future.set_result(value)
            else:
                future.set_exception(RuntimeError(f"drawing a figure failed in a worker:\n{value}"))
        with suppress(OSError):
            self.proc.stdout.close()
        with self.lock:
            self.gone = True
            for future in self.pending:
                future.set_exception(_WorkerGone())
            self.pending.clear()

    def close(self, *, kill: bool) -> None:
        """Tell the worker to end (it does when its stdin closes), or kill it; it is reaped by a
        thread, since the planner need not wait for matplotlib to tear down."""
        with suppress(OSError):
            self.proc.stdin.close()
        if kill:
            self.proc.kill()
        threading.Thread(target=self.proc.wait, daemon=True).start()


class _WorkerGone(Exception):
    pass


_workers: list[_Worker] = []


@contextmanager
def drawing_ahead(enabled: bool = True) -> Iterator[None]:
    """Workers ready to draw figures inside the block (started now: their imports overlap it)."""
    global _workers
    if not enabled or _workers:
        yield
        return
    try:
        _workers = [_Worker()]
    except OSError:  # no process can be started here: draw in this process
        yield
        return
    ok = False
    try:
        yield
        ok = True
    finally:
        workers, _workers = _workers, []
        for worker in workers:
            worker.close(kill=not ok)


def draw(name: str, /, **kwargs) -> Callable[[], bytes]:
    """planner.figures.<name>(**kwargs) started now; call the result for the PNG bytes."""
    if not _workers:
        return lambda: _draw(name, kwargs)
    worker = min(_workers, key=lambda w: len(w.pending))
    if len(worker.pending) >= QUEUE_FOR_ANOTHER and len(_workers) < MAX_WORKERS:
        with suppress(OSError):
            worker = _Worker()
            _workers.append(worker)
    future = worker.submit(name, kwargs)

    def result() -> bytes:
        try:
            return future.result()
        except _WorkerGone:  # killed, out of memory: draw it here
            return _draw(name, kwargs)

    return result


def _draw(name: str, kwargs: dict) -> bytes:
    from planner import figures

    return getattr(figures, name)(**kwargs)


def _serve() -> None:
    """The worker: matplotlib first, then each job read from stdin answered on stdout."""
    # Answers get their own copy of stdout; anything a library prints goes to stderr instead.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import planner.figures  # noqa: F401  (the slow import, before the first job arrives)

    jobs = sys.stdin.buffer
    while True:
        try:
            name, kwargs = pickle.load(jobs)
        except EOFError:
            return
        try:
            answer = (True, _draw(name, kwargs))
        except Exception:  # the planner raises it, with the worker's traceback
            answer = (False, traceback.format_exc())
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    _serve()
