"""Loading the settings: ``tether.toml``, then the environment; every value checked, and
every problem a :class:`ConfigError` naming the key and where its value came from."""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgspec

from tether.actors.ttsr.policy import TtsrSettings
from tether.adapters.config.render import (
    mask_url,
)
from tether.adapters.config.settings import (
    ENV_VARS,
    FIELDS,
    MCP_SERVER_NAME,
    MCP_SERVER_NAME_MAX,
    NATS_AUTH_FILES,
    NATS_SCHEMES,
    PATH_FIELDS,
    SECRET_FIELDS,
    ConfigError,
    McpServer,
    McpSettings,
    Settings,
    default_state_dir,
)
from tether.adapters.config.stores import (
    postgres_env,
    sqlite_path,
)


@dataclass(frozen=True)
class LoadedSettings:
    """Loaded settings plus, for every field, where its value came from."""

    settings: Settings
    sources: Mapping[str, str] = field(default_factory=dict)


def load_settings(
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
    cwd: str | None = None,
) -> Settings:
    """Load settings from ``tether.toml`` and the environment (``os.environ`` when None).

    The file is ``config_path``, else ``$TETHER_CONFIG``, else ``<cwd>/tether.toml`` if it
    exists; environment variables (see :data:`ENV_VARS`) override it. Raises
    :class:`ConfigError` naming the key and its source on any bad value.
    """
    return load_settings_with_sources(env, config_path, cwd).settings


def load_settings_with_sources(
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
    cwd: str | None = None,
) -> LoadedSettings:
    """Like :func:`load_settings`, and also report each field's source (see module doc)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    base_dir = os.path.abspath(cwd if cwd is not None else os.getcwd())
    values: dict[str, Any] = {}
    sources: dict[str, str] = {name: "default" for name in FIELDS}

    path, label = _find_config_file(environ, config_path, base_dir)
    if path is not None:
        file_dir = os.path.dirname(os.path.abspath(path))
        for key, value in _read_toml(path, label).items():
            converted = _convert(key, value, f"{label}: {key}", strict=True)
            values[key] = _absolute(key, converted, file_dir)
            sources[key] = label

    for var, key in ENV_VARS.items():
        raw = environ.get(var)
        if not raw:
            continue
        if key.startswith("ttsr."):
            values["ttsr"] = _override_ttsr(values.get("ttsr"), key[5:], raw, var)
            sources["ttsr"] = f"env {var}"
            continue
        value_in: Any = raw
        if key == "deny_tools":
            value_in = [part.strip() for part in raw.split(",") if part.strip()]
        converted = _convert(key, value_in, var, strict=False)
        values[key] = _absolute(key, converted, base_dir)
        sources[key] = f"env {var}"

    _check_urls(values, sources)
    _check_nats_auth(values, sources)
    if "mcp" in values:
        _check_mcp(values["mcp"], _where("mcp", sources))

    if not values.get("state_dir"):
        values["state_dir"] = default_state_dir(environ)
    if not values.get("workspace"):
        values["workspace"] = base_dir
    if not values.get("rules_dir"):
        values["rules_dir"] = os.path.join(values["workspace"], ".tether", "rules")
    for key in ("state_dir", "workspace", "rules_dir"):
        values[key] = os.path.abspath(os.path.expanduser(values[key]))
    return LoadedSettings(Settings(**values), sources)


def _find_config_file(
    environ: Mapping[str, str], config_path: str | None, base_dir: str
) -> tuple[str | None, str]:
    if config_path:
        explicit, label = config_path, config_path
    elif environ.get("TETHER_CONFIG"):
        explicit = environ["TETHER_CONFIG"]
        label = explicit
    else:
        implicit = os.path.join(base_dir, "tether.toml")
        return (implicit if os.path.isfile(implicit) else None), "tether.toml"
    resolved = os.path.join(base_dir, os.path.expanduser(explicit))
    if not os.path.isfile(resolved):
        how = "" if config_path else " (from TETHER_CONFIG)"
        raise ConfigError(f"{label}: config file not found{how}")
    return resolved, label


def _read_toml(path: str, label: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from None
    try:
        raw = msgspec.toml.decode(data)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{label}: not valid TOML: {exc}") from None
    if not isinstance(raw, dict):  # pragma: no cover - TOML documents are always tables
        raise ConfigError(f"{label}: expected a table of settings")
    for key in raw:
        if key not in FIELDS:
            close = difflib.get_close_matches(key, list(FIELDS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(FIELDS)
            raise ConfigError(f"{label}: unknown key {key!r}{hint}; known keys: {known}")
    return raw


def _convert(key: str, value: Any, where: str, *, strict: bool) -> Any:
    """Convert one value to ``key``'s type; ``where`` prefixes the error message."""
    info = FIELDS[key]
    try:
        return msgspec.convert(value, type=info.type, strict=strict)
    except msgspec.ValidationError as exc:
        choices = typing.get_args(info.type) if typing.get_origin(
            info.type) is typing.Literal else ()
        if choices and key not in SECRET_FIELDS:
            valid = ", ".join(str(c) for c in choices)
            raise ConfigError(f"{where}: {value!r} is not a valid value; use one of: "
                              f"{valid}") from None
        message = str(exc).replace("`", "")
        if key not in SECRET_FIELDS and isinstance(value, str | int | float | bool):
            message = re.sub(r", got \w+$", "", message) + f", got {value!r}"
        raise ConfigError(f"{where}: {message}") from None


