"""Reusable click options shared by several commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from planner.catalog import Catalog, load_catalog


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def catalog_option(f: Callable) -> Callable:
    return click.option(
        "--catalog",
        "catalog_files",
        multiple=True,
        type=click.Path(dir_okay=False),
        help="YAML file adding or overriding catalog entries (repeatable).",
    )(f)


def get_catalog(catalog_files: tuple[str, ...]) -> Catalog:
    return load_catalog(*catalog_files)


def echo_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=False, allow_nan=False))
