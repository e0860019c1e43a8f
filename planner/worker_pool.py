"""Work done in worker processes while the plan is computed: report figures, and explorations
that need nothing the rest of the plan computes.

Importing matplotlib (0.33 s) and drawing a report's three figures (0.4 s then, 0.16 s since
figures.py draws less) were a quarter of the 128k rollout's 2.8 s solve, measured in process with
the machine otherwise idle; the TTFT sweep (the plan re-solved at four scaled TTFT targets) is
another 0.5 s that depends on nothing the other explorations compute. So worker processes import matplotlib while the plan is made, run the sweep
while this process runs the other explorations (a fleet's, from its ILP's tie-break on:
fleet_plan._EarlySweeps), and draw the figures side by side when the report
is written; the report writers write the PNG bytes themselves, after every plan is made, as before.

A worker is a Python process running `_serve` on the parent's import path: jobs and answers are
pickled over its stdin and stdout, and a thread per worker reads its answers, so neither side
ever waits on a full pipe. (multiprocessing's fork server would re-import the caller's __main__
in each worker, and a fork of the planner mid-run is unsafe once the solver has threads.) Outside
`worker_processes`, or when a worker cannot start, dies, sends anything but answers or is stuck,
a job runs in this process, with the same answer; a job that fails in a worker runs again here,
so that it raises here the error it raises in process.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import os
import pickle
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any, TypeVar


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container's CPU set narrows)."""
    with suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_Item, _Answer = TypeVar("_Item"), TypeVar("_Answer")


def side_by_side(job: Callable[[_Item], _Answer], items: Iterable[_Item]) -> list[_Answer]:
    """job(item) for each item, in threads of this process (as many as there are usable cores), the
    answers in the items' order: for independent jobs whose work releases the GIL, which then run at
    once. The simulator's loop does (a close call's confirming runs and a missed pool's seeds were run
    one after another while the worker process idled: the certified 128k rollout spent 2.7 s so, with
    one core free), and so does HiGHS's solve (a fleet's shared constraints, each priced by re-solves).
    Interrupted (Ctrl-C), it raises at once, without waiting for the jobs running, since a solve may
    run to its time limit: the `planner` command then ends at once (cli.run leaves by os._exit); a
    program that called it in-process has those jobs finish in the background (Python joins the
    threads at exit)."""
    items = list(items)
    if len(items) < 2:
        return [job(item) for item in items]
    threads = ThreadPoolExecutor(max_workers=min(len(items), usable_cores()))
    try:
        answers = list(threads.map(job, items))
    except BaseException:
        threads.shutdown(wait=False, cancel_futures=True)
        raise
    threads.shutdown()
    return answers


# One worker from the start. A second starts when jobs queue up (a fleet report has three figures
# per service), where a core is left for it beside the planner's own process and the first worker:
# on 2 cores it took the core the planner's own work runs on, and its imports cost more than its
# drawing saved. Measured on 2 cores, fresh processes alternating: the catalog-wide fleet of
# bench/solve.py 20.4 s with a second worker, 18.6 s without; the shipped fleet 14.5 and 14.0 s;
# the 128k rollout 3.03 s either way.
MAX_WORKERS = 2 if usable_cores() >= 3 else 1
QUEUE_FOR_ANOTHER = 3


# A worker alive but stuck (a lock, a stopped process): its jobs run here once it has answered
# nothing for this long while one is awaited (a long queue that keeps being answered is waited for).
JOB_TIMEOUT_S = 120.0
_MAGIC = b"planner-worker\n"  # starts every answer: anything else on the pipe means the worker is lost
# The worker runs the parent's planner whatever its current folder: the parent's import path
# (no '' entry, and -P: the folder is not put first), not PYTHONPATH, which would put a
# site-packages ahead of the standard library.
_SERVE = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from planner.worker_pool import _serve; _serve()"


def worker_command() -> list[str]:
    """The command line of a worker process: this interpreter serving jobs on this process's import path."""
    return [sys.executable, "-P", "-c", _SERVE, json.dumps([p for p in sys.path if p])]


