"""Report figures drawn in worker processes while the plan is computed.

Importing matplotlib (0.33 s) and drawing a report's three figures (0.4 s) were a quarter of the
128k rollout's 2.8 s solve, measured in process with the machine otherwise idle. Figures depend on nothing the planner computes in between, so worker processes import
matplotlib while the plan is made and draw the figures side by side when the report is written;
the report writers write the PNG bytes themselves, after every plan is made, as before.

A worker is a Python process running `_serve` on the parent's import path: jobs and answers are
pickled over its stdin and stdout, and a thread per worker reads its answers, so neither side
ever waits on a full pipe. (multiprocessing's fork server would re-import the caller's __main__
in each worker, and a fork of the planner mid-run is unsafe once the solver has threads.) Outside
`drawing_ahead`, or when a worker cannot start, dies, sends anything but answers or is stuck,
figures are drawn in this process.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress

# One worker from the start: a second one's imports slow the planner more than its drawing saves
# (2 cores). A second starts when jobs queue up (a fleet report has three figures per service).
MAX_WORKERS = 2
QUEUE_FOR_ANOTHER = 3


FIGURE_TIMEOUT_S = 120.0  # a worker alive but stuck (a lock, a stopped process): drawn here after this
_MAGIC = b"planner-figure\n"  # starts every answer: anything else on the pipe means the worker is lost
# The worker runs the parent's planner whatever its current folder: the parent's import path
# (no '' entry, and -P: the folder is not put first), not PYTHONPATH, which would put a
# site-packages ahead of the standard library.
_SERVE = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from planner.figure_pool import _serve; _serve()"


class _Worker:
    """One worker process, its jobs in the order sent, and the thread that reads its answers."""

    def __init__(self):
        paths = [p for p in sys.path if p]
        self.proc = subprocess.Popen([sys.executable, "-P", "-c", _SERVE, json.dumps(paths)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.pending: list[Future] = []
        self.gone = False  # its answers have ended: later jobs are drawn by the caller
        self.lock = threading.Lock()
        try:
            threading.Thread(target=self._read, daemon=True).start()
        except Exception:
            self.close(kill=True)
            raise

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
        try:
            while True:
                if self.proc.stdout.read(len(_MAGIC)) != _MAGIC:
                    break  # the end, or a stray line on its stdout
                ok, value = pickle.load(self.proc.stdout)
                with self.lock:
                    future = self.pending.pop(0)
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(RuntimeError(f"drawing a figure failed in a worker:\n{value}"))
        except BaseException:  # whatever ended the answers (EOF, garbage), the jobs left are drawn here
            pass
        finally:
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
            with suppress(OSError):
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
    except Exception:  # no process or thread can be started here: draw in this process
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
    live = [w for w in _workers if not w.gone]
    if not live:
        return lambda: _draw(name, kwargs)
    worker = min(live, key=lambda w: len(w.pending))
    if len(worker.pending) >= QUEUE_FOR_ANOTHER and len(live) < MAX_WORKERS:
        with suppress(Exception):  # none can start: keep the one there is
            another = _Worker()
            _workers.append(another)
            worker = another
    future = worker.submit(name, kwargs)

    def result() -> bytes:
        try:
            return future.result(timeout=FIGURE_TIMEOUT_S)
        except TimeoutError:  # alive but stuck: stop it, draw here
            worker.close(kill=True)
            return _draw(name, kwargs)
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
        answers.write(_MAGIC)
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
