"""Scenario and model-config files written by the tests."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path


def write_scenario(folder: Path, *texts: str, name: str = "s.yaml") -> Path:
    """folder/name holding the texts, each dedented, one after another (a base and its additions)."""
    path = folder / name
    path.write_text("".join(textwrap.dedent(t) for t in texts), encoding="utf-8")
    return path


def config_variant(folder: Path, source: Path, *, nested: bool = False, **changes) -> Path:
    """folder/config.json: the config.json at `source` with keys changed (None removes a key), in
    its text_config when `nested`."""
    cfg = json.loads(source.read_text())
    target = cfg["text_config"] if nested else cfg
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path