class _Worker:
    """One worker process, its jobs in the order sent, and the thread that reads its answers."""

    def __init__(self):
        self.proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.pending: list[Future] = []
        self.gone = False  # its answers have ended: later jobs run in the caller
        self.answered_at = time.monotonic()  # its last answer (or its start)
        self.lock = threading.Lock()
        # Jobs are written by a thread of their own: a worker still importing reads nothing yet,
        # and a job larger than the pipe's buffer would hold the planner until it does.
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        try:
            threading.Thread(target=self._read, daemon=True).start()
            threading.Thread(target=self._write, daemon=True).start()
        except Exception:
            self.close(kill=True)
            raise

    def submit(self, payload: bytes, *, shared: bool = False) -> Future:
        """Send a pickled (job, kwargs) (from one thread: answers come back in the order jobs were sent).
        shared: a shared_map item or its setup, which most often this process claims first: it
        does not count as queued work (queued work starts another worker)."""
        future: Future = Future()
        future.shared = shared
        with self.lock:  # not held while writing: the reader needs it to hand over an answer
            if self.gone:
                future.set_exception(_WorkerGone())
                return future
            self.pending.append(future)
        self.outbox.put(payload)
        return future

    @property
    def queued(self) -> int:
        """Jobs sent and not answered yet, shared_map's aside."""
        return self.behind[0]

    @property
    def behind(self) -> tuple[int, int]:
        """How far behind a job sent now would be: its queued work, then its shared and claimable
        jobs (which it skips where this process has claimed them, but works through otherwise)."""
        with self.lock:
            return sum(1 for future in self.pending if not future.shared), len(self.pending)

    def _write(self) -> None:
        """Send the jobs in the order submitted; None: no more, close the worker's stdin (it ends)."""
        with suppress(OSError, ValueError):  # the worker is gone: its reader fails what it left
            while (job := self.outbox.get()) is not None:
                self.proc.stdin.write(job)
                self.proc.stdin.flush()
        with suppress(OSError):
            self.proc.stdin.close()

    def _read(self) -> None:
        try:
            while True:
                if self.proc.stdout.read(len(_MAGIC)) != _MAGIC:
                    break  # the end, or a stray line on its stdout
                ok, job, value = pickle.load(self.proc.stdout)
                self.answered_at = time.monotonic()
                with self.lock:
                    future = self.pending.pop(0)
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(_JobFailed(job))
        except BaseException:  # whatever ended the answers (EOF, garbage), the jobs left run here
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
        self.outbox.put(None)
        if kill:
            with suppress(OSError):
                self.proc.kill()
        threading.Thread(target=self.proc.wait, daemon=True).start()


class _WorkerGone(Exception):
    pass


class _JobFailed(Exception):
    """A job raised in the worker; it runs again here, to raise the error it raises in process."""


_workers: list[_Worker] = []
_prestarted: list[_Worker] = []  # started by prestart(), for the next worker_processes block
# Jobs started in this block, by their pickled (job, kwargs): a job started again (a figure drawn
# ahead of its report) shares the first one's answer.
_started: dict[bytes, Callable[[], Any]] = {}
# Claimable jobs started in this block (start_claimable), by their answer's call: the claim that
# makes one this process's now, whether or not its answer is asked for yet (claimed_here).
_claimers: dict[Callable[[], Any], Callable[[], bool]] = {}


def prestart() -> None:
    """Start the worker of the next worker_processes block now, before the command line imports the
    planner: the worker's own imports (the planner and matplotlib, 0.6 s) then overlap those (0.2 s),
    and it takes its first job that much sooner. One the block does not take (the command wants no
    worker) is told to end; one left when the command ends first (a bad file, a usage error) ends at
    the end of its stdin, when this process exits; either ends once its imports are done. (No exit
    hook: Python 3.12 starts no thread at shutdown, and close() starts one to reap the process.)"""
    if _prestarted or _workers or os.environ.get("PLANNER_WORKERS") == "0":
        return
    with suppress(Exception):  # no process can be started: the block starts its own, or none
        _prestarted.append(_Worker())


