"""The command line's contract with its user (design.md, "Command line" and "Bad input"), as
checks that the tests of hostile input share.

Exit 0 success, 2 bad input or usage, 3 infeasible; on failure exactly one line starting
'error: ' (after any 'warning:'/'note:' lines), naming the place; never a traceback; and no
output left behind by a failed run.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings

# Derandomized: the same examples on every run, so CI is stable (and a failure reproduces).
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def check_contract(r, *, places: tuple[str, ...] = ()) -> str | None:
    """Assert the contract on a click Result; the error line if the run failed, else None.

    `places`: on failure the error line must contain one of them (a file name, an option).
    """
    assert r.exit_code in (0, 2, 3), (r.exit_code, r.output, repr(r.exception))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    if r.exit_code == 0:
        assert not any(line.startswith("error") for line in r.stderr.splitlines()), r.stderr
        return None
    lines = r.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    assert all(line.startswith(("warning: ", "note: ", "error: ")) for line in lines), r.stderr
    if places:
        assert any(place in errors[0] for place in places), (places, errors[0])
    return errors[0]


def one_line_error(r, code: int, *fragments: str) -> str:
    """The error line of a run that failed with exit `code` as the contract says, containing
    every fragment."""
    assert r.exit_code == code, (r.exit_code, r.output, repr(r.exception))
    line = check_contract(r)
    assert line is not None and len(r.stderr.splitlines()) == 1, r.stderr
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line
