"""Who may do what on the bus: NATS users, their roles and their credentials.

Two roles (DESIGN.md, "The trust boundary", line 4):

* ``engine``: publishes and subscribes everything (``>``), the JetStream API included.
  The engine process, and the trusted connectors that authenticate their users
  themselves and publish on the bare ``<ns>.inbox`` (``tether telegram``).
* ``connector``: one NATS user per principal. It may publish only its own inbox
  ``<ns>.inbox.<principal>`` (the manager takes the principal from the subject, never from
  the message) and requests on ``<ns>.manager`` (list, kill, fork, the tree commands of
  the command line), and subscribe only ``<ns>.channel.*.out`` and its own reply
  subjects ``_INBOX.<principal>.>`` (its requests use that inbox prefix). Nothing else:
  no session, gatekeeper, TTSR, interaction, event, dead-letter or JetStream subject.

The embedded server (no ``nats_url``) runs with these users: :func:`load_credentials`
keeps them in ``<state_dir>/nats-credentials.json`` (mode 0600, refused when others can
read it; made on first use, kept across restarts) and :func:`server_config` writes the
server's ``authorization`` block from them. The engine connects as ``engine``; the command
line as the connector of the OS user running it (:func:`client_auth`).

For an external server (``nats_url`` set) the settings say how to authenticate
(``nats_credentials``, ``nats_nkey``, ``nats_user`` + ``nats_password``, ``nats_tls_*``);
docs/operations.md has a server configuration with the same two roles.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import secrets
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from tether.adapters.config import ConfigError
from tether.adapters.private_file import ExposedFile, read_private, write_private
from tether.events.subjects import Subjects, check_token

if TYPE_CHECKING:
    from tether.adapters.config import Settings

__all__ = [
    "CREDENTIALS_FILE",
    "ENGINE_USER",
    "ClientAuth",
    "Credentials",
    "NatsAuthError",
    "NatsUser",
    "Permissions",
    "client_auth",
    "connector_auth",
    "connector_permissions",
    "connector_user",
    "credentials_path",
    "engine_auth",
    "engine_permissions",
    "load_credentials",
    "local_principal",
    "read_credentials",
    "server_config",
    "settings_auth",
]

log = logging.getLogger(__name__)

CREDENTIALS_FILE: Final = "nats-credentials.json"
#: The engine's NATS user on the embedded server.
ENGINE_USER: Final = "engine"
#: A connector's NATS user is this prefix and its principal (never equal to ENGINE_USER).
CONNECTOR_PREFIX: Final = "connector-"

Role = Literal["engine", "connector"]


class NatsAuthError(ConfigError):
    """The bus's credentials cannot be used: missing, exposed, malformed, or none for this
    user. The message says what to do."""


class NatsUser(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One NATS user of the embedded server: its name and password."""

    user: str
    password: str


