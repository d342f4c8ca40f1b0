"""What the event-store tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tether.adapters.config import Settings
from tether.adapters.store import open_application
from tether.events.application import TetherApplication


@pytest.fixture
def app(database_url: str, make_settings: Callable[..., Settings]) -> Iterator[TetherApplication]:
    """The application on each store of the suite (SQLite, then PostgreSQL)."""
    application = open_application(make_settings(database_url=database_url))
    try:
        yield application
    finally:
        application.close()
