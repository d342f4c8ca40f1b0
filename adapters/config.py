"""Tether's settings: one typed object, loaded from ``tether.toml`` and the environment.

Public API:

* :class:`Settings`: every setting, with its default (a msgspec Struct).
* :func:`load_settings`: ``tether.toml`` then environment overrides -> :class:`Settings`.
* :func:`load_settings_with_sources`: the same, returned as :class:`LoadedSettings`
  (``.settings`` plus ``.sources``, a mapping of field name -> where its value came from:
  ``"default"``, the config file's label such as ``"tether.toml"``, or ``"env TETHER_X"``).
* :func:`describe` / :func:`render_settings`: the effective settings for ``tether config``,
  secrets masked.
* :func:`postgres_env`: a ``postgresql://`` URL -> eventsourcing's ``POSTGRES_*`` settings.
* :func:`sqlite_path`: the file named by a ``sqlite:`` URL.

Every problem a user can cause is a :class:`ConfigError` whose message names the key and where
the bad value came from (``tether.toml: round_limit: ...`` or ``TETHER_ROUND_LIMIT: ...``); the
command line prints ``str(error)``, never a traceback.

Loading resolves the derived defaults, so a loaded :class:`Settings` always has absolute
``state_dir``, ``workspace`` and ``rules_dir``. Relative paths in ``tether.toml`` are relative to
the file's directory; relative paths in the environment are relative to ``cwd``. An environment
variable set to the empty string counts as unset.
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import msgspec

from actors.chat.router import RouterSettings
from actors.gatekeeper.security import ProtectionConfig
from actors.gatekeeper.tier2 import Tier2Settings
from actors.middleware import MiddlewareSettings
from actors.ttsr.policy import TtsrSettings
from events.messages import Mode
from events.sandbox import SandboxLimits

__all__ = [
    "ENV_VARS",
    "ConfigError",
    "LoadedSettings",
    "McpServer",
    "McpSettings",
    "Settings",
    "default_state_dir",
    "describe",
    "describe_mcp",
    "load_settings",
    "load_settings_with_sources",
    "mask_secret",
    "mask_url",
    "postgres_env",
    "render_settings",
    "sqlite_path",
]


class ConfigError(Exception):
    """A setting is missing, malformed or out of range; the message is meant for the user."""


def default_state_dir(env: Mapping[str, str] | None = None) -> str:
    """Return ``$XDG_STATE_HOME/tether``, or ``~/.local/state/tether`` when it is unset."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "tether")


def _default_state_dir_factory() -> str:
    return default_state_dir()


Namespace = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[A-Za-z0-9_-]+$",
        description="subject prefix: letters, digits, _ and - only",
    ),
]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


class ProtectionSettings(ProtectionConfig, frozen=True, forbid_unknown_fields=True):
    """The protected files and the tiers they need, as tether.toml's ``[protection]``
    table (the security pipeline's own defaults apply to what is left out)."""


#: An MCP server's name: letters, digits, ``-`` and single ``_`` (not at either end), so
#: ``<server>__<tool>`` always says where the server's name ends.
MCP_SERVER_NAME: Final = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")
#: The longest server name (a namespaced tool name must fit in 64 characters).
MCP_SERVER_NAME_MAX: Final = 32
#: Header and environment variable names whose values are secrets the redactor masks.
_MCP_SECRET_NAME: Final = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)


