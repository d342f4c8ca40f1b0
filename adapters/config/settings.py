"""Every setting, typed, with its default (:class:`Settings`); the environment variable
that overrides each (:data:`ENV_VARS`); which are paths, secrets and URLs."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Final, Literal

import msgspec

from tether.actors.chat.router import RouterSettings
from tether.actors.gatekeeper.security import ProtectionConfig
from tether.actors.gatekeeper.tier2 import Tier2Settings
from tether.actors.middleware import MiddlewareSettings
from tether.actors.ttsr.policy import TtsrSettings
from tether.events.messages import Mode
from tether.events.sandbox import SandboxLimits


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
    nats_connect_timeout: PositiveFloat = 10.0
    """Seconds the first connection to NATS is tried (a server still starting is waited
    for) before a command or the engine gives up with a one-line error."""
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
    "TETHER_NATS_CONNECT_TIMEOUT": "nats_connect_timeout",
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


FIELDS: Final[dict[str, msgspec.structs.FieldInfo]] = {
    f.name: f for f in msgspec.structs.fields(Settings)
}


#: The files an external NATS server's login reads (see :func:`_check_nats_auth`).
NATS_AUTH_FILES: Final = ("nats_credentials", "nats_nkey", "nats_tls_ca", "nats_tls_cert",
                           "nats_tls_key")


PATH_FIELDS: Final = ("state_dir", "workspace", "rules_dir", "nats_server", "policy_file",
                       *NATS_AUTH_FILES)


SECRET_FIELDS: Final = frozenset({"anthropic_api_key", "telegram_token", "nats_password"})


URL_FIELDS: Final = frozenset({"database_url", "nats_url", "anthropic_base_url"})


NATS_SCHEMES: Final = frozenset({"nats", "tls", "ws", "wss"})
