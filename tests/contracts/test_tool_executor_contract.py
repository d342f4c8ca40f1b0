"""The tool executor port (:class:`actors.ports.ToolExecutor`), as every implementation must
keep it: the built-in tools alone, and with an MCP server's tools behind one executor
(``WithMcpTools``: ``McpTools`` alone is a part of it, not an executor).

:class:`ToolExecutorContract` is abstract; each subclass opens one executor.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.test_mcp_tools import PLAIN, stdio_server
from tether.actors.ports import Grant, ToolExecutor
from tether.adapters.config import McpSettings
from tether.adapters.mcp_tools import McpTools, WithMcpTools
from tether.adapters.tools import BuiltinTools

pytestmark = pytest.mark.slow  # the MCP executors start a server process


class ToolExecutorContract:
    """Schemas the model can use, groups that agree with them, and failures that come
    back as error outputs, never as exceptions."""

    @pytest.fixture
    def tools(self) -> ToolExecutor:
        raise NotImplementedError

    def test_every_definition_is_a_tool_the_model_can_call(self, tools: ToolExecutor) -> None:
        definitions = tools.definitions()
        names = [d["name"] for d in definitions]
        assert names and len(names) == len(set(names))
        for definition in definitions:
            assert set(definition) >= {"name", "description", "input_schema"}
            assert definition["description"].strip(), definition["name"]
            assert definition["input_schema"]["type"] == "object"

    def test_groups_partition_the_definitions(self, tools: ToolExecutor) -> None:
        groups = tools.groups()
        everything = {d["name"] for d in tools.definitions()}
        if not groups:
            return
        by_group = {g: {d["name"] for d in tools.definitions([g])} for g in groups}
        assert set().union(*by_group.values()) == everything
        for group, names in by_group.items():
            assert all(tools.group_of(name) == group for name in names)
        assert tools.group_of("no_such_tool") is None

    def test_failures_come_back_as_error_outputs(self, tools: ToolExecutor,
                                                 tmp_path: Path) -> None:
        unknown = tools.execute("no_such_tool", {}, str(tmp_path), Grant())
        assert unknown.is_error and "no_such_tool" in unknown.content
        for definition in tools.definitions():
            schema = definition["input_schema"]
            if schema.get("required"):  # an input its schema refuses is refused
                out = tools.execute(definition["name"], {}, str(tmp_path), Grant())
                assert out.is_error, definition["name"]
            if schema.get("additionalProperties") is False:
                out = tools.execute(definition["name"], {"no_such_field": [1]},
                                    str(tmp_path), Grant())
                assert out.is_error, definition["name"]

    def test_a_sandbox_profile_is_known_before_a_call_runs(self, tools: ToolExecutor) -> None:
        for definition in tools.definitions():
            tools.sandbox_profile(definition["name"], Grant())  # answers, never raises


class TestBuiltinTools(ToolExecutorContract):
    @pytest.fixture
    def tools(self) -> ToolExecutor:
        return BuiltinTools()


def _mcp(tmp_path: Path) -> McpTools:
    settings = McpSettings(servers={"demo": stdio_server()}, call_timeout=10,
                           connect_timeout=10)
    manager = McpTools(settings, sandbox=PLAIN, log_dir=str(tmp_path / "mcp-logs")).start()
    manager.wait_ready()
    return manager


class TestBuiltinAndMcpTools(ToolExecutorContract):
    @pytest.fixture
    def tools(self, tmp_path: Path) -> Iterator[ToolExecutor]:
        manager = _mcp(tmp_path)
        yield WithMcpTools(BuiltinTools(), manager)
        manager.stop()