class McpServer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ``[mcp.servers.NAME]`` table: a local process spoken to over stdio (``command``,
    ``args``, ``env`` added to a minimal environment, ``cwd``) or a streamable HTTP
    endpoint (``url``, ``headers``); exactly one of ``command`` and ``url``.

    ``trust`` says how the gatekeeper judges the server's tools: ``ask`` (the default)
    as tools Tether does not model, so a person decides unless the policy file allows
    them; ``read`` as reads (path-like fields read paths), judged like ``read_file``.

    A stdio server runs in the sandbox for its whole life: its ``cwd`` is the one
    writable folder (read-only with ``writable = false``; protected files in it always
    read-only), and it has no network unless ``network = true``. Both are ignored for a
    url server, which is not a process of Tether's.
    """

    command: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = {}
    trust: Literal["ask", "read"] = "ask"
    network: bool = False
    writable: bool = True

    @property
    def transport(self) -> str:
        """``stdio`` for a command, ``http`` for a URL."""
        return "stdio" if self.command else "http"


class McpSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ``[mcp]`` table: the MCP servers whose tools sessions may load (one tool group
    ``mcp_<name>`` each, tools named ``<name>__<tool>``), how long one tool call may take
    and how long starting (or reaching) a server and listing its tools may take."""

    servers: dict[str, McpServer] = {}
    call_timeout: PositiveFloat = 60.0
    connect_timeout: PositiveFloat = 15.0

    def prefixes(self) -> tuple[str, ...]:
        """The name prefix of every server's tools (``<name>__``)."""
        return tuple(f"{name}__" for name in self.servers)

    def read_only_prefixes(self) -> tuple[str, ...]:
        """The name prefixes of the servers configured with ``trust = "read"``."""
        return tuple(f"{name}__" for name, server in self.servers.items()
                     if server.trust == "read")

    def secrets(self) -> list[str]:
        """Values the redactor masks: secret-looking environment variables and headers
        (and the token of an ``Authorization: Bearer <token>`` header)."""
        values: list[str] = []
        for server in self.servers.values():
            for name, value in (*server.env.items(), *server.headers.items()):
                if _MCP_SECRET_NAME.search(name) and value:
                    values.append(value)
                    scheme, _, token = value.partition(" ")
                    if token and scheme.isalpha():
                        values.append(token)
        return values


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every Tether setting with its default; build it with :func:`load_settings`.

    Empty strings mean "derive it": ``nats_url`` empty starts an embedded server,
    ``database_url`` empty uses SQLite under ``state_dir``, ``workspace`` empty is the current
    directory at load time, ``rules_dir`` empty is ``<workspace>/.tether/rules``.
    ``deny_commands`` None means the gatekeeper's own defaults.
    """

    nats_url: str = ""
    database_url: str = ""
    state_dir: str = msgspec.field(default_factory=_default_state_dir_factory)
    namespace: Namespace = "tether"
    model: str = "claude-sonnet-4-6"
    anthropic_api_key: str = ""
    anthropic_base_url: str = ""
    workspace: str = ""
    rules_dir: str = ""
    round_limit: PositiveInt = 25
    max_tokens: PositiveInt = 4096
    ask_timeout: PositiveFloat = 5.0
    approval_timeout: PositiveFloat = 300.0
    """Seconds an approval or a question waits for an answer before it counts as a no."""
    mask_secrets_in_messages: bool = True
    """Mask secrets in users' messages (the redactor's shapes: keys, tokens, private key
    blocks) before they are stored or reach the model; false keeps them as typed."""
    approvers: dict[str, list[str]] = {}
    """Per channel (``"*"``: every channel), the principals who may approve calls, answer
    questions, review plans and change the mode of sessions they do not own (a session's
    owner always may)."""
    max_sessions: PositiveInt = 5
    """Sessions active at once (starting or running); more are refused."""
    idle_timeout: NonNegativeFloat = 1800.0
    """Seconds a multi-turn session may wait for input before it is killed (0: never)."""
    safety_net: NonNegativeFloat = 15.0
    """Seconds without any activity mid-turn before a session says it waits (0: never)."""
    budget_usd: NonNegativeFloat = 10.0
    """Dollars a new session may spend (0: no limit); a message may set its own."""
    resumable_sessions: PositiveInt = 50
    """Finished sessions that can be resumed by name (the most recent); any by id."""
    http_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    """Port of the HTTP connector in ``tether serve`` (0: no HTTP connector)."""
    http_host: str = "127.0.0.1"
    """Address the HTTP connector listens on."""
    http_user: str = ""
    """Who the HTTP token's messages come from (empty: the user running ``tether serve``)."""
    http_allowed_hosts: list[str] = []
    """More names the HTTP connector answers to (``Host``), besides the loopback ones."""
    http_cors_origins: list[str] = []
    """Web origins (``https://app.example``) allowed to call the HTTP connector from a
    browser; none by default."""
    http_metrics_open: bool = False
    """Serve ``/metrics`` without the token (for a scraper that has none)."""
    telegram_token: str = ""
    """The Telegram bot's token (``tether telegram``); a secret, masked everywhere."""
    telegram_base_url: str = ""
    """The Bot API base URL ending in ``/bot`` (empty: Telegram's own)."""
    telegram_throttle: PositiveFloat = 1.5
    """Seconds between two edits of a streaming Telegram message."""
    telegram_can_edit: bool = True
    """Stream replies by editing one message; false: send each reply whole at its end."""
    titles: bool = True
    """Name each session in the background (a short model call) once it has 6 messages."""
    context_window: NonNegativeInt = 0
    """Tokens the model's window holds, for compaction and the max_tokens clamp (0: the
    figure from the model table, ``actors/data/models.toml``)."""
    mode: Mode = "default"
    """The mode new sessions start in: default, plan or auto (``/plan``, ``/edit``,
    ``/default`` switch it)."""
    auto_approve: list[str] = msgspec.field(
        default_factory=lambda: ["write_file", "edit_file"])
    """Tools whose policy escalations auto mode approves; never protection's minimum
    tiers nor a heuristic's doubt."""
    deny_tools: list[str] = msgspec.field(default_factory=list)
    deny_commands: list[str] | None = None
    shell_timeout: PositiveFloat = 30.0
    sandbox: Literal["bubblewrap", "off"] = "bubblewrap"
    """Where shell, git and MCP stdio processes run: ``bubblewrap`` (the workspace the only
    writable place, protected files read-only, no network unless a verdict grants it;
    where it cannot run, those tools are refused) or ``off`` (plain processes: every
    shell call is asked of a person)."""
    limits: SandboxLimits = msgspec.field(default_factory=SandboxLimits)
    """The ``[limits]`` table of each sandboxed call: cpu_seconds, memory_mb,
    file_size_mb, processes (the wall-clock bound is ``shell_timeout``)."""
    sandbox_home: list[str] = msgspec.field(default_factory=lambda: [".gitconfig"])
    """Entries of the user's home a sandboxed process may read; the rest is hidden."""
    nats_server: str = ""
    nats_credentials: str = ""
    """An external NATS (``nats_url``): a ``.creds`` file (user JWT and NKey seed)."""
    nats_nkey: str = ""
    """An external NATS: a file holding the NKey seed (``SU…``) to sign in with."""
    nats_user: str = ""
    """An external NATS: the user name (with ``nats_password``)."""
    nats_password: str = ""
    """An external NATS: the password of ``nats_user``; a secret, masked everywhere."""
    nats_tls_ca: str = ""
    """An external NATS: the CA certificate (PEM) that signed the server's certificate
    (empty: the system's CAs, when TLS is used at all)."""
    nats_tls_cert: str = ""
    """An external NATS: this client's certificate (PEM), with ``nats_tls_key``."""
    nats_tls_key: str = ""
    """An external NATS: the private key (PEM) of ``nats_tls_cert``."""
    policy_file: str = ""
    """The gatekeeper's tier-0 policy (YAML); empty: the built-in default policy."""
    ttsr: TtsrSettings = msgspec.field(default_factory=TtsrSettings)
    middleware: MiddlewareSettings = msgspec.field(default_factory=MiddlewareSettings)
    tier2: Tier2Settings = msgspec.field(default_factory=Tier2Settings)
    notifications: RouterSettings = msgspec.field(default_factory=RouterSettings)
    """The ``[notifications]`` table: debounce, waiting_debounce, long_running,
    workdir_channels, fallback_channel, wake_webhook, webhook_timeout."""
    """The ``[tier2]`` table: enabled, model, on_failure, rate_per_minute,
    daily_budget_usd, timeout, max_tokens."""
    protection: ProtectionSettings = msgspec.field(default_factory=lambda: ProtectionSettings())
    """The ``[protection]`` table: identity_files, memory_files, config_files (workspace-
    relative globs), memory_min_tier, config_min_tier, confine_shell_reads."""
    mcp: McpSettings = msgspec.field(default_factory=McpSettings)
    """The ``[mcp]`` table: call_timeout, connect_timeout and ``[mcp.servers.NAME]``."""
    """The ``[middleware]`` table: allow (channel -> user ids), rate_per_minute, burst,
    max_message_bytes."""
    """The ``[ttsr]`` table: enabled, context_mode, repeat_mode, repeat_gap, window."""


