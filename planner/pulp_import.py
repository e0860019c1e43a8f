"""PuLP, imported after highspy: PuLP imports highspy itself under a bare `except:`, so a Ctrl-C
during that import was taken for a missing package ("solver.backend 'highs' needs the highspy
package", exit 2) instead of ending the run as a Ctrl-C does. Imported here first, a Ctrl-C
raises as anywhere else, and PuLP finds highspy loaded. Every planner module takes PuLP from here."""

from __future__ import annotations

from contextlib import suppress

with suppress(ImportError):  # PuLP's HiGHS backend then says it is missing, by name (planner.ilp_solver)
    import highspy  # noqa: F401
import pulp

__all__ = ["pulp"]
