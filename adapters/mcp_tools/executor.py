"""The built-in tools and the MCP servers' groups as one ``ToolExecutor``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.actors.ports import Grant, ToolExecutor, ToolOutput
from tether.adapters.mcp_tools.manager import (
    McpTools,
)
from tether.events.sandbox import SandboxProfile


class WithMcpTools:
    """The built-in tools and the MCP servers' groups as one ``ToolExecutor``: tools named
    like an MCP server's go to :class:`McpTools`, everything else to ``builtin``."""

    def __init__(self, builtin: ToolExecutor, mcp: McpTools) -> None:
        self.builtin = builtin
        self.mcp = mcp

    def groups(self) -> dict[str, str]:
        """The built-in groups, then one per MCP server that has listed its tools."""
        return {**self.builtin.groups(), **self.mcp.groups()}

    def group_of(self, tool: str) -> str | None:
        """The group holding ``tool``, built-in or MCP."""
        if self.mcp.owns(tool):
            return self.mcp.group_of(tool)
        return self.builtin.group_of(tool)

    def definitions(self, groups: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The tools of ``groups`` (all when None): built-in ones first. A group nobody
        knows (an MCP server no longer configured) has no tools."""
        if groups is None:
            return self.builtin.definitions(None) + self.mcp.definitions(None)
        wanted = [groups] if isinstance(groups, str) else list(groups)
        builtin = [g for g in wanted if g in self.builtin.groups()]
        return ((self.builtin.definitions(builtin) if builtin else [])
                + self.mcp.definitions([g for g in wanted if g not in builtin]))

    def sandbox_profile(self, name: str, grant: Grant) -> SandboxProfile | None:
        """The built-in tool's containment; an MCP call runs in its server's process."""
        return None if self.mcp.owns(name) else self.builtin.sandbox_profile(name, grant)

    def execute(
        self, name: str, tool_input: dict[str, Any], workspace: str, grant: Grant | None = None
    ) -> ToolOutput:
        """Run the call on whichever executor holds ``name``; never raises."""
        if self.mcp.owns(name):
            return self.mcp.execute(name, tool_input, workspace)
        return self.builtin.execute(name, tool_input, workspace, grant)
