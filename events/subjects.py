"""Every NATS subject Tether uses, built from one namespace prefix (default ``tether``).

Two deployments with different namespaces can share one NATS server without seeing each
other's traffic. Nothing else in the code spells a subject by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def check_token(value: str, what: str) -> str:
    """Return ``value`` if it is one valid subject token, else raise ValueError naming it."""
    if not _TOKEN.fullmatch(value):
        raise ValueError(f"{what} must be letters, digits, '_' or '-', got {value!r}")
    return value


@dataclass(frozen=True)
class Subjects:
    """Subject names for one namespace."""

    namespace: str = "tether"

    def __post_init__(self) -> None:
        check_token(self.namespace, "namespace")

    @property
    def inbox(self) -> str:
        """Engine-role publishers (in-process connectors: HTTP, Telegram) publish
        UserMessage here (queue group ``engine``); its ``user`` is trusted as given."""
        return f"{self.namespace}.inbox"

    def inbox_for(self, principal: str) -> str:
        """The inbox of one principal, ``<ns>.inbox.<principal>``: the only place a
        connector-role client may publish user messages. The manager replaces a message's
        ``user`` with the subject's last token (the principal NATS authenticated).
        Raises ValueError when ``principal`` is not one subject token."""
        return f"{self.namespace}.inbox.{check_token(principal, 'principal')}"

    @property
    def principal_inboxes(self) -> str:
        """Wildcard matching every principal's inbox (``<ns>.inbox.*``)."""
        return f"{self.namespace}.inbox.*"

    def principal_of(self, subject: str, kind: str = "inbox") -> str | None:
        """The principal whose inbox (``kind`` ``"manager"``: whose manager subject)
        ``subject`` is, or None when it is no principal's (the bare ``<ns>.inbox`` and
        ``<ns>.manager`` included)."""
        head = f"{self.namespace}.{kind}."
        if not subject.startswith(head):
            return None
        principal = subject[len(head):]
        return principal if _TOKEN.fullmatch(principal) else None

    def manager_for(self, principal: str) -> str:
        """The manager requests of one principal, ``<ns>.manager.<principal>``: the only
        manager subject a connector-role client may publish on. The manager answers them
        as that principal (its ``user`` fields replaced) and only for the sessions it may
        decide for."""
        return f"{self.namespace}.manager.{check_token(principal, 'principal')}"

    @property
    def principal_managers(self) -> str:
        """Wildcard matching every principal's manager subject (``<ns>.manager.*``)."""
        return f"{self.namespace}.manager.*"

    @property
    def manager(self) -> str:
        """SessionManager requests: list, kill."""
        return f"{self.namespace}.manager"

    @property
    def gatekeeper(self) -> str:
        """ToolProposal requests (queue group ``gatekeeper``)."""
        return f"{self.namespace}.gatekeeper"

    @property
    def interactions(self) -> str:
        """Approval requests and answers for the interaction coordinator."""
        return f"{self.namespace}.interactions"

    @property
    def deadletter(self) -> str:
        """Payloads an actor could not accept, with the reason."""
        return f"{self.namespace}.deadletter"

    def session(self, session_id: str) -> str:
        """Commands to one session actor."""
        return f"{self.namespace}.session.{check_token(session_id, 'session id')}"

    def stream(self, session_id: str) -> str:
        """Live deltas of one session (core NATS, not stored)."""
        return f"{self.session(session_id)}.stream"

    def generation(self, session_id: str) -> str:
        """Generation events of one session: provider request and response, nodes, done
        or error (core NATS, not stored)."""
        return f"{self.session(session_id)}.events"

    @property
    def all_streams(self) -> str:
        """Wildcard matching every session's stream."""
        return f"{self.namespace}.session.*.stream"

    def ttsr(self, session_id: str) -> str:
        """Barrier requests to one session's TTSR monitor."""
        return f"{self.namespace}.ttsr.{check_token(session_id, 'session id')}"

    @property
    def router(self) -> str:
        """Where connectors ask the notification router to watch a session."""
        return f"{self.namespace}.router"

    @property
    def notices(self) -> str:
        """Where sessions tell the router the notices of the events they just saved."""
        return f"{self.namespace}.notices"

    def channel_out(self, channel: str) -> str:
        """What a connector receives."""
        return f"{self.namespace}.channel.{check_token(channel, 'channel')}.out"

    def event(self, aggregate: str, aggregate_id: str, event: str) -> str:
        """One stored event as relayed to JetStream."""
        check_token(aggregate, "aggregate")
        check_token(aggregate_id, "aggregate id")
        check_token(event, "event")
        return f"{self.namespace}.evt.{aggregate}.{aggregate_id}.{event}"

    @property
    def all_events(self) -> str:
        """Wildcard over every relayed event (the JetStream stream's subjects)."""
        return f"{self.namespace}.evt.>"

    def session_events(self, session_id: str) -> str:
        """Wildcard over one session's relayed events."""
        return f"{self.namespace}.evt.session.{check_token(session_id, 'session id')}.*"

    @property
    def events_stream(self) -> str:
        """Name of the JetStream stream holding relayed events.

        ``TETHER_EVENTS`` for the default namespace; other namespaces get their own stream
        (a stream's subjects may not overlap another's on one server).
        """
        if self.namespace == "tether":
            return "TETHER_EVENTS"
        return "TETHER_EVENTS_" + self.namespace.upper().replace("-", "_")