class Credentials(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The content of ``nats-credentials.json``: the engine's user and one connector user
    per principal."""

    engine: NatsUser
    connectors: dict[str, NatsUser] = {}


@dataclass(frozen=True)
class Permissions:
    """Subjects a NATS user may publish to and subscribe to (NATS wildcards allowed)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def engine_permissions() -> Permissions:
    """Everything: the engine publishes and subscribes every subject, JetStream's too."""
    return Permissions(publish=(">",), subscribe=(">",))


def reply_prefix(principal: str) -> str:
    """The inbox prefix of a connector's requests: replies come to ``_INBOX.<principal>.…``
    (the only replies it may read)."""
    return f"_INBOX.{check_token(principal, 'principal')}"


def connector_permissions(subjects: Subjects, principal: str) -> Permissions:
    """What the connector of ``principal`` may do: publish on its own inbox and its own
    manager subject; read every channel's output and the replies to its own requests."""
    return Permissions(
        publish=(subjects.inbox_for(principal), subjects.manager_for(principal)),
        subscribe=(f"{subjects.namespace}.channel.*.out", f"{reply_prefix(principal)}.>"),
    )


def connector_user(principal: str) -> str:
    """The NATS user name of a principal's connector on the embedded server."""
    return CONNECTOR_PREFIX + check_token(principal, "principal")


def credentials_path(state_dir: str) -> str:
    """Where the state directory keeps the embedded server's credentials."""
    return os.path.join(state_dir, CREDENTIALS_FILE)


def effective_user() -> str:
    """The name of the OS user this process runs as: its effective uid's, never
    ``$USER`` or ``$LOGNAME`` (which anyone can set)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no passwd entry (some containers)
        return str(os.geteuid())


def local_principal() -> str | None:
    """The OS user running this process (:func:`effective_user`), when it can be a
    principal (one subject token: letters, digits, ``_`` and ``-``); None (with a
    warning) when it cannot."""
    name = effective_user()
    try:
        return check_token(name, "principal")
    except ValueError:
        log.warning("the OS user name %r is not a NATS subject token: no connector "
                    "credentials are made for it", name)
        return None


def read_credentials(state_dir: str) -> Credentials | None:
    """The stored credentials, or None when there are none yet.

    Raises :class:`NatsAuthError` when the file is readable by others or is not one
    Tether wrote.
    """
    path = credentials_path(state_dir)
    try:
        text = read_private(path, "delete it and restart the engine to make new credentials")
    except ExposedFile as exc:
        raise NatsAuthError(str(exc)) from None
    except OSError as exc:
        raise NatsAuthError(f"cannot read {path}: {exc.strerror or exc}") from None
    if text is None:
        return None
    try:
        return msgspec.json.decode(text.encode(), type=Credentials)
    except msgspec.DecodeError as exc:
        raise NatsAuthError(f"{path} is not a credentials file Tether wrote ({exc}): delete "
                            "it and restart the engine to make new credentials") from None


def load_credentials(state_dir: str, principals: Iterable[str] = ()) -> Credentials:
    """The embedded server's credentials, made now for whoever has none yet.

    Keeps every stored user and password; adds the engine (on first use) and a connector
    for each of ``principals`` that has none. The file is written owner-only (0600).
    Raises :class:`NatsAuthError` as :func:`read_credentials` does.
    """
    path = credentials_path(state_dir)
    wanted = [check_token(p, "principal") for p in principals]
    for _ in range(3):
        current = read_credentials(state_dir)
        if current is None:
            made = Credentials(engine=_new_user(ENGINE_USER),
                               connectors={p: _new_user(connector_user(p)) for p in wanted})
            try:
                write_private(path, _encode(made), exclusive=True)
            except FileExistsError:  # another process made it meanwhile: read theirs
                continue
            return made
        missing = [p for p in wanted if p not in current.connectors]
        if not missing:
            return current
        more = {**current.connectors, **{p: _new_user(connector_user(p)) for p in missing}}
        updated = msgspec.structs.replace(current, connectors=more)
        write_private(path, _encode(updated), exclusive=False)
        return updated
    raise NatsAuthError(f"{path} keeps changing while it is read; try again")


def _new_user(name: str) -> NatsUser:
    return NatsUser(user=name, password=secrets.token_urlsafe(32))


def _encode(credentials: Credentials) -> str:
    return msgspec.json.format(msgspec.json.encode(credentials).decode(), indent=2) + "\n"


def server_config(credentials: Credentials, subjects: Subjects) -> str:
    """The ``authorization`` block of the embedded server: the engine with every subject,
    each connector with :func:`connector_permissions`. No user: no connection."""
    users = [_user_block(credentials.engine, engine_permissions())]
    for principal, user in sorted(credentials.connectors.items()):
        users.append(_user_block(user, connector_permissions(subjects, principal)))
    body = "\n".join(users)
    return ("# Written by Tether at every start: do not edit.\n"
            f"authorization {{\n  users = [\n{body}\n  ]\n}}\n")


def _user_block(user: NatsUser, permissions: Permissions) -> str:
    def quoted(values: Iterable[str]) -> str:
        return ", ".join(_quote(v) for v in values)

    return (f"    {{user: {_quote(user.user)}, password: {_quote(user.password)}, permissions: {{"
            f"publish: {{allow: [{quoted(permissions.publish)}]}}, "
            f"subscribe: {{allow: [{quoted(permissions.subscribe)}]}}}}}}")


def _quote(value: str) -> str:
    """A nats-server configuration string (its syntax takes JSON strings)."""
    return msgspec.json.encode(value).decode()


@dataclass(frozen=True)
class ClientAuth:
    """How one client authenticates to NATS, as :func:`nats.connect` options.

    At most one of ``user``/``password``, ``credentials`` (a ``.creds`` file) and
    ``nkey_seed`` (an NKey seed file); ``tls`` a client TLS context (CA and client
    certificate); ``inbox_prefix`` the prefix of its requests' reply subjects.
    """

    user: str = ""
    password: str = ""
    credentials: str = ""
    nkey_seed: str = ""
    tls: ssl.SSLContext | None = None
    inbox_prefix: str = ""

    @property
    def anonymous(self) -> bool:
        """Signs in with no user, credentials file or NKey (a TLS client certificate
        the server may still check is not counted)."""
        return not (self.user or self.credentials or self.nkey_seed)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for :func:`nats.connect`."""
        options: dict[str, Any] = {}
        if self.user:
            options.update(user=self.user, password=self.password)
        if self.credentials:
            options["user_credentials"] = self.credentials
        if self.nkey_seed:
            options["nkeys_seed"] = self.nkey_seed
        if self.tls is not None:
            options["tls"] = self.tls
        if self.inbox_prefix:
            options["inbox_prefix"] = self.inbox_prefix
        return options

    def describe(self) -> str:
        """Who connects, for error messages (never a secret)."""
        if self.user:
            return f"user {self.user!r}"
        if self.credentials:
            return f"credentials {self.credentials}"
        if self.nkey_seed:
            return f"NKey seed {self.nkey_seed}"
        return "no credentials"


def engine_auth(credentials: Credentials) -> ClientAuth:
    """The engine's login to the embedded server."""
    return ClientAuth(user=credentials.engine.user, password=credentials.engine.password)


def connector_auth(credentials: Credentials, principal: str) -> ClientAuth:
    """The login of ``principal``'s connector to the embedded server; raises
    :class:`NatsAuthError` when the credentials have none for it."""
    user = credentials.connectors.get(principal)
    if user is None:
        raise NatsAuthError(
            f"the engine's NATS credentials have no connector for {principal!r}: only the "
            "OS user who runs the engine gets one (or set nats_url and the nats_* "
            "credentials of an external server)")
    return ClientAuth(user=user.user, password=user.password,
                      inbox_prefix=reply_prefix(principal))


def settings_auth(settings: Settings, role: Role = "engine") -> ClientAuth:
    """The login to the external server the settings name (``nats_url``): credentials
    file, NKey seed or user and password, and TLS. A connector's requests use its OS
    user's reply prefix. Raises :class:`~adapters.config.ConfigError` when the TLS files
    cannot be loaded or the NKey support is missing."""
    if (settings.nats_credentials or settings.nats_nkey) and (
            importlib.util.find_spec("nkeys") is None):
        raise ConfigError("nats_credentials and nats_nkey need the nkeys package: "
                          "pip install 'nats-py[nkeys]'")
    principal = local_principal() if role == "connector" else None
    return ClientAuth(
        user=settings.nats_user, password=settings.nats_password,
        credentials=settings.nats_credentials, nkey_seed=settings.nats_nkey,
        tls=_tls_context(settings), inbox_prefix=reply_prefix(principal) if principal else "")


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not (settings.nats_tls_ca or settings.nats_tls_cert):
        return None
    try:
        context = ssl.create_default_context(cafile=settings.nats_tls_ca or None)
        if settings.nats_tls_cert:
            context.load_cert_chain(settings.nats_tls_cert, settings.nats_tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"nats_tls_ca / nats_tls_cert / nats_tls_key: cannot load: "
                          f"{exc}") from None
    return context


def client_auth(settings: Settings, role: Role) -> ClientAuth:
    """How a process other than the engine logs in to the engine's NATS server.

    External server: the settings (:func:`settings_auth`). Embedded server: the
    credentials the running engine made, as ``engine`` (trusted connectors such as
    ``tether telegram``) or as the connector of the OS user running this process.
    """
    if settings.nats_url:
        return settings_auth(settings, role)
    credentials = read_credentials(settings.state_dir)
    if credentials is None:
        raise NatsAuthError(f"no NATS credentials in {credentials_path(settings.state_dir)}: "
                            "start the engine (`tether serve`) first")
    if role == "engine":
        return engine_auth(credentials)
    principal = local_principal()
    if principal is None:
        raise NatsAuthError(f"the OS user name {effective_user()!r} cannot be a principal "
                            "(letters, digits, '_' and '-' only)")
    return connector_auth(credentials, principal)