def _end_prestarted() -> None:
    while _prestarted:
        _prestarted.pop().close(kill=False)


@contextmanager
def worker_processes(enabled: bool = True) -> Iterator[None]:
    """Workers ready for jobs inside the block (started now, or by prestart: their imports overlap
    it). PLANNER_WORKERS=0 in the environment runs every job in this process (the answers are the same)."""
    global _workers
    if not enabled or _workers or os.environ.get("PLANNER_WORKERS") == "0":
        _end_prestarted()
        yield
        return
    try:
        _workers = [_prestarted.pop() if _prestarted else _Worker()]
    except Exception:  # no process or thread can be started here: every job runs in this process
        yield
        return
    ok = False
    try:
        yield
        ok = True
    finally:
        workers, _workers = _workers, []
        _started.clear()
        _claimers.clear()
        _end_claims()
        for worker in workers:
            worker.close(kill=not ok)


def draw(name: str, /, **kwargs) -> Callable[[], bytes]:
    """planner.figures.<name>(**kwargs) started now; call the result for the PNG bytes."""
    return start(f"figures:{name}", **kwargs)


def start(job: str, /, *, here: Callable[[], Any] | None = None, **kwargs) -> Callable[[], Any]:
    """planner.<module>.<function>(**kwargs), `job` naming them as 'module:function', started now
    in a worker; call the result for its answer. The answer must not depend on where it is computed:
    without a worker, the job runs in this process when its answer is asked for, as `here()` when
    given (a quicker way to the same answer, from what this process holds). The same job started
    again in a worker shares the first one's answer."""
    return _start(job, kwargs, here, claimable=False)


def start_claimable(job: str, /, *, here: Callable[[], Any] | None = None, **kwargs) -> Callable[[], Any]:
    """start(), except that when its answer is asked for before the worker has begun it (its
    worker still busy with the jobs queued ahead of it), this process claims it and runs it
    here: a job this process would otherwise wait for while the worker works through its queue
    (or claims it sooner: claimed_here).
    Each is run once, by whichever process claims it first (shared_map's claims). An answer of
    None from the worker is taken as not done there, and computed here."""
    return _start(job, kwargs, here, claimable=True)


