"""Fixtures the actor unit tests share."""

from __future__ import annotations

import pytest

from tether.actors.model.redact_scan import load_hyperscan

REDACT_ENGINES = [
    "re",
    pytest.param("hyperscan", marks=pytest.mark.skipif(
        load_hyperscan() is None, reason="hyperscan is not installed")),
]
"""The redactor's two engines: hyperscan (locator) and re (fallback) must agree."""


@pytest.fixture(params=REDACT_ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each redactor engine in turn (this folder's ``engine``; the integration tests'
    ``engine`` is a whole host)."""
    return str(request.param)
