"""What a database URL names: the SQLite file, or eventsourcing's ``POSTGRES_*``
settings for a PostgreSQL URL."""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from tether.adapters.config.render import (
    mask_url,
)
from tether.adapters.config.settings import (
    ConfigError,
)

# URL query parameters of database_url -> eventsourcing's POSTGRES_* keys.
_PG_QUERY_KEYS: Final[dict[str, str]] = {
    "schema": "POSTGRES_SCHEMA",
    "connect_timeout": "POSTGRES_CONNECT_TIMEOUT",
    "pool_size": "POSTGRES_POOL_SIZE",
    "max_overflow": "POSTGRES_MAX_OVERFLOW",
    "max_waiting": "POSTGRES_MAX_WAITING",
    "conn_max_age": "POSTGRES_CONN_MAX_AGE",
    "pre_ping": "POSTGRES_PRE_PING",
    "lock_timeout": "POSTGRES_LOCK_TIMEOUT",
    "idle_in_transaction_session_timeout": "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
}


def sqlite_path(database_url: str) -> str:
    """Return the file of a ``sqlite:///abs/path`` or ``sqlite:relative/path`` URL.

    Raises :class:`ConfigError` for any other URL or one with no path.
    """
    if not database_url.startswith("sqlite:"):
        raise ConfigError(f"not a sqlite: URL: {mask_url(database_url)!r}")
    rest = database_url[len("sqlite:") :]
    if rest.startswith("//"):
        rest = rest[2:]  # sqlite:///abs -> /abs ; sqlite://rel -> rel
    path = unquote(rest.split("?", 1)[0])
    if not path:
        raise ConfigError("sqlite URL names no file: expected sqlite:///path/to/file.db")
    return os.path.expanduser(path)


def postgres_env(database_url: str) -> dict[str, str]:
    """Map ``postgresql://user:pass@host:port/dbname?schema=s`` to eventsourcing's settings.

    Returns ``PERSISTENCE_MODULE`` plus ``POSTGRES_DBNAME``, ``_HOST`` (default localhost),
    ``_PORT`` (default 5432), ``_USER``, ``_PASSWORD`` (may be empty) and, when given as query
    parameters, ``POSTGRES_SCHEMA`` and the pool options (``pool_size``, ``connect_timeout``,
    ...). Raises :class:`ConfigError` for a URL it cannot map.
    """
    parts = urlsplit(database_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"expected a postgresql:// URL, got {mask_url(database_url)!r}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"bad port in {mask_url(database_url)!r}") from None
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname or "/" in dbname:
        raise ConfigError(f"no database name in {mask_url(database_url)!r}")
    if not parts.username:
        raise ConfigError(f"no user name in {mask_url(database_url)!r}")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": unquote(parts.hostname or "localhost"),
        "POSTGRES_PORT": str(port or 5432),
        "POSTGRES_USER": unquote(parts.username),
        "POSTGRES_PASSWORD": unquote(parts.password or ""),
    }
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _PG_QUERY_KEYS:
            known = ", ".join(_PG_QUERY_KEYS)
            raise ConfigError(f"unknown database_url parameter {name!r}; known: {known}")
        env[_PG_QUERY_KEYS[name]] = value
    return env