def _start(job: str, kwargs: dict, here: Callable[[], Any] | None, *, claimable: bool) -> Callable[[], Any]:
    live = [w for w in _workers if not w.gone]

    def local():
        return here() if here is not None else _run(job, kwargs)

    if not live:
        return local
    payload = pickle.dumps((job, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    if payload in _started:
        return _started[payload]
    claim = _claim_path() if claimable else None
    worker = _least_behind(live)
    if claim is None and worker.queued >= QUEUE_FOR_ANOTHER and len(live) < MAX_WORKERS:
        with suppress(Exception):  # none can start: keep the one there is
            another = _Worker()
            _workers.append(another)
            worker = another
    if claim is None:
        future = worker.submit(payload)
    else:  # not queued work: this process takes it if the worker lags (no other worker starts for it)
        future = worker.submit(_claimed_payload(claim, payload), shared=True)
    answers: list = []  # asked for again (a job started twice): the first answer
    mine: list[bool] = []  # the claim, once made: whether this process runs the job

    def claim_once() -> bool:
        if not mine:
            mine.append(_claim(claim) is not False)  # not begun there (or no claim possible): here
        return mine[0]

    def result():
        if answers:
            return answers[0]
        if claim is not None and claim_once():
            answers.append(local())
            return answers[0]
        try:
            answer = _answer(worker, future, local)
        except (_WorkerGone, _JobFailed):  # killed, out of memory; or failed: here, its own error (a
            answer = local()                 # PlannerError keeps its one-line message and exit code)
        if claim is not None and answer is None:  # the worker could not claim it either
            answer = local()
        answers.append(answer)
        return answer

    _started[payload] = result
    if claim is not None:
        _claimers[result] = claim_once
    return result


def claimed_here(result: Callable[[], Any]) -> bool:
    """Claim a job started by start_claimable for this process now, before its answer is asked for,
    unless the worker has begun it: whether this process runs it (True for a job started with no
    worker; False for one the worker has begun or done, whose answer is then waited for). The worker
    skips a job claimed here and takes the next in its queue, while this process runs this one."""
    claim = _claimers.get(result)
    return True if claim is None else claim()


def _least_behind(live: Sequence[_Worker]) -> _Worker:
    """The worker that would begin a job sent now soonest: a job sent to the one that holds a
    fleet's TTFT sweeps (claimable, not queued work) would wait for all of them while another idles."""
    return min(live, key=lambda w: w.behind)


_claims: list[str] = []  # the block's folder of claims for start_claimable, made when first needed
_claim_ids = itertools.count()


def _claims_prefix() -> str:
    """Claims folders are named for their process, so that a later run can remove those of a
    process that was killed (its `finally` never ran) once that process is gone."""
    return f"planner-claims-{os.getpid()}-"


@functools.cache  # once a process: the temporary folder is scanned by the first block that claims
def _remove_stale_claims() -> None:
    from planner.files import process_alive

    try:
        names = [e.name for e in os.scandir(tempfile.gettempdir()) if e.name.startswith("planner-claims-")]
    except OSError:
        return
    for name in names:
        pid = name.removeprefix("planner-claims-").split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)


def _claim_path() -> str | None:
    """A fresh claim's path in this block's claims folder (None: no folder can be made here)."""
    if not _claims:
        _remove_stale_claims()
        try:
            folder = tempfile.mkdtemp(prefix=_claims_prefix())
            os.mkdir(os.path.join(folder, "claims"))
        except OSError:
            return None
        _claims.append(folder)
    return os.path.join(_claims[0], "claims", str(next(_claim_ids)))


def _end_claims() -> None:
    """Every claim still to come fails (the worker then answers None), and the folder goes."""
    for folder in _claims:
        with suppress(OSError):
            os.rename(os.path.join(folder, "claims"), os.path.join(folder, "over"))
        shutil.rmtree(folder, ignore_errors=True)
    _claims.clear()


def _answer(worker: _Worker, future: Future, local: Callable[[], Any]):
    """The worker's answer to a job, waited for as long as the worker answers anything."""
    while True:
        try:
            return future.result(timeout=JOB_TIMEOUT_S)
        except TimeoutError:
            if time.monotonic() - worker.answered_at < JOB_TIMEOUT_S:
                continue  # still answering the jobs ahead of this one
            worker.close(kill=True)  # alive but stuck: stop it, run it here
            return local()


def shared_map(job: str, items: Sequence[dict], here: Callable[[dict], Any], *,
               setup: tuple[str, dict] | None = None) -> Iterator[Any]:
    """job(**item) for every item, in order: this process works through the items from the front
    while a worker takes them from the back, each item claimed once (by making its folder, which
    only one process can), so the two wait on each other only where they meet. An item the worker
    claimed comes back from it (or, should it fail, is computed here by `here(item)`, the same
    answer); without a worker every item is `here(item)`. setup: a job (name, kwargs) the worker
    runs first, its answer unused: what every item needs, sent once. A job's answer is never None
    (a None from the worker means it did not do the item)."""
    live = [w for w in _workers if not w.gone]
    if not live or len(items) < 2:
        yield from map(here, items)
        return
    worker = _least_behind(live)  # no new worker: its imports would cost more than it shares
    _remove_stale_claims()
    with tempfile.TemporaryDirectory(prefix=_claims_prefix()) as folder:
        claims = os.path.join(folder, "claims")
        os.mkdir(claims)
        try:
            if setup is not None:
                worker.submit(pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL), shared=True)
            yield from _shared(worker, job, items, here, claims)
        finally:  # every claim still to come fails (a folder is removed while a claim may be made in it)
            with suppress(OSError):
                os.rename(claims, os.path.join(folder, "over"))


