"""How a session is configured, and what to record when it is created (plain records)."""

from __future__ import annotations

import msgspec

from tether.actors.model.context import DEFAULT_SYSTEM_PROMPT
from tether.events.messages import Mode
from tether.events.session import Turn


class SessionConfig(msgspec.Struct, kw_only=True):
    """How a session talks to the model."""

    model: str
    round_limit: int = 25
    max_tokens: int = 4096
    ask_timeout: float = 5.0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    verdict_timeout: float = 0.0
    """How long to wait for the gatekeeper (0: ask_timeout); longer when tier 2 reviews."""
    workspace_root: str = ""
    """The folder ``/dir`` may not leave (the engine's workspace); empty: the session's."""
    mode: Mode = "default"
    """The mode a new session starts in: default, plan or auto."""
    auto_approve: list[str] = msgspec.field(
        default_factory=lambda: ["write_file", "edit_file"])
    """Tools whose policy escalations ``auto`` mode approves (``/edit``)."""
    idle_timeout: float = 1800.0
    """Seconds a multi-turn session may wait for input before it is killed (0: never)."""
    safety_net: float = 15.0
    """Seconds without any activity mid-turn before the session says it waits (0: never)."""
    provider_retries: int = 3
    """Times a transient provider error (rate limit, overload, server error) is retried
    in one turn, after 1, 2, 4... seconds; each retry is recorded."""
    titles: bool = True
    """Name the session in the background once it has enough messages."""
    lazy_tools: bool = True
    """A session starts with only the load_tools meta-tool; groups load on demand."""
    context_window: int = 0
    """Tokens the model's window holds (0: the model table's figure); compaction keeps the
    history under 70% of what it leaves."""
    approvers: dict[str, list[str]] = {}
    """Per channel (or ``"*"``), who besides the owner may change the session's mode."""

    def auto_list(self, mode: str) -> list[str]:
        """The tools ``mode`` auto-approves: the configured list in auto mode, else none."""
        return list(self.auto_approve) if mode == "auto" else []


class ForkOf(msgspec.Struct, kw_only=True):
    """Where a forked session starts: a copy of ``source_id`` at event ``at_version``."""

    source_id: str
    at_version: int
    history: list[Turn]
    fired_rules: list[str]


class NewSession(msgspec.Struct, kw_only=True):
    """What to record if the session does not exist yet."""

    name: str
    workspace: str
    channel: str
    multi_turn: bool = True
    budget_usd: float = 0.0
    origin: str = ""
    owner: str = ""
    """The principal the session belongs to (:attr:`Session.owner`)."""
    fork: ForkOf | None = None
