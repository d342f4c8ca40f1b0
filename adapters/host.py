"""The engine host: everything one process needs to run Tether, started and stopped in order.

Start: the NATS server (embedded when no ``nats_url`` is set), the bus, the event store,
the session view and its follower, the event relay, then the actors (gatekeeper, router,
session manager). Sessions' actors (the session and its TTSR monitor) are started on
demand by the manager. Stop runs the same list backwards, and always runs in full.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import pykka

from tether.actors.chat.interactions import InteractionCoordinatorActor, Tick
from tether.actors.chat.router import NotificationRouterActor, OutboxAdvanced
from tether.actors.gatekeeper.actor import Containment, GatekeeperActor
from tether.actors.gatekeeper.deny_lists import DenyLists
from tether.actors.gatekeeper.security import PipelineConfig, default_policy, load_policy
from tether.actors.manager import KillAll, SessionLimits, SessionManagerActor
from tether.actors.middleware import Gate
from tether.actors.model.redact import Redactor
from tether.actors.ports import Clock, Ids, Provider, RandomIds, SystemClock, ToolExecutor
from tether.actors.runtime import ActorHandle, ActorSystem, Binding
from tether.actors.session import NewSession, SessionActor, SessionConfig
from tether.actors.ttsr.monitor import TtsrMonitorActor, rule_folders
from tether.actors.ttsr.rules import Rule, load_rules
from tether.adapters.config import Settings
from tether.adapters.engine_lease import EngineLease
from tether.adapters.engine_lock import EngineLock
from tether.adapters.http_api import HttpApi
from tether.adapters.http_token import load_token
from tether.adapters.nats_auth import (
    engine_auth,
    load_credentials,
    local_principal,
    server_config,
    settings_auth,
)
from tether.adapters.nats_bus import NatsBus
from tether.adapters.nats_server import EmbeddedNats
from tether.adapters.relay import EventRelay
from tether.adapters.sandbox import Placeholders, Sandbox, SandboxReport, probe
from tether.adapters.sandbox.cgroup import sweep_cgroups
from tether.adapters.snapshots import SnapshotStore
from tether.adapters.store import open_application, open_view
from tether.adapters.tools import BuiltinTools
from tether.adapters.tools.shell import Unconfined
from tether.events.application import TetherApplication
from tether.events.messages import (
    BarrierCheck,
    InteractionMessage,
    ManagerMessage,
    NoticesPlanned,
    SessionMessage,
    StreamDelta,
    ToolProposal,
    UserMessage,
    WatchSession,
)
from tether.events.subjects import Subjects
from tether.projections.audit_index import AuditIndex
from tether.projections.follower import SETTLE, Follower, Settler
from tether.projections.injection_records import InjectionRecords
from tether.projections.metrics import MetricsView
from tether.projections.outbox import Outbox
from tether.projections.prometheus import MetricsCollector, registry_with
from tether.projections.session_view import SessionView
from tether.projections.view import TrackedView

if TYPE_CHECKING:
    from tether.adapters.mcp_tools import McpTools

log = logging.getLogger(__name__)

V = TypeVar("V", bound=TrackedView)

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|DATABASE_URL)", re.I)


#: Variables that make bash run or find code the judge never read (a startup file, exported
#: functions, a search path for ``cd``, shell options): never inherited by shell tools.
_SHELL_HOOKS = re.compile(r"^(BASH_ENV|ENV|CDPATH|GLOBIGNORE|PROMPT_COMMAND|SHELLOPTS|BASHOPTS"
                          r"|BASH_FUNC_.*|PS4|INPUTRC)$")


def tool_environment() -> dict[str, str]:
    """The environment shell tools run with: this process's, less anything secret and
    anything that would make bash run code it was not given."""
    return {k: v for k, v in os.environ.items()
            if not _SECRET_ENV.search(k) and not _SHELL_HOOKS.match(k)}


def build_sandbox(settings: Settings) -> tuple[Sandbox | Unconfined, SandboxReport | None]:
    """The containment the settings ask for, with the probe's report (None when off).

    ``sandbox = "off"``: plain processes. Otherwise bubblewrap when the probe shows it
    holds here, else the refusal every process tool answers with. Placeholders left by an
    engine that died mid-call are removed first.
    """
    if settings.sandbox == "off":
        return Unconfined(True, 'sandbox = "off" in the settings'), None
    report = probe()
    if not report.usable:
        return Unconfined(False, report.reason), report
    placeholders = Placeholders(os.path.join(settings.state_dir, "sandbox-placeholders.json"))
    for path in placeholders.sweep():
        log.warning("removed a sandbox placeholder left by a stopped engine: %s", path)
    protection = settings.protection
    sandbox = Sandbox(
        report.bwrap, report.prlimit,
        protected=(*protection.identity_files, *protection.memory_files,
                   *protection.config_files),
        limits=settings.limits,
        home_visible=settings.sandbox_home,
        hidden=(settings.state_dir,),
        placeholders=placeholders,
        scratch=os.path.join(settings.state_dir, "sandbox"),
    )
    if sandbox.cgroup_parent:
        sweep_cgroups(sandbox.cgroup_parent)  # those of calls an engine died in
    return sandbox, report


def known_secrets(settings: Settings) -> list[str]:
    """Secret values the redactor masks: the API key, URL passwords, and the values of
    this process's secret-looking environment variables."""
    values = [settings.anthropic_api_key, settings.telegram_token, settings.nats_password]
    for url in (settings.database_url, settings.nats_url):
        password = urlsplit(url).password if "://" in url else None
        if password:
            values.append(password)
    values.extend(v for k, v in os.environ.items() if _SECRET_ENV.search(k))
    values.extend(settings.mcp.secrets())
    return [v for v in values if v]


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def user_rules_dir() -> str:
    """The user's own TTSR rules folder (``$XDG_CONFIG_HOME/tether/rules``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "tether", "rules")


class _Ticker:
    """Tells actors Tick every second (their timers read the injected clock)."""

    def __init__(self, handles: list[ActorHandle], period: float = 1.0) -> None:
        self._handles = handles
        self._stop = threading.Event()
        self._period = period
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            for handle in self._handles:
                with contextlib.suppress(Exception):  # an actor that stopped
                    handle.tell(Tick())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class Host:
    """One process's engine: bus, store, projections, relay and actors."""

    def __init__(
        self,
        settings: Settings,
        *,
        provider: Provider,
        tools: ToolExecutor | None = None,
        ids: Ids | None = None,
        clock: Clock | None = None,
        canaries: Ids | None = None,
        start_actors: bool = True,
        serve_http: bool = False,
    ) -> None:
        self.settings = settings
        self.serve_http = serve_http
        self.notices_before = 0
        """Start the HTTP connector (``tether serve``) when ``http_port`` is set."""
        self.provider = provider
        self.mcp: McpTools | None = None
        self.clock = clock or SystemClock()
        self.sandbox: Sandbox | Unconfined | None = None
        self.sandbox_report: SandboxReport | None = None
        self.tools = tools or self._default_tools()
        self.ids = ids or RandomIds()
        self.canaries = canaries or RandomIds()
        self.start_actors = start_actors
        self.subjects = Subjects(settings.namespace)
        self.nats: EmbeddedNats | None = None
        self.lease: EngineLease | None = None
        """The namespace's lease on a shared NATS server (an engine with ``nats_url``)."""
        self.bus: NatsBus
        self.app: TetherApplication
        self.view: SessionView
        self.system: ActorSystem
        self.redactor = Redactor(known_secrets(settings))
        self.snapshots = SnapshotStore(os.path.join(settings.state_dir, "snapshots"))
        self._stack: list[Any] = []

    def _default_tools(self) -> ToolExecutor:
        """The built-in tools, plus the MCP servers' groups when the settings name any
        (connected in :meth:`start`, closed in :meth:`stop`)."""
        self.sandbox, self.sandbox_report = build_sandbox(self.settings)
        builtin = BuiltinTools(timeout=self.settings.shell_timeout, env=tool_environment(),
                               clock=self.clock.now,  # current_date tells the engine's time
                               sandbox=self.sandbox)
        if not self.settings.mcp.servers:
            return builtin
        from tether.adapters.mcp_tools import McpTools, WithMcpTools  # the SDK loads slowly

        self.mcp = McpTools(self.settings.mcp, sandbox=self.sandbox,  # stdio servers run in it
                            log_dir=os.path.join(self.settings.state_dir, "mcp"))
        return WithMcpTools(builtin, self.mcp)

    def _containment(self) -> Containment:
        """What the gatekeeper must know of the sandbox (injected tools: the settings)."""
        if self.settings.sandbox == "off":
            return Containment("off")
        if isinstance(self.sandbox, Unconfined) and not self.sandbox.allowed:
            return Containment("missing", self.sandbox.reason)
        return Containment("sandboxed")

    @property
    def nats_url(self) -> str:
        """The URL of the NATS server this host uses."""
        return self.nats.url if self.nats else self.settings.nats_url

    def start(self) -> Host:
        """Start every part; on failure, stop what was started and re-raise."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        settings = self.settings
        if self.start_actors:  # an engine: one per namespace and state directory
            lock = EngineLock(settings.state_dir, settings.namespace).acquire()
            self._stack.append(lock.release)
        # A malformed policy stops the start here, naming the file and line: it never
        # falls back to allowing everything.
        policy = load_policy(settings.policy_file) if settings.policy_file else default_policy()
        self.pipeline = PipelineConfig(policy=policy, protection=settings.protection,
                                       tier2_enabled=settings.tier2.enabled,
                                       read_only_tools=self.mcp.read_only_tools()
                                       if self.mcp is not None else ())
        if isinstance(self.sandbox, Sandbox):
            self._stack.append(self.sandbox.close)
        if self.mcp is not None:  # connects in the background while the rest starts
            self._stack.append(self.mcp.start().stop)
        # The SDK import is slow (seconds): run it beside the rest of the start, and finish
        # it before any actor can call the model, so it never freezes the bus loop.
        prepare = getattr(self.provider, "prepare", None)
        warm = threading.Thread(target=prepare or (lambda: None), name="prepare", daemon=True)
        warm.start()
        self._start_bus()
        self._stack.append(self._close_provider)
        self.app = open_application(settings)
        self._stack.append(self.app.close)
        self.settler = Settler(self.app, SETTLE).start()
        self._stack.append(self.settler.stop)
        self.view, self.view_follower = self._follow(SessionView, "views")
        self.injections, self.injections_follower = self._follow(InjectionRecords, "injections")
        self.audit, self.audit_follower = self._follow(AuditIndex, "audit")
        self.metrics, self.metrics_follower = self._follow(MetricsView, "metrics")
        head = self.app.max_notification_id() or 0
        self.outbox, self.outbox_follower = self._follow(Outbox, "outbox",
                                                         then=self._outbox_advanced,
                                                         before=self._outbox_baseline(head))
        # The router starts from the outbox: it must have taken in every delivery already
        # recorded, or it would send those notices again.
        self.outbox_follower.catch_up()
        self.relay = EventRelay(self.app, self.bus, self.subjects,
                                settler=self.settler).start()
        self._stack.append(self.relay.stop)
        self.system = ActorSystem(self.bus, self.subjects, failure_log=self._record_failure)
        self._stack.append(self.system.stop_all)
        warm.join()
        if self.mcp is not None:
            self.mcp.wait_ready()  # a server that does not answer is retried later
        if self.start_actors:
            self._start_actors()

    def _start_bus(self) -> None:
        """The NATS server (embedded when no ``nats_url`` is set: with its users and their
        permissions, ``adapters/nats_auth.py``), the bus signed in as the engine, and on a
        shared server the namespace's lease (an engine only)."""
        settings = self.settings
        if settings.nats_url:
            auth = settings_auth(settings)
            if auth.anonymous and self.start_actors:
                log.warning(
                    "NATS at %s is used without credentials: whoever can reach it can act "
                    "as any user (send messages in their name, approve their calls at the "
                    "inbox, kill sessions). Give the server the engine and connector roles "
                    "(docs/operations.md, 'An external server with the same roles').",
                    settings.nats_url)
        else:
            principal = local_principal()
            credentials = load_credentials(settings.state_dir, [principal] if principal else [])
            self.nats = EmbeddedNats.from_settings(
                settings, config=server_config(credentials, self.subjects)).start()
            self._stack.append(self.nats.stop)
            url_file = os.path.join(settings.state_dir, "nats.url")
            with open(url_file, "w") as fh:
                fh.write(self.nats.url + "\n")
            self._stack.append(lambda: _remove(url_file))
            auth = engine_auth(credentials)
        self.bus = NatsBus(self.nats_url, name=f"tether-{settings.namespace}", auth=auth,
                           connect_timeout=settings.nats_connect_timeout)
        self._stack.append(self.bus.close)
        if settings.nats_url and self.start_actors:
            self.lease = EngineLease(self.bus, settings.namespace, settings.state_dir).acquire()
            self._stack.append(self.lease.release)

    def _follow(self, kind: type[V], purpose: str,
                then: Callable[[], None] | None = None,
                before: Callable[[V], None] | None = None) -> tuple[V, Follower]:
        """Open a read model (``before`` sees it first) and keep it following the log
        until stop (calling ``then`` after each batch)."""
        view = open_view(kind, self.app, self.settings, purpose)
        self._stack.append(view.close)
        if before is not None:
            before(view)

        def consume(batch: Sequence[Any]) -> None:
            view.consume(batch)
            if then is not None:
                then()

        # Each view reads a moment after a save (the settler wakes it) so a turn's saves are
        # read as one batch: the notices of a session's events reach the router from the
        # session itself, so the outbox is what makes sure, not the way they go.
        follower = Follower(
            self.app, name=kind.NAME, position=view.position, consume=consume,
            settler=self.settler).start()
        self._stack.append(follower.stop)
        return view, follower

    def _start_actors(self) -> None:
        settings, subjects, system = self.settings, self.subjects, self.system
        policy_settings: dict[str, Any] = {"deny_tools": settings.deny_tools,
                                           "known_prefixes": list(settings.mcp.prefixes())}
        if settings.deny_commands is not None:
            policy_settings["deny_commands"] = settings.deny_commands
        system.start(
            GatekeeperActor,
            [Binding(subjects.gatekeeper, ToolProposal, queue="gatekeeper", reach="both")],
            app=self.app,
            policy=DenyLists.from_settings(policy_settings),
            pipeline=self.pipeline,
            clock=self.clock,
            provider=self.provider,
            tier2=settings.tier2,
            canaries=self.canaries,
            containment=self._containment(),
        )
        self.coordinator = system.start(
            InteractionCoordinatorActor,
            [Binding(subjects.interactions, InteractionMessage, reach="both")],
            app=self.app,
            clock=self.clock,
            ids=self.ids,
            timeout=settings.approval_timeout,
            approvers=settings.approvers,
        )
        self.router = system.start(
            NotificationRouterActor,
            [
                Binding(subjects.all_streams, StreamDelta, reach="process"),
                Binding(subjects.router, WatchSession),
                Binding(subjects.notices, NoticesPlanned, reach="both"),
            ],
            app=self.app,
            outbox=self.outbox,
            catch_up=self.outbox_follower.catch_up,
            history_through=self.notices_before,
            settings=settings.notifications,
            clock=self.clock,
        )
        self._router_ticker = _Ticker([self.router], period=min(
            1.0, settings.notifications.debounce / 2 or 1.0))
        self._stack.append(self._router_ticker.stop)
        self.manager = system.start(
            SessionManagerActor,
            [
                Binding(subjects.inbox, UserMessage, queue="engine"),
                # Connectors' inboxes: the subject names the sender (see the manager).
                Binding(subjects.principal_inboxes, UserMessage, queue="engine"),
                Binding(subjects.manager, ManagerMessage, queue="engine"),
                # Connectors' manager requests: the subject names the sender too.
                Binding(subjects.principal_managers, ManagerMessage, queue="engine"),
            ],
            app=self.app,
            spawn=self.spawn_session,
            list_sessions=self.list_sessions,
            summary=self.view.summary,
            ids=self.ids,
            default_workspace=settings.workspace,
            gate=Gate(settings.middleware),
            clock=self.clock,
            redactor=self.redactor,
            limits=SessionLimits(max_sessions=settings.max_sessions,
                                 resumable=settings.resumable_sessions,
                                 budget_usd=settings.budget_usd,
                                 mask_secrets=settings.mask_secrets_in_messages,
                                 approvers=settings.approvers),
        )
        self._stack.append(self._kill_all)
        if self.serve_http and settings.http_port:
            self.http = HttpApi(
                self.bus, self.subjects, token=load_token(settings.state_dir),
                user=settings.http_user or getpass.getuser(), host=settings.http_host,
                port=settings.http_port,
                metrics=registry_with(MetricsCollector(self.metrics.snapshot), self.relay),
                metrics_open=settings.http_metrics_open,
                allowed_hosts=settings.http_allowed_hosts,
                cors_origins=settings.http_cors_origins).start()
            self._stack.append(self.http.stop)
        self._ticker = _Ticker([self.coordinator, self.manager])
        self._stack.append(self._ticker.stop)

    def _outbox_baseline(self, head: int) -> Callable[[Outbox], None]:
        """A new outbox over a log that already has events (a store from before the
        outbox, or its file removed): what was planned up to now is history, not news."""
        def check(outbox: Outbox) -> None:
            self.notices_before = head if outbox.position() == 0 else 0
        return check

    def _outbox_advanced(self) -> None:
        router = getattr(self, "router", None)
        if router is not None:
            with contextlib.suppress(pykka.ActorDeadError):  # stopping
                router.tell(OutboxAdvanced())

    def _kill_all(self) -> None:
        """At shutdown every active session is killed (it resumes on its next message)."""
        self.manager.ref.ask(KillAll("the engine shut down"), timeout=10)

    def session_config(self) -> SessionConfig:
        """How sessions of this host call the model."""
        return SessionConfig(
            model=self.settings.model,
            round_limit=self.settings.round_limit,
            max_tokens=self.settings.max_tokens,
            ask_timeout=self.settings.ask_timeout,
            verdict_timeout=self.settings.ask_timeout + (
                self.settings.tier2.timeout if self.settings.tier2.enabled else 0.0),
            workspace_root=self.settings.workspace,
            mode=self.settings.mode,
            titles=self.settings.titles,
            context_window=self.settings.context_window,
            idle_timeout=self.settings.idle_timeout,
            safety_net=self.settings.safety_net,
            auto_approve=list(self.settings.auto_approve),
            approvers=self.settings.approvers,
        )

    def spawn_session(self, session_id: str, new: NewSession | None) -> list[ActorHandle]:
        """Start a session's TTSR monitor, then the session itself (recovered if stored)."""
        system, subjects = self.system, self.subjects
        if new is not None:
            workspace = new.workspace
        else:
            stored = self.app.session(session_id)
            workspace = stored.workspace if stored is not None else self.settings.workspace
        monitor = system.start(
            TtsrMonitorActor,
            [
                Binding(subjects.stream(session_id), StreamDelta, reach="process"),
                Binding(subjects.ttsr(session_id), BarrierCheck, reach="both"),
            ],
            session_id=session_id,
            app=self.app,
            folders=self.rule_folders(workspace),
            settings=self.settings.ttsr,
            redact=self.redactor.text,
        )
        session = system.start(
            SessionActor,
            [Binding(subjects.session(session_id), SessionMessage, reach="both")],
            session_id=session_id,
            app=self.app,
            provider=self.provider,
            tools=self.tools,
            config=self.session_config(),
            new=new,
            redactor=self.redactor,
            snapshots=self.snapshots,
            clock=self.clock,
        )
        return [monitor, session]

    def rule_folders(self, workspace: str) -> list[tuple[str, str]]:
        """Where the TTSR rules of a session in ``workspace`` come from, first wins."""
        return rule_folders(workspace, self.settings.rules_dir, user_rules_dir())

    def rules_for(self, workspace: str) -> list[Rule]:
        """The TTSR rules a session in ``workspace`` runs with."""
        return load_rules(self.rule_folders(workspace)).rules

    def list_sessions(self) -> list[Any]:
        """The session view, caught up with the log first."""
        self.view_follower.catch_up()
        return self.view.summaries()

    def _record_failure(self, process: str, actor: str, error: str, restarted: bool) -> None:
        self.app.record_actor_failure(process, actor, error, restarted)

    def _close_provider(self) -> None:
        aclose = getattr(self.provider, "aclose", None)
        if aclose is not None:
            self.bus.call(aclose, timeout=5)

    def stop(self) -> None:
        """Stop everything that was started, newest first; never raises."""
        while self._stack:
            step = self._stack.pop()
            try:
                step()
            except Exception:
                log.exception("stopping %s failed", step)
