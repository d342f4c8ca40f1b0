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
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    above = set(LAYERS[LAYERS.index(package) + 1:])
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & above)
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: found for path, found in wrong.items() if found} == {}
