"""The packages import downwards only: adapters -> actors -> projections -> events.

Read from the source with ``ast`` (imports inside functions count too), so a shortcut
upwards fails here rather than in a newcomer's head.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["events", "projections", "actors", "adapters"]
"""Lowest first: a package may import those before it, never those after."""


def imported_packages(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, anywhere in the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_package(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(_package(node.module))
    return found


def _package(module: str) -> str:
    """The layer ``module`` is in: ``tether.actors.session`` is in ``actors``."""
    parts = module.split(".")
    return parts[1] if parts[0] == "tether" and len(parts) > 1 else parts[0]


def test_tether_s_own_imports_are_read_as_their_layer() -> None:
    assert _package("tether.actors.session") == "actors"
    assert _package("tether") == "tether" and _package("msgspec.json") == "msgspec"


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    above = set(LAYERS[LAYERS.index(package) + 1:])
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & above)
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: found for path, found in wrong.items() if found} == {}


def test_tether_is_imported_by_its_one_name() -> None:
    """Every import of Tether's own modules goes through ``tether.``: the folders are not
    top-level packages once installed, so a bare ``actors`` works here only by accident
    (the repository is on the test run's path) and breaks an installed copy."""
    bare: dict[str, list[str]] = {}
    for folder in [*LAYERS, "tests", "bench"]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names]
            names += [node.module for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and node.module and not node.level]
            found = sorted({n for n in names if n.split(".")[0] in LAYERS})
            if found:
                bare[str(path.relative_to(ROOT))] = found
    assert bare == {}
