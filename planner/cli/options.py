"""Reusable click options shared by several commands."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import click

from planner.catalog import Catalog, load_catalog
from planner.errors import InputError


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (which compare false with every bound)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class GivenPath(click.Path):
    """click.Path that refuses an empty argument, which it reads as the current folder: `--out-dir ''`
    wrote the report there, and `solve ''` was told '.: cannot read as YAML text'."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (str, bytes)) and not value:
            self.fail("an empty path: give a file or folder name.", param, ctx)
        return super().convert(value, param, ctx)


class PowerOfTwoRange(click.IntRange):
    """click.IntRange of powers of two (tensor-parallel degrees)."""

    name = "power of two"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number < 1 or number & (number - 1):
            self.fail(f"{number} is not a power of two.", param, ctx)
        return number


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def catalog_option(f: Callable) -> Callable:
    return click.option(
        "--catalog",
        "catalog_files",
        multiple=True,
        type=GivenPath(dir_okay=False),
        help="YAML file adding or overriding catalog entries (repeatable).",
    )(f)


def get_catalog(catalog_files: tuple[str, ...]) -> Catalog:
    return load_catalog(*catalog_files)


def dtype_for(catalog: Catalog, name: str, role: str, option: str):
    """Catalog.dtype_for as the option's error (`capacity --kv-dtype int8` read "cannot serve as a int8
    KV cache", naming no choice)."""
    try:
        return catalog.dtype_for(name, role)
    except InputError as exc:
        raise click.BadParameter(exc.message, param_hint=option) from None


def finite(obj: Any) -> Any:
    """`obj` with NaN and infinities as None: JSON has no literal for them (an unbounded
    ceiling, say, prints as null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def echo_json(payload: Any) -> None:
    """Print `payload` as the --json output of a command (non-finite numbers as null)."""
    click.echo(json.dumps(finite(payload), indent=2, sort_keys=False, allow_nan=False))


def warn_traffic(services) -> None:
    """Each (where, inputs)'s traffic warnings on stderr as well as in the report (traffic.Traffic.warnings:
    a log's rows left out, a long silence in a log whose span sets the day's mean rate): a plan made from a small part
    of a log, or priced on a day mostly idle, must not pass unnoticed (--json or --no-report writes no
    report that would say so)."""
    for where, inputs in services:
        for warning in inputs.traffic.warnings:
            click.echo(f"warning: {where}: {warning}", err=True)


def warn(where: str, text: str) -> None:
    """A warning on stderr that the report says too (committed GPUs priced above on demand, a quarter's
    growth that reads as a percentage): --json and --no-report write no report that would say it."""
    if text:
        click.echo(f"warning: {where}: {text}", err=True)
