"""The effective settings as ``tether config`` prints them, secrets masked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from tether.adapters.config.settings import (
    FIELDS,
    NATS_SCHEMES,
    SECRET_FIELDS,
    URL_FIELDS,
    McpSettings,
    Settings,
)


def mask_secret(value: str) -> str:
    """Show at most the first four characters of a secret: ``sk-a…(masked)``; '' stays ''."""
    if not value:
        return ""
    if len(value) < 12:
        return "…(masked)"
    return f"{value[:4]}…(masked)"


def mask_url(url: str) -> str:
    """Replace any password in a URL (or comma-separated URLs) with ``***``.

    A ``nats://`` URL with a user but no password carries a token, so the user is masked too.
    """
    return ",".join(_mask_one_url(part) for part in url.split(","))


def _mask_one_url(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, has_password, _ = userinfo.partition(":")
    if has_password:
        userinfo = f"{user}:***"
    elif parts.scheme in NATS_SCHEMES:
        userinfo = "***"
    return parts._replace(netloc=f"{userinfo}@{hostport}").geturl()


def describe_mcp(mcp: McpSettings) -> str:
    """The ``[mcp]`` table in one line, every environment and header value masked."""
    if not mcp.servers:
        return "(no servers)"
    shown = []
    for name, server in mcp.servers.items():
        if server.command:
            where = " ".join([server.command, *server.args])
            extra = [f"{k}={mask_secret(v) or '…(masked)'}" for k, v in server.env.items()]
        else:
            where = mask_url(server.url)
            extra = [f"{k}: {mask_secret(v) or '…(masked)'}" for k, v in server.headers.items()]
        details = "; ".join([f"{server.transport} {where}", f"trust {server.trust}", *extra])
        shown.append(f"{name} ({details})")
    timeouts = f"call_timeout={mcp.call_timeout:g}, connect_timeout={mcp.connect_timeout:g}"
    return f"{', '.join(shown)}; {timeouts}"


def _display(key: str, value: Any) -> str:
    if key == "mcp" and isinstance(value, McpSettings):
        return describe_mcp(value)
    if key in SECRET_FIELDS:
        return mask_secret(str(value))
    if key in URL_FIELDS:
        return mask_url(str(value))
    if key == "deny_commands" and value is None:
        return "(gatekeeper defaults)"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) if value else "(none)"
    if isinstance(value, msgspec.Struct):
        return ", ".join(f"{k}={v}" for k, v in msgspec.structs.asdict(value).items())
    return str(value)


def describe(
    settings: Settings, sources: Mapping[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """Return ``(key, shown value, source)`` for every setting, secrets masked.

    A key missing from ``sources`` is reported as ``"default"``.
    """
    sources = sources or {}
    return [
        (name, _display(name, getattr(settings, name)), sources.get(name, "default"))
        for name in FIELDS
    ]


def render_settings(settings: Settings, sources: Mapping[str, str] | None = None) -> str:
    """Render every effective setting, one per line, as ``key  value  (source)``, secrets masked.

    Empty values are shown as ``""``.
    """
    rows = [
        (key, value if value else '""', source)
        for key, value, source in describe(settings, sources)
    ]
    key_width = max(len(row[0]) for row in rows)
    value_width = min(max(len(row[1]) for row in rows), 60)
    return "\n".join(
        f"{key:<{key_width}}  {value:<{value_width}}  ({source})" for key, value, source in rows
    )