def _shared(worker: _Worker, job: str, items: Sequence[dict], here: Callable[[dict], Any], claims: str) -> Iterator[Any]:
    answers = {}
    for i in reversed(range(1, len(items))):  # the first item is this process's at once
        answers[i] = worker.submit(_claimed_payload(os.path.join(claims, str(i)), (job, items[i])), shared=True)
    for i, item in enumerate(items):
        if i == 0 or _claim(os.path.join(claims, str(i))) is not False:  # mine, or no claim could be made
            yield here(item)
            continue
        try:
            answer = _answer(worker, answers[i], lambda item=item: here(item))
        except (_WorkerGone, _JobFailed):
            answer = None
        yield here(item) if answer is None else answer  # None: the worker could not claim it either


def _claim(path: str) -> bool | None:
    """True: claimed here; False: the other process claimed it (or the claims are over, the folder
    gone); None: no claim could be made (a full disk, say), so it counts as nobody's."""
    try:
        os.mkdir(path)
    except (FileExistsError, FileNotFoundError):
        return False
    except OSError:
        return None
    return True


def _claimed_payload(claim: str, job: bytes | tuple[str, dict]) -> bytes:
    """The message that has a worker run `job` ((name, kwargs), or those pickled) only if it makes
    the claim first: shared_map's items and start_claimable's jobs."""
    if not isinstance(job, bytes):
        job = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps(("worker_pool:_claimed", {"claim": claim, "payload": job}), protocol=pickle.HIGHEST_PROTOCOL)


def _claimed(claim: str, payload: bytes):
    """A worker's side of a claimed job: its answer, or None when this process claimed it first
    (the job's arguments, pickled once for both, are unpickled only when the worker runs it)."""
    return _run(*pickle.loads(payload)) if _claim(claim) is True else None


def _run(job: str, kwargs: dict):
    module, function = job.split(":")
    return getattr(importlib.import_module(f"planner.{module}"), function)(**kwargs)


def _artists_without_set_signatures() -> None:
    """matplotlib, as each of its ~100 Artist classes is defined, builds that class's `set` method a
    signature and a docstring listing every property, by inspecting each setter's docstring
    (Artist.__init_subclass__, which calls Artist._update_set_signature_and_docstring), for help
    text that no one reads in a worker drawing PNGs. Importing planner.figures took 0.26 s with that
    step and 0.20 s without it (matplotlib 3.11, fresh processes); the 128k rollout's solve, whose
    last second the worker's jobs set, 1.077 s and 1.048 s (medians of 12 alternating fresh runs).
    In this worker's process only, that step does nothing: `set` keeps working (each subclass's
    calls Artist.set), without its per-class help. A matplotlib without that method is left as it is.

    Figures drawn so are byte for byte those drawn in a process without it
    (tests/test_worker_pool.py::test_worker_figures_are_the_bytes_drawn_in_process)."""
    import matplotlib.artist

    if callable(getattr(matplotlib.artist.Artist, "_update_set_signature_and_docstring", None)):
        matplotlib.artist.Artist._update_set_signature_and_docstring = classmethod(lambda cls: None)


def _serve() -> None:
    """The worker: matplotlib first (figures are most of its jobs), then each job read from stdin
    answered on stdout."""
    # Answers get their own copy of stdout; anything a library prints goes to stderr instead.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    # The slow imports, before the first job arrives: matplotlib, and what the planner's jobs
    # are made of (unpickling a job imports it otherwise, while the planner waits).
    from planner.startup import begin_imports, end_imports, reuse_array_memory

    reuse_array_memory()  # the allocator's settings are each process's own (the planner's are set in planner.entry)
    begin_imports()
    _artists_without_set_signatures()
    import planner.exploration
    import planner.figures  # noqa: F401

    end_imports()

    jobs = sys.stdin.buffer
    while True:
        try:
            job, kwargs = pickle.load(jobs)
        except EOFError:
            return
        try:
            answer = (True, job, _run(job, kwargs))
        except Exception:  # the planner runs the job again, to raise the error itself
            answer = (False, job, None)
        answers.write(_MAGIC)
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
