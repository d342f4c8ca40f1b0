"""The gatekeeper's pure decision logic: action hashes, workspace confinement, deny lists.

Nothing here touches NATS, threads or the event store; the only I/O is resolving paths on
the file system (``os.path.realpath``) so symlinks that point out of a workspace are seen.
The gatekeeper actor wraps :meth:`DenyLists.decide` and records each :class:`Decision`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from tether.actors.paths import inside

#: The built-in tools the gatekeeper knows; any other tool name is denied.
BUILTIN_TOOLS: frozenset[str] = frozenset({
    "read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "run_shell",
    "git_status", "git_diff", "current_date",
})

#: Tools whose ``path`` input must stay inside the workspace, with the default path if any.
PATH_TOOLS: Mapping[str, str | None] = {
    "read_file": None, "write_file": None, "edit_file": None, "list_dir": ".", "glob": ".",
    "grep": ".", "git_diff": ".",
}

#: Shell commands refused unless the settings replace this list (``re.search`` patterns).
DEFAULT_DENY_COMMANDS: tuple[str, ...] = (
    # rm -rf of the root, the home folder, or everything under them
    r"\brm\s+-[a-zA-Z]*(?:rf|fr)[a-zA-Z]*\s+(?:--no-preserve-root\s+)?(?:/|~/?|\$HOME/?)\*?(?:\s|;|&|$)",
    r"\bsudo\b",
    # piping a download straight into a shell
    r"\b(?:curl|wget)\b[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b",
    r"\bmkfs(?:\.\w+)?\b",
    # the classic fork bomb
    r":\(\)\s*\{",
    # raw writes to block devices
    r"\bdd\b[^|;]*\bof=/dev/(?:sd|nvme|hd|vd|xvd|mmcblk)",
    r">\s*/dev/(?:sd|nvme|hd|vd|xvd|mmcblk)",
)


def action_hash(tool: str, tool_input: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of ``{"type": tool, "payload": tool_input}``.

    Canonical means sorted keys, compact separators and UTF-8 text, so the same call hashes
    the same whatever order its keys arrived in; the executor re-checks it before running.
    """
    canonical = json.dumps(
        {"type": tool, "payload": tool_input},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def resolve_in_workspace(path: str, workspace: str) -> str | None:
    """The real path of ``path`` (relative paths are taken from ``workspace``), or None
    when it lies outside the workspace, whether by an absolute path, ``..`` or a symlink.

    Symlinks are followed for every component that exists; a path that does not exist yet
    (a file about to be written) resolves through its nearest existing parent.
    """
    try:
        root = os.path.realpath(workspace)
        resolved = os.path.realpath(os.path.join(root, path))
    except (OSError, ValueError):  # embedded NUL bytes, symlink loops on some platforms
        return None
    return resolved if inside(resolved, root) else None


class Decision(msgspec.Struct, frozen=True):
    """The gatekeeper's answer about one tool call.

    ``tier`` says which layer decided: ``protection`` (workspace confinement and malformed
    calls), ``policy`` (deny lists, unknown tools) or ``default`` (nothing objected).
    """

    decision: Literal["allow", "deny"]
    reason: str
    tier: str

    @property
    def allowed(self) -> bool:
        """True when the call may run."""
        return self.decision == "allow"


def _deny(reason: str, tier: str) -> Decision:
    return Decision(decision="deny", reason=reason, tier=tier)


@dataclass
class DenyLists:
    """Settings-driven tool policy: denied tools, denied shell-command patterns.

    ``deny_commands`` are regular expressions matched with ``re.search`` against the whole
    shell command; an invalid pattern raises ``ValueError`` naming it when the policy is
    built. ``known_tools`` lists the tools that may be proposed at all; a tool whose name
    starts with one of ``known_prefixes`` is known too (an MCP server's tools, named
    ``<server>__<tool>``: what they do is judged by the pipeline, not here).
    """

    deny_tools: list[str] = field(default_factory=list)
    deny_commands: list[str] = field(default_factory=lambda: list(DEFAULT_DENY_COMMANDS))
    known_tools: frozenset[str] = BUILTIN_TOOLS
    known_prefixes: tuple[str, ...] = ()
    _compiled: list[tuple[str, re.Pattern[str]]] = field(
        init=False, repr=False, default_factory=list
    )

    def __post_init__(self) -> None:
        compiled: list[tuple[str, re.Pattern[str]]] = []
        for pattern in self.deny_commands:
            if not isinstance(pattern, str):
                raise ValueError(f"deny_commands entry {pattern!r} is not a string")
            try:
                compiled.append((pattern, re.compile(pattern)))
            except re.error as err:
                raise ValueError(
                    f"deny_commands pattern {pattern!r} is not a valid regular expression: {err}"
                ) from err
        self._compiled = compiled

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> DenyLists:
        """Build a policy from a settings mapping with optional ``deny_tools``,
        ``deny_commands`` and ``known_prefixes`` lists; a missing ``deny_commands`` means
        :data:`DEFAULT_DENY_COMMANDS`, a given one replaces the defaults. Wrong types raise
        ``ValueError``."""
        deny_tools = _string_list(settings.get("deny_tools", []), "deny_tools")
        deny_commands = _string_list(
            settings.get("deny_commands", list(DEFAULT_DENY_COMMANDS)), "deny_commands"
        )
        prefixes = _string_list(settings.get("known_prefixes", []), "known_prefixes")
        return cls(deny_tools=deny_tools, deny_commands=deny_commands,
                   known_prefixes=tuple(p for p in prefixes if p))

    def decide(self, tool: str, tool_input: Mapping[str, Any], workspace: str) -> Decision:
        """Allow or deny one proposed tool call in ``workspace``, with a one-sentence reason.

        Order: unknown tool, denied tool, bad workspace, path outside the workspace (for the
        file tools), denied shell command; anything left is allowed by default.
        """
        if tool not in self.known_tools and not tool.startswith(self.known_prefixes):
            return _deny(f"tool {tool!r} is not a known tool", "policy")
        if tool in self.deny_tools:
            return _deny(f"tool {tool!r} is denied by policy", "policy")

        if not isinstance(workspace, str) or not workspace:
            return _deny("the session has no workspace", "protection")
        if not os.path.isabs(workspace):
            return _deny(f"workspace {workspace} is not an absolute path", "protection")
        if not os.path.isdir(workspace):
            return _deny(f"workspace {workspace} does not exist or is not a folder", "protection")

        if tool in PATH_TOOLS:
            path = tool_input.get("path", PATH_TOOLS[tool])
            if not isinstance(path, str):
                return _deny(f"{tool} needs a string 'path'", "protection")
            if resolve_in_workspace(path, workspace) is None:
                return _deny(_outside_reason(path, workspace), "protection")

        if tool == "run_shell":
            command = tool_input.get("command")
            if not isinstance(command, str):
                return _deny("run_shell needs a string 'command'", "protection")
            for pattern, regex in self._compiled:
                if regex.search(command):
                    return _deny(
                        f"command {command!r} matches the denied pattern `{pattern}`", "policy"
                    )

        return Decision(decision="allow", reason=f"{tool} is allowed by default", tier="default")


def _outside_reason(path: str, workspace: str) -> str:
    try:
        resolved = os.path.realpath(os.path.join(workspace, path))
    except (OSError, ValueError):
        return f"path {path!r} cannot be resolved inside the workspace {workspace}"
    if os.path.normpath(path) == resolved:
        return f"path {path} is outside the workspace {workspace}"
    return f"path {path} resolves to {resolved}, outside the workspace {workspace}"


def _string_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of strings, got {type(value).__name__}")
    bad = [item for item in value if not isinstance(item, str)]
    if bad:
        raise ValueError(f"{name} must be a list of strings; {bad[0]!r} is not a string")
    return list(value)