def _override_ttsr(current: TtsrSettings | None, field_name: str, raw: str, var: str) -> Any:
    """The TTSR settings with one field taken from environment variable ``var``."""
    base = msgspec.to_builtins(current or TtsrSettings())
    base[field_name] = raw
    try:
        return msgspec.convert(base, type=TtsrSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{var}: {str(exc).replace('`', '')}, got {raw!r}") from None


def _absolute(key: str, value: Any, base_dir: str) -> Any:
    if key == "mcp" and isinstance(value, McpSettings):
        servers = {name: msgspec.structs.replace(
            server, cwd=os.path.abspath(os.path.join(base_dir, os.path.expanduser(server.cwd))))
            if server.cwd else server for name, server in value.servers.items()}
        return msgspec.structs.replace(value, servers=servers)
    if key in PATH_FIELDS and isinstance(value, str) and value:
        expanded = os.path.expanduser(value)
        if key == "nats_server" and os.sep not in expanded:
            return expanded  # a bare command name: looked up on PATH later
        return os.path.abspath(os.path.join(base_dir, expanded))
    return value


def _where(key: str, sources: Mapping[str, str]) -> str:
    source = sources.get(key, "default")
    if source.startswith("env "):
        return source[4:]
    return f"{source}: {key}"


def _check_urls(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    database_url = values.get("database_url", "")
    if database_url:
        try:
            _check_database_url(database_url)
        except ConfigError as exc:
            raise ConfigError(f"{_where('database_url', sources)}: {exc}") from None
    nats_url = values.get("nats_url", "")
    if nats_url:
        for server in nats_url.split(","):
            scheme = urlsplit(server.strip()).scheme
            if scheme not in NATS_SCHEMES or not urlsplit(server.strip()).hostname:
                raise ConfigError(
                    f"{_where('nats_url', sources)}: expected nats://host:port (or tls://, "
                    f"ws://, wss://; several separated by commas), got {mask_url(server)!r}"
                )
    base_url = values.get("anthropic_base_url", "")
    if base_url and urlsplit(base_url).scheme not in ("http", "https"):
        raise ConfigError(
            f"{_where('anthropic_base_url', sources)}: expected an http:// or https:// URL, "
            f"got {mask_url(base_url)!r}"
        )


def _check_nats_auth(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Refuse an inconsistent login to an external NATS server: settings without
    ``nats_url``, half a pair (user without password, certificate without key), several
    ways to sign in, or a file that does not exist."""
    given = [key for key in (*NATS_AUTH_FILES, "nats_user", "nats_password")
             if values.get(key)]
    if not given:
        return
    if not values.get("nats_url"):
        raise ConfigError(
            f"{_where(given[0], sources)}: is for an external NATS server (nats_url); the "
            "embedded server makes its own credentials (nats-credentials.json in the state "
            "directory)")
    for one, other in (("nats_user", "nats_password"), ("nats_password", "nats_user"),
                       ("nats_tls_cert", "nats_tls_key"), ("nats_tls_key", "nats_tls_cert")):
        if values.get(one) and not values.get(other):
            raise ConfigError(f"{_where(one, sources)}: needs {other} too")
    ways = [key for key in ("nats_credentials", "nats_nkey", "nats_user") if values.get(key)]
    if "@" in urlsplit(values["nats_url"].split(",")[0].strip()).netloc:
        ways.insert(0, "nats_url")
    if len(ways) > 1:
        raise ConfigError(
            f"{_where(ways[1], sources)}: give one way to sign in to NATS (a user in "
            "nats_url, nats_credentials, nats_nkey, or nats_user with nats_password), "
            f"not {' and '.join(ways)}")
    for key in NATS_AUTH_FILES:
        path = values.get(key)
        if path and not os.path.isfile(path):
            raise ConfigError(f"{_where(key, sources)}: no such file: {path}")


def _check_mcp(mcp: McpSettings, where: str) -> None:
    """Refuse MCP servers with a bad name or a table that is neither stdio nor HTTP."""
    for name, server in mcp.servers.items():
        problem = _mcp_problem(name, server)
        if problem:
            raise ConfigError(f"{where}.servers.{name}: {problem}")


def _mcp_problem(name: str, server: McpServer) -> str:
    """What is wrong with one ``[mcp.servers.NAME]`` table ('' when nothing is)."""
    if not MCP_SERVER_NAME.match(name) or len(name) > MCP_SERVER_NAME_MAX:
        return (f"the server name {name!r} must be letters, digits, - and single _ (not "
                f"first or last), at most {MCP_SERVER_NAME_MAX} characters")
    if bool(server.command) == bool(server.url):
        return ("give exactly one of command (a local server over stdio) or url (a "
                "streamable HTTP server)" + (", not both" if server.command else ""))
    if server.command and server.headers:
        return "headers are for url servers; a command server takes env"
    if server.url:
        parts = urlsplit(server.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"url must be an http:// or https:// URL, got {mask_url(server.url)!r}"
        if server.args or server.env or server.cwd:
            return "args, env and cwd are for command servers; a url server takes headers"
    return ""


def _check_database_url(url: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme in ("postgresql", "postgres"):
        postgres_env(url)
    elif scheme == "sqlite":
        sqlite_path(url)
    else:
        raise ConfigError(
            "expected sqlite:///path/to/file.db or postgresql://user:password@host:port/dbname, "
            f"got {mask_url(url)!r}"
        )
