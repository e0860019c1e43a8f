"""Figures drawn by worker processes (planner.figure_pool): the same bytes as drawn here, many at
once without a stall, a worker's failure raised here, a dead worker's figures drawn here."""

from __future__ import annotations

import pytest

from planner import figure_pool
from planner.figure_pool import draw, drawing_ahead


def _rows(i: int) -> dict:
    return {"rows": [(f"option {j}", 10.0 + i + j) for j in range(12)], "title": f"figure {i}"}


def test_worker_figures_are_the_bytes_drawn_in_process():
    here = draw("cost_figure", **_rows(0))()
    with drawing_ahead():
        assert figure_pool._workers  # the figure below is a worker's
        there = draw("cost_figure", **_rows(0))()
    assert there == here and there.startswith(b"\x89PNG")


def test_many_figures_sent_before_any_is_read_all_come_back():
    # Two dozen answers of ~30 kB each overflow any pipe buffer: the writer must never wait on a
    # worker that waits on its own answers (a fleet report sends three figures per service).
    with drawing_ahead():
        started = [draw("cost_figure", **_rows(i)) for i in range(24)]
        assert len(figure_pool._workers) == figure_pool.MAX_WORKERS  # a queue that long gets a second
        pngs = [result() for result in started]
    assert pngs == [draw("cost_figure", **_rows(i))() for i in range(24)]


def test_a_figure_that_fails_in_a_worker_raises_here_with_its_traceback():
    with drawing_ahead(), pytest.raises(RuntimeError, match="drawing a figure failed in a worker") as err:
        draw("cost_figure", rows=[("a", 1.0)])()  # no title
    assert "TypeError" in str(err.value) and "title" in str(err.value)


def test_a_dead_workers_figures_are_drawn_here():
    with drawing_ahead():
        for worker in figure_pool._workers:
            worker.proc.kill()
            worker.proc.wait()
        png = draw("cost_figure", **_rows(1))()
    assert png == draw("cost_figure", **_rows(1))()


def test_the_block_leaves_no_worker_and_an_error_in_it_kills_them():
    procs = []

    def plan_that_fails():
        with drawing_ahead():
            procs.extend(w.proc for w in figure_pool._workers)
            raise ValueError("planning failed")

    with pytest.raises(ValueError, match="planning failed"):
        plan_that_fails()
    assert procs and not figure_pool._workers
    for proc in procs:
        assert proc.wait(timeout=30) is not None


def test_a_worker_that_prints_before_its_answers_is_dropped_not_waited_on(monkeypatch):
    # A sitecustomize or .pth hook that prints on stdout must not leave the planner waiting.
    monkeypatch.setattr(figure_pool, "_SERVE", "print('cuda ready', flush=True); " + figure_pool._SERVE)
    with drawing_ahead():
        png = draw("cost_figure", **_rows(2))()
        assert all(w.gone for w in figure_pool._workers)
    assert png == draw("cost_figure", **_rows(2))()


def test_the_worker_runs_this_planner_whatever_the_current_folder(tmp_path, monkeypatch):
    # A folder holding another `planner` package must not change what the worker imports.
    fake = tmp_path / "planner"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the wrong planner')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with drawing_ahead():
        png = draw("cost_figure", **_rows(3))()
        assert not any(w.gone for w in figure_pool._workers)  # answered by the worker, not drawn here
    assert png == draw("cost_figure", **_rows(3))()