#: Environment variable -> setting it overrides. Lists (``TETHER_DENY_TOOLS``) are
#: comma-separated.
ENV_VARS: Final[dict[str, str]] = {
    "TETHER_NATS_URL": "nats_url",
    "TETHER_DATABASE_URL": "database_url",
    "TETHER_STATE_DIR": "state_dir",
    "TETHER_NAMESPACE": "namespace",
    "TETHER_MODEL": "model",
    "TETHER_WORKSPACE": "workspace",
    "TETHER_RULES_DIR": "rules_dir",
    "TETHER_ROUND_LIMIT": "round_limit",
    "TETHER_MAX_TOKENS": "max_tokens",
    "TETHER_ASK_TIMEOUT": "ask_timeout",
    "TETHER_APPROVAL_TIMEOUT": "approval_timeout",
    "TETHER_MODE": "mode",
    "TETHER_TITLES": "titles",
    "TETHER_CONTEXT_WINDOW": "context_window",
    "TETHER_MAX_SESSIONS": "max_sessions",
    "TETHER_HTTP_PORT": "http_port",
    "TETHER_TELEGRAM_TOKEN": "telegram_token",
    "TETHER_TELEGRAM_BASE_URL": "telegram_base_url",
    "TETHER_IDLE_TIMEOUT": "idle_timeout",
    "TETHER_BUDGET_USD": "budget_usd",
    "TETHER_MASK_SECRETS_IN_MESSAGES": "mask_secrets_in_messages",
    "TETHER_SHELL_TIMEOUT": "shell_timeout",
    "TETHER_SANDBOX": "sandbox",
    "TETHER_DENY_TOOLS": "deny_tools",
    "TETHER_NATS_SERVER": "nats_server",
    "TETHER_NATS_CREDENTIALS": "nats_credentials",
    "TETHER_NATS_NKEY": "nats_nkey",
    "TETHER_NATS_USER": "nats_user",
    "TETHER_NATS_PASSWORD": "nats_password",
    "TETHER_NATS_TLS_CA": "nats_tls_ca",
    "TETHER_NATS_TLS_CERT": "nats_tls_cert",
    "TETHER_NATS_TLS_KEY": "nats_tls_key",
    "TETHER_POLICY_FILE": "policy_file",
    "TETHER_TTSR_ENABLED": "ttsr.enabled",
    "ANTHROPIC_API_KEY": "anthropic_api_key",
    "ANTHROPIC_BASE_URL": "anthropic_base_url",
}

_FIELDS: Final[dict[str, msgspec.structs.FieldInfo]] = {
    f.name: f for f in msgspec.structs.fields(Settings)
}
#: The files an external NATS server's login reads (see :func:`_check_nats_auth`).
_NATS_AUTH_FILES: Final = ("nats_credentials", "nats_nkey", "nats_tls_ca", "nats_tls_cert",
                           "nats_tls_key")
_PATH_FIELDS: Final = ("state_dir", "workspace", "rules_dir", "nats_server", "policy_file",
                       *_NATS_AUTH_FILES)
_SECRET_FIELDS: Final = frozenset({"anthropic_api_key", "telegram_token", "nats_password"})
_URL_FIELDS: Final = frozenset({"database_url", "nats_url", "anthropic_base_url"})
_NATS_SCHEMES: Final = frozenset({"nats", "tls", "ws", "wss"})
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
    sources: dict[str, str] = {name: "default" for name in _FIELDS}

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
        if key not in _FIELDS:
            close = difflib.get_close_matches(key, list(_FIELDS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(_FIELDS)
            raise ConfigError(f"{label}: unknown key {key!r}{hint}; known keys: {known}")
    return raw


def _convert(key: str, value: Any, where: str, *, strict: bool) -> Any:
    """Convert one value to ``key``'s type; ``where`` prefixes the error message."""
    info = _FIELDS[key]
    try:
        return msgspec.convert(value, type=info.type, strict=strict)
    except msgspec.ValidationError as exc:
        choices = typing.get_args(info.type) if typing.get_origin(
            info.type) is typing.Literal else ()
        if choices and key not in _SECRET_FIELDS:
            valid = ", ".join(str(c) for c in choices)
            raise ConfigError(f"{where}: {value!r} is not a valid value; use one of: "
                              f"{valid}") from None
        message = str(exc).replace("`", "")
        if key not in _SECRET_FIELDS and isinstance(value, str | int | float | bool):
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
    if key in _PATH_FIELDS and isinstance(value, str) and value:
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
            if scheme not in _NATS_SCHEMES or not urlsplit(server.strip()).hostname:
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
    given = [key for key in (*_NATS_AUTH_FILES, "nats_user", "nats_password")
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
    for key in _NATS_AUTH_FILES:
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
    elif parts.scheme in _NATS_SCHEMES:
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
    if key in _SECRET_FIELDS:
        return mask_secret(str(value))
    if key in _URL_FIELDS:
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
        for name in _FIELDS
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
