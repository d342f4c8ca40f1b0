"""MCP servers as tool groups: the project's own server (tests/mcp_server.py) run for real
over stdio and streamable HTTP, stdio servers inside the real sandbox (or refused without
one), the gatekeeper's verdicts on MCP tools, the ``[mcp]`` settings, and sessions of a
real engine that load an MCP group and call its tools through the gatekeeper."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import Listener, need_sandbox, say, wait_until
from tests.mcp_server import LONG_NAME
from tether.actors.gatekeeper.actor import judge
from tether.actors.gatekeeper.deny_lists import DenyLists, action_hash
from tether.actors.gatekeeper.security import PipelineConfig, parse_policy
from tether.actors.gatekeeper.security.action import ReadOnlyTools
from tether.actors.ports import ToolOutput
from tether.adapters.config import (
    ConfigError,
    McpServer,
    McpSettings,
    load_settings,
    render_settings,
)
from tether.adapters.host import Host, known_secrets
from tether.adapters.mcp_tools import McpTools, WithMcpTools, hashed_name, name_tools, tool_name
from tether.adapters.mcp_tools.naming import not_json
from tether.adapters.sandbox import Placeholders, Sandbox, probe
from tether.adapters.tools import BuiltinTools
from tether.adapters.tools.shell import Unconfined
from tether.events.messages import ToolProposal
from tether.projections.audit_index import AuditEntry

pytestmark = pytest.mark.slow  # starts MCP servers as processes

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


#: No sandbox, by the settings' choice (``sandbox = "off"``): stdio servers run plainly.
PLAIN = Unconfined(True, 'sandbox = "off" in the settings')


def stdio_server(*options: str, cwd: Path = REPO, env: dict[str, str] | None = None,
                 **fields: Any) -> McpServer:
    """The test server (with command line ``options``), started by the manager as a
    process of its own in ``cwd`` (it finds its module through ``PYTHONPATH``)."""
    return McpServer(command=sys.executable, args=["-m", "tests.mcp_server", *options],
                     cwd=str(cwd), env={"PYTHONPATH": str(REPO), **(env or {})}, **fields)


def home_entries() -> list[str]:
    """What the test server needs that the sandbox may hide (the home, /tmp): this
    repository, as an absolute ``sandbox_home`` entry (the sandbox shows the engine's
    Python itself)."""
    return [str(REPO)]


def real_sandbox(tmp_path: Path, *protected: str) -> Sandbox:
    """The real bubblewrap sandbox (skipped where it is absent, failed in CI)."""
    report = need_sandbox()
    return Sandbox(report.bwrap, report.prlimit, protected=protected,
                   home_visible=home_entries(),
                   placeholders=Placeholders(str(tmp_path / "ledger.json")))


def engine_sandbox() -> dict[str, Any]:
    """Settings for engine tests: the real sandbox, showing what the test server needs
    from the home; turned off only where bubblewrap is not usable outside CI."""
    if os.environ.get("CI") or probe().usable:
        return {"sandbox_home": [".gitconfig", *home_entries()]}
    return {"sandbox": "off"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HttpServer:
    """The test server over streamable HTTP, in a process this test starts and kills."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> HttpServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_server", "--http", str(self.port)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._listening, f"the MCP test server on port {self.port}")
        return self

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer(free_port())
    yield server
    server.kill()


@pytest.fixture
def start_mcp(tmp_path: Path) -> Iterator[Callable[..., McpTools]]:
    """Start an MCP manager for these servers (stopped after the test)."""
    managers: list[McpTools] = []

    def start(call_timeout: float = 10.0, options: dict[str, Any] | None = None,
              sandbox: Sandbox | Unconfined = PLAIN, **servers: McpServer) -> McpTools:
        settings = McpSettings(servers=servers, call_timeout=call_timeout, connect_timeout=10)
        manager = McpTools(settings, sandbox=sandbox, log_dir=str(tmp_path / "mcp-logs"),
                           **(options or {})).start()
        managers.append(manager)
        manager.wait_ready()
        return manager

    yield start
    for manager in managers:
        manager.stop()


def call(manager: McpTools, tool: str, **arguments: Any) -> ToolOutput:
    return manager.execute(tool, arguments, "/nowhere")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --- tools, groups and calls -------------------------------------------------------------


def test_tools_and_groups_are_namespaced_by_server(start_mcp: Callable[..., McpTools]) -> None:
    manager = start_mcp(alpha=stdio_server(), beta=stdio_server(trust="read"))
    groups = manager.groups()
    assert set(groups) == {"mcp_alpha", "mcp_beta"}
    assert groups["mcp_alpha"].startswith("tools of the MCP server alpha (alpha__add, ")
    alpha = manager.definitions(["mcp_alpha"])
    assert {d["name"] for d in alpha} == {
        "alpha__add", "alpha__echo", "alpha__fail", "alpha__slow", "alpha__pid",
        "alpha__getenv", "alpha__write", "alpha__connect", "alpha__pixel",
        "alpha__word_count"}  # word.count made valid
    add = next(d for d in alpha if d["name"] == "alpha__add")
    assert add["description"] == "Add two integers."
    assert add["input_schema"]["type"] == "object"
    assert set(add["input_schema"]["required"]) == {"a", "b"}
    assert len(manager.definitions()) == 20 and manager.definitions("nothing") == []
    assert manager.group_of("beta__echo") == "mcp_beta"
    assert manager.group_of("beta__missing") is None and manager.group_of("read_file") is None
    assert tool_name("s", "a.b/c") == "s__a_b_c" and tool_name("s", "") is None


def test_exact_names_win_and_long_names_are_shortened(
    start_mcp: Callable[..., McpTools], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tether.adapters.mcp_tools")
    manager = start_mcp(odd=stdio_server("--awkward"))
    tools = {d["name"]: d["description"] for d in manager.definitions()}
    # a.b is listed first, yet the real a_b keeps its name; a.b gets a hashed one.
    assert tools["odd__a_b"] == "The tool named a_b."
    dotted = hashed_name("odd__a_b", "a.b")
    assert re.fullmatch(r"odd__a_b_[0-9a-f]{8}", dotted) and tools[dotted] == "The tool named a.b."
    assert call(manager, dotted) == ToolOutput("a.b", False)
    assert call(manager, "odd__a_b") == ToolOutput("a_b", False)
    # 70 characters: cut to 64 with a hash of the server's own name, not left out.
    (long,) = [name for name in tools if name.startswith("odd__long_")]
    assert len(long) == 64 and long == tool_name("odd", LONG_NAME)
    assert re.fullmatch(r"odd__long_x+_[0-9a-f]{8}", long)
    assert call(manager, long) == ToolOutput("long", False)
    logged = caplog.text
    assert f"tool 'a.b' is offered as {dotted}" in logged
    assert f"tool '{LONG_NAME}' is offered as {long}" in logged
    assert "left out" not in logged


def test_a_tool_whose_schema_json_cannot_carry_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server may write a schema's number as Infinity or NaN: not JSON, but the MCP
    client parses it (as here, from a reply's text). No request could define that tool
    (the provider's encoder would send null, the SDK's refused the call), so it is left
    out and the log says where; the server's other tools stay."""
    from mcp import types

    caplog.set_level(logging.WARNING, logger="tether.adapters.mcp_tools")
    listed = [types.Tool.model_validate_json(raw) for raw in (
        '{"name": "bounded", "inputSchema": {"type": "object", "properties": '
        '{"n": {"type": "number", "maximum": Infinity}}}}',
        '{"name": "odd", "inputSchema": {"type": "object", "properties": '
        '{"n": {"enum": [1, NaN]}}}}',
        '{"name": "fine", "inputSchema": {"type": "object", "properties": '
        '{"n": {"type": "number", "maximum": 1e308, "minimum": -0.0}}}}',
    )]
    assert list(name_tools("srv", listed)) == ["srv__fine"]
    assert ("MCP server srv: tool 'bounded' is left out: its "
            "inputSchema['properties']['n']['maximum'] is not a number JSON can carry"
            in caplog.text)
    assert "tool 'odd' is left out: its inputSchema['properties']['n']['enum'][1] is" in caplog.text
    assert "'fine'" not in caplog.text
    assert not_json([{"a": (1.5, -1e308)}, "inf", None], "x") is None
    assert not_json([{"a": (1.5, float("-inf"))}], "x") == "x[0]['a'][1]"


def test_a_result_that_breaks_its_output_schema_says_the_tool_ran(
    start_mcp: Callable[..., McpTools],
) -> None:
    manager = start_mcp(odd=stdio_server("--awkward"))
    result = call(manager, "odd__mistyped")
    assert result.is_error
    assert result.content.startswith(
        "odd__mistyped ran, but its structured content does not match its output schema: "
        "'three' is not of type 'integer'; it is not run again by itself.")
    assert result.content.endswith("What it returned:\ncounted three")


def test_calls_over_stdio(start_mcp: Callable[..., McpTools],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TEST_SECRET_TOKEN", "must-not-leak")
    manager = start_mcp(demo=stdio_server(env={"GREETING": "hello"}))
    assert call(manager, "demo__add", a=2, b=3) == ToolOutput("5", False)
    assert call(manager, "demo__word_count", text="one two three") == ToolOutput("3", False)
    failed = call(manager, "demo__fail", message="no luck")
    assert failed.is_error and "no luck" in failed.content
    assert call(manager, "demo__pixel").content.startswith("[image block: image/png, about ")
    unknown = call(manager, "demo__nope")
    assert unknown.is_error and "has no tool 'demo__nope'" in unknown.content
    # Only the configured variables (and a minimal environment) reach the server.
    assert call(manager, "demo__getenv", name="GREETING").content == "hello"
    assert call(manager, "demo__getenv", name="TETHER_TEST_SECRET_TOKEN").content == "(unset)"


def test_calls_over_http_and_the_server_going_away(
    start_mcp: Callable[..., McpTools], http_server: HttpServer,
) -> None:
    http_server.start()
    manager = start_mcp(web=McpServer(url=http_server.url, headers={"X-Tether": "test"}))
    assert call(manager, "web__add", a=20, b=22) == ToolOutput("42", False)

    # Nothing listens: the connection is refused, so the call certainly was not sent; it
    # is tried once more on a new connection, which is refused too.
    http_server.kill()
    gone = call(manager, "web__add", a=1, b=1)
    assert gone.is_error and gone.content.startswith(
        "web__add was not run: MCP server web is unavailable (ConnectError: ")
    still = call(manager, "web__echo", text="anyone?")
    assert still.is_error and "was not run: MCP server web is unavailable" in still.content
    assert "web__add" in manager.definitions(["mcp_web"])[0]["name"]  # still offered

    http_server.start()
    assert call(manager, "web__echo", text="back") == ToolOutput("back", False)
    assert manager.status()["web"].connects == 2

    # Restarted between two calls: the server no longer knows the session and refuses
    # the call unrun (HTTP 404), so it is sent again on a new session.
    http_server.kill()
    http_server.start()
    assert call(manager, "web__add", a=2, b=2) == ToolOutput("4", False)
    assert manager.status()["web"].connects == 3


def test_a_server_killed_mid_call_fails_that_call_and_the_next_one_works(
    start_mcp: Callable[..., McpTools], tmp_path: Path,
) -> None:
    manager = start_mcp(demo=stdio_server())
    pid = int(call(manager, "demo__pid").content)
    started = tmp_path / "started"
    results: list[ToolOutput] = []
    runner = threading.Thread(target=lambda: results.append(
        call(manager, "demo__slow", seconds=30, started=str(started))))
    runner.start()
    wait_until(started.exists, "the slow call to reach the server")
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=10)
    (lost,) = results
    assert lost.is_error and "connection to MCP server demo was lost during demo__slow" in (
        lost.content)
    assert "may or may not have run" in lost.content and "not run again" in lost.content

    again = call(manager, "demo__pid")
    assert not again.is_error and int(again.content) != pid
    assert manager.status()["demo"].connects == 2


def test_an_http_server_killed_mid_call_fails_that_call_and_the_next_one_reconnects(
    start_mcp: Callable[..., McpTools], http_server: HttpServer, tmp_path: Path,
) -> None:
    http_server.start()
    manager = start_mcp(call_timeout=60, options={"ping_interval": 0.2},
                        web=McpServer(url=http_server.url))
    pid = int(call(manager, "web__pid").content)
    started = tmp_path / "started"
    results: list[ToolOutput] = []
    runner = threading.Thread(target=lambda: results.append(
        call(manager, "web__slow", seconds=60, started=str(started))))
    runner.start()
    wait_until(started.exists, "the slow call to reach the server")
    assert http_server.process is not None and http_server.process.pid == pid
    http_server.kill()
    runner.join(timeout=20)  # not the 60 s of call_timeout: a ping finds the server gone
    (lost,) = results
    assert lost.is_error and "connection to MCP server web was lost during web__slow" in (
        lost.content)
    assert "may or may not have run" in lost.content and "not run again" in lost.content
    assert not manager.status()["web"].connected

    http_server.start()
    again = call(manager, "web__pid")
    assert not again.is_error and int(again.content) != pid
    assert manager.status()["web"].connects == 2


@pytest.mark.parametrize(("stable_after", "doubling"), [(30.0, True), (0.0, False)])
def test_a_server_that_crashes_after_connecting_is_retried_ever_more_slowly(
    start_mcp: Callable[..., McpTools], tmp_path: Path, caplog: pytest.LogCaptureFixture,
    stable_after: float, doubling: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="tether.adapters.mcp_tools")
    starts = tmp_path / "starts"
    manager = start_mcp(options={"retry_first": 0.05, "stable_after": stable_after},
                        flaky=stdio_server("--exit-after-list", "--starts", str(starts)))

    def started() -> int:
        return len(starts.read_text().split()) if starts.exists() else 0

    wait_until(lambda: started() >= 4, "the server to be started four times", timeout=30)
    delays = [float(d) for d in re.findall(r"MCP server flaky: the connection was lost after "
                                           r"[0-9.]+ s \(.*?\); reconnecting in ([0-9.]+) s",
                                           caplog.text)]
    # Each connection worked (the tools were listed), but none stayed up for stable_after.
    assert manager.status()["flaky"].connects >= 3 and len(delays) >= 3
    assert delays[:3] == ([0.05, 0.1, 0.2] if doubling else [0.05, 0.05, 0.05])


def test_a_server_killed_while_idle_is_reconnected(start_mcp: Callable[..., McpTools]) -> None:
    manager = start_mcp(demo=stdio_server())
    pid = int(call(manager, "demo__pid").content)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not manager.status()["demo"].connected, "the loss to be noticed")
    assert call(manager, "demo__add", a=1, b=2) == ToolOutput("3", False)  # never sent before


def test_a_call_that_takes_too_long_gets_an_error_and_is_cancelled(
    start_mcp: Callable[..., McpTools], tmp_path: Path,
) -> None:
    manager = start_mcp(call_timeout=0.3, demo=stdio_server())
    cancelled = tmp_path / "cancelled"
    slow = call(manager, "demo__slow", seconds=30, cancelled=str(cancelled))
    assert slow.is_error and "did not answer within 0.3 s" in slow.content
    wait_until(cancelled.exists, "the server to get the cancellation")  # not the 30 s
    assert call(manager, "demo__add", a=1, b=1) == ToolOutput("2", False)  # still connected


def test_servers_down_at_startup_are_left_out_then_retried(
    start_mcp: Callable[..., McpTools], http_server: HttpServer,
) -> None:
    manager = start_mcp(broken=McpServer(command=str(REPO / "no-such-server")),
                        web=McpServer(url=http_server.url))
    assert manager.groups() == {} and manager.definitions() == []
    status = manager.status()
    assert "FileNotFoundError" in status["broken"].error and status["web"].error
    broken = call(manager, "broken__anything")
    assert broken.is_error and "broken__anything was not run: MCP server broken is " \
        "unavailable (FileNotFoundError" in broken.content

    http_server.start()  # the server comes up later: the next call connects
    assert call(manager, "web__add", a=1, b=1) == ToolOutput("2", False)
    assert set(manager.groups()) == {"mcp_web"}


def test_stop_ends_the_server_processes(tmp_path: Path) -> None:
    manager = McpTools(McpSettings(servers={"demo": stdio_server()}), sandbox=PLAIN).start()
    manager.wait_ready()
    pid = int(call(manager, "demo__pid").content)
    manager.stop()
    wait_until(lambda: not alive(pid), "the server process to end")
    closed = call(manager, "demo__add", a=1, b=1)
    assert closed.is_error and "connections are closed" in closed.content


def test_builtin_and_mcp_tools_share_one_executor(start_mcp: Callable[..., McpTools],
                                                   workspace: Path) -> None:
    tools = WithMcpTools(BuiltinTools(), start_mcp(demo=stdio_server()))
    assert {"files", "shell", "mcp_demo"} <= set(tools.groups())
    assert tools.group_of("read_file") == "files" and tools.group_of("demo__add") == "mcp_demo"
    names = [d["name"] for d in tools.definitions(["files", "mcp_demo", "mcp_gone"])]
    assert names[:4] == ["read_file", "write_file", "edit_file", "list_dir"]
    assert "demo__add" in names and "run_shell" not in names
    assert len(tools.definitions()) == len(BuiltinTools().definitions()) + 10
    (workspace / "a.txt").write_text("hi\n")
    assert tools.execute("read_file", {"path": "a.txt"}, str(workspace)).content.startswith("hi")
    assert tools.execute("demo__add", {"a": 1, "b": 1}, str(workspace)).content == "2"


# --- the sandbox -------------------------------------------------------------------------


def server_processes(marker: str) -> list[int]:
    """The processes whose command line mentions ``marker`` (bwrap, prlimit's program)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def beating(path: Path) -> bool:
    """Whether the server of ``--beat path`` still rewrites it (it does every 50 ms)."""
    before = path.read_text() if path.exists() else ""
    time.sleep(0.3)
    return path.exists() and path.read_text() != before


def test_a_stdio_server_is_contained_by_the_sandbox(
    start_mcp: Callable[..., McpTools], tmp_path: Path,
) -> None:
    box = real_sandbox(tmp_path, "AGENTS.md", "SOUL.md")
    folder = tmp_path / "server"
    folder.mkdir()
    (folder / "AGENTS.md").write_text("agents\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("original\n")
    listener = Listener()
    try:
        manager = start_mcp(sandbox=box, box=stdio_server(cwd=folder),
                            net=stdio_server(cwd=folder, network=True),
                            ro=stdio_server(cwd=folder, writable=False))

        def write(server: str, path: Path | str, text: str = "changed\n") -> str:
            return call(manager, f"{server}__write", path=str(path), text=text).content

        # Its tools work, and its folder is writable (by relative path too).
        assert call(manager, "box__add", a=2, b=3) == ToolOutput("5", False)
        assert write("box", folder / "made.txt", "made\n") == "wrote"
        assert write("box", "relative.txt") == "wrote"
        assert (folder / "made.txt").read_text() == "made\n"
        assert (folder / "relative.txt").read_text() == "changed\n"
        # Outside its folder: a hidden private folder, or the read-only file system.
        write("box", outside)
        assert outside.read_text() == "original\n"
        assert "Read-only file system" in write("box", "/etc/tether-mcp-sandbox-test")
        assert not os.path.exists("/etc/tether-mcp-sandbox-test")
        # Protected files in its folder: read-only; an absent one cannot be created.
        assert "Errno" in write("box", "AGENTS.md")
        assert (folder / "AGENTS.md").read_text() == "agents\n"
        assert "Errno" in write("box", folder / "SOUL.md")
        assert (folder / "SOUL.md").read_text() == ""  # its placeholder, while servers run
        # writable = false: its folder is read-only too.
        assert "Read-only file system" in write("ro", "ro.txt")
        assert not (folder / "ro.txt").exists()
        # No network but its own loopback, unless network = true.
        refused = call(manager, "box__connect", port=listener.port).content
        assert refused.startswith("ConnectionRefusedError") and listener.connections == 0
        assert call(manager, "net__connect", port=listener.port).content == "connected"
        wait_until(lambda: b"hello from the MCP server" in listener.received,
                   "the line to reach the listener")
        assert listener.connections == 1
        # The environment: the minimal one plus the server's env, nothing of the engine's.
        assert call(manager, "box__getenv", name="PYTHONPATH").content == str(REPO)
        manager.stop()
        assert not (folder / "SOUL.md").exists()  # the placeholder goes with the servers
    finally:
        listener.close()
        if os.path.exists("/etc/tether-mcp-sandbox-test"):
            os.remove("/etc/tether-mcp-sandbox-test")


def test_stopping_the_manager_ends_the_sandboxed_server(tmp_path: Path) -> None:
    box = real_sandbox(tmp_path)
    beat = tmp_path / "server" / "beat"
    beat.parent.mkdir()
    manager = McpTools(McpSettings(servers={"demo": stdio_server(
        "--beat", str(beat), cwd=beat.parent)}), sandbox=box).start()
    manager.wait_ready()
    assert call(manager, "demo__add", a=1, b=1) == ToolOutput("2", False)
    assert beating(beat) and server_processes(str(beat))
    manager.stop()
    wait_until(lambda: not server_processes(str(beat)), "the sandbox's processes to end")
    assert not beating(beat)


KILLED_ENGINE = """
import os, sys, time
from tether.adapters.config import McpSettings
from tether.adapters.mcp_tools import McpTools
from tether.adapters.sandbox import Sandbox, probe
from tests.adapters.test_mcp_tools import home_entries, stdio_server

beat = os.environ["BEAT"]
report = probe()
box = Sandbox(report.bwrap, report.prlimit, home_visible=home_entries())
server = stdio_server("--beat", beat, cwd=os.path.dirname(beat))
manager = McpTools(McpSettings(servers={"demo": server}), sandbox=box).start()
manager.wait_ready()
print(manager.execute("demo__echo", {"text": "ready"}, "/").content, flush=True)
time.sleep(60)
"""


def test_a_killed_engine_leaves_no_sandboxed_server(tmp_path: Path) -> None:
    need_sandbox()
    beat = tmp_path / "server" / "beat"
    beat.parent.mkdir()
    engine = subprocess.Popen([sys.executable, "-c", KILLED_ENGINE], cwd=REPO,
                              env={**os.environ, "BEAT": str(beat)},
                              stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout is not None and engine.stdout.readline() == "ready\n"
        assert beating(beat) and server_processes(str(beat))
        os.kill(engine.pid, signal.SIGKILL)  # no clean-up of its own: --die-with-parent
        engine.wait(timeout=10)
        wait_until(lambda: not server_processes(str(beat)), "the sandbox's processes to end")
        assert not beating(beat)
    finally:
        engine.kill()
        engine.wait(timeout=10)


def test_without_a_sandbox_stdio_servers_are_not_started(
    start_mcp: Callable[..., McpTools], http_server: HttpServer, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tether.adapters.mcp_tools")
    http_server.start()
    starts = tmp_path / "starts"
    missing = Unconfined(False, "bubblewrap (bwrap) is not on the PATH")
    manager = start_mcp(sandbox=missing, local=stdio_server("--starts", str(starts)),
                        web=McpServer(url=http_server.url))
    refused = call(manager, "local__add", a=1, b=2)
    line = ("MCP server local is not started: a local server runs only inside the sandbox, "
            "and there is none: bubblewrap (bwrap) is not on the PATH")
    assert refused == ToolOutput(f"local__add was not run: {line}", True)
    assert line in caplog.text
    assert manager.status()["local"].error.startswith("a local server runs only")
    assert not starts.exists()  # never started, not even tried
    # HTTP servers are not processes of Tether's: they work as before.
    assert call(manager, "web__add", a=1, b=2) == ToolOutput("3", False)
    assert set(manager.groups()) == {"mcp_web"}
    # A manager given no sandbox refuses too (fail closed).
    default = McpTools(McpSettings(servers={"local": stdio_server()})).start()
    try:
        assert "there is none: no sandbox was configured" in call(default, "local__pid").content
    finally:
        default.stop()


# --- the gatekeeper ----------------------------------------------------------------------


def proposal(tool: str, tool_input: dict[str, Any], workspace: Path,
             mode: str = "default") -> ToolProposal:
    return ToolProposal(session_id="s", call_id="c", tool=tool, input=tool_input,
                        workspace=str(workspace), action_hash=action_hash(tool, tool_input),
                        mode=mode)  # type: ignore[arg-type]


def test_the_gatekeeper_asks_a_person_unless_trusted_or_allowed(tmp_path: Path) -> None:
    mcp = McpSettings(servers={"demo": stdio_server(), "docs": stdio_server(trust="read")})
    lists = DenyLists.from_settings({"known_prefixes": list(mcp.prefixes())})
    cfg = PipelineConfig(home=str(tmp_path / "home"), read_only_tools=mcp.read_only_prefixes())

    asked = judge(proposal("demo__add", {"a": 1, "b": 2}, tmp_path), lists, cfg, NOW)
    assert (asked.decision, asked.tier, asked.required_tier) == ("escalate", "escalation", 3)
    assert "demo__add is a tool Tether does not model" in asked.reason
    assert asked.reason.endswith("it needs approval by a person (tier 3)")

    read = judge(proposal("docs__echo", {"text": "x"}, tmp_path), lists, cfg, NOW)
    assert (read.decision, read.tier) == ("allow", "tier1")
    outside = judge(proposal("docs__echo", {"path": "/etc/passwd"}, tmp_path), lists, cfg, NOW)
    assert (outside.decision, outside.tier) == ("deny", "protection")
    planning = judge(proposal("docs__echo", {"text": "x"}, tmp_path, "plan"), lists, cfg, NOW)
    assert planning.decision == "allow"  # a read: fine while planning
    plan_ask = judge(proposal("demo__add", {"a": 1}, tmp_path, "plan"), lists, cfg, NOW)
    assert plan_ask.decision == "deny" and plan_ask.tier == "mode"

    stranger = judge(proposal("other__add", {}, tmp_path), lists, cfg, NOW)
    assert (stranger.decision, stranger.tier) == ("deny", "policy")
    denied = judge(proposal("demo__add", {}, tmp_path),
                   DenyLists.from_settings({"known_prefixes": ["demo__"],
                                         "deny_tools": ["demo__add"]}), cfg, NOW)
    assert denied.decision == "deny" and "denied by policy" in denied.reason

    allowing = parse_policy("version: 1\nrules:\n  - tool: 'demo__*'\n    verdict: allow\n")
    allowed = judge(proposal("demo__add", {"a": 1}, tmp_path), lists,
                    PipelineConfig(policy=allowing, home=str(tmp_path)), NOW)
    assert (allowed.decision, allowed.tier) == ("allow", "tier0")


def test_relative_paths_of_a_read_server_are_judged_where_the_server_resolves_them(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "docs").mkdir(parents=True)
    mcp = McpSettings(servers={
        "etc": McpServer(command="srv", cwd="/etc", trust="read"),
        "local": McpServer(command="srv", cwd=str(workspace / "docs"), trust="read"),
        "here": McpServer(command="srv", trust="read"),
        "web": McpServer(url="http://127.0.0.1:1/mcp", trust="read"),
        "ask": McpServer(command="srv")})
    manager = McpTools(mcp)  # not started: what the gatekeeper is told needs no server
    assert manager.read_only_tools() == (
        ReadOnlyTools("etc__", "/etc"), ReadOnlyTools("local__", str(workspace / "docs")),
        ReadOnlyTools("here__", os.getcwd()), ReadOnlyTools("web__", None))
    lists = DenyLists.from_settings({"known_prefixes": list(mcp.prefixes())})
    cfg = PipelineConfig(home=str(tmp_path / "home"), read_only_tools=manager.read_only_tools())

    def verdict(tool: str, path: str) -> tuple[str, str]:
        decided = judge(proposal(tool, {"path": path}, workspace), lists, cfg, NOW)
        return decided.decision, decided.tier

    # The server reads /etc/shadow, not <workspace>/shadow.
    shadow = judge(proposal("etc__read_file", {"path": "shadow"}, workspace), lists, cfg, NOW)
    assert (shadow.decision, shadow.tier) == ("deny", "protection")
    assert "/etc/shadow" in shadow.reason and "outside the workspace" in shadow.reason
    # A server working inside the workspace: relative paths from its folder.
    assert verdict("local__read", "guide.md") == ("allow", "tier1")
    assert verdict("local__read", "../notes.md") == ("allow", "tier1")
    assert verdict("local__read", "../../outside.md")[0] == "deny"
    # No cwd: the folder the manager starts it in (here the test's current folder).
    assert verdict("here__read", "x.md")[0] == "deny"
    # An HTTP server: where a relative path leads is unknown, so a person decides;
    # absolute paths are judged as before.
    unknown = judge(proposal("web__read", {"path": "guide.md"}, workspace), lists, cfg, NOW)
    assert (unknown.decision, unknown.tier, unknown.required_tier) == (
        "escalate", "escalation", 3)
    assert verdict("web__read", str(workspace / "guide.md")) == ("allow", "tier1")
    assert verdict("web__read", "/etc/passwd") == ("deny", "protection")
    assert judge(proposal("web__search", {"query": "x"}, workspace), lists, cfg,
                 NOW).decision == "allow"
    # A plain prefix (no folder known) is treated like the HTTP server.
    plain = PipelineConfig(home=str(tmp_path / "home"), read_only_tools=("etc__",))
    assert judge(proposal("etc__read_file", {"path": "shadow"}, workspace), lists, plain,
                 NOW).decision == "escalate"


# --- settings ------------------------------------------------------------------------------


def test_the_mcp_table(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text(
        '[mcp]\ncall_timeout = 20\n'
        '[mcp.servers.github]\ncommand = "npx"\nargs = ["-y", "server-github"]\n'
        'env = { GITHUB_TOKEN = "ghp_very_secret_token_1234" }\ncwd = "tools"\n'
        '[mcp.servers.docs]\nurl = "https://docs.example/mcp"\ntrust = "read"\n'
        'headers = { Authorization = "Bearer abcdefghijklmnopqrstuv" }\n')
    settings = load_settings(env={}, cwd=str(tmp_path))
    github, docs = settings.mcp.servers["github"], settings.mcp.servers["docs"]
    assert (github.transport, github.cwd, github.trust) == ("stdio", str(tmp_path / "tools"), "ask")
    assert (docs.transport, docs.trust, settings.mcp.call_timeout) == ("http", "read", 20.0)
    assert settings.mcp.prefixes() == ("github__", "docs__")
    assert settings.mcp.read_only_prefixes() == ("docs__",)
    shown = render_settings(settings)
    assert "github (stdio npx -y server-github; trust ask; GITHUB_TOKEN=ghp_…(masked))" in shown
    assert "ghp_very" not in shown and "abcdefgh" not in shown
    secrets = known_secrets(settings)
    assert "ghp_very_secret_token_1234" in secrets and "abcdefghijklmnopqrstuv" in secrets


@pytest.mark.parametrize(("table", "message"), [
    ('[mcp.servers."my server"]\ncommand = "x"\n', "the server name 'my server' must be"),
    ('[mcp.servers.a__b]\ncommand = "x"\n', "the server name 'a__b' must be"),
    ("[mcp.servers.a]\n", "mcp.servers.a: give exactly one of command"),
    ('[mcp.servers.a]\ncommand = "x"\nurl = "http://h/mcp"\n', "not both"),
    ('[mcp.servers.a]\nurl = "ftp://h/mcp"\n', "url must be an http:// or https:// URL"),
    ('[mcp.servers.a]\nurl = "http://h/mcp"\nargs = ["-v"]\n', "are for command servers"),
    ('[mcp.servers.a]\ncommand = "x"\nheaders = { A = "b" }\n', "headers are for url"),
    ('[mcp.servers.a]\ncommand = "x"\ntrust = "all"\n', "Invalid enum value 'all'"),
    ('[mcp.servers.a]\ncommand = "x"\nport = 1\n', "unknown field port"),
])
def test_a_bad_mcp_table_names_the_server(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "tether.toml").write_text(table)
    with pytest.raises(ConfigError, match=r"^tether\.toml: mcp") as error:
        load_settings(env={}, cwd=str(tmp_path))
    assert message in str(error.value)


# --- a session -----------------------------------------------------------------------------


def test_a_session_loads_an_mcp_group_and_a_person_approves_the_call(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], workspace: Path,
) -> None:
    host, _, llm = engine("""
responses:
  - match: "add them"
    blocks:
      - tool_use: {name: load_tools, input: {groups: [mcp_demo]}}
  - match: "loaded mcp_demo"
    blocks:
      - tool_use: {name: demo__add, input: {a: 20, b: 22}}
  - match: "42"
    blocks: [{text: "The sum is 42."}]
""", mcp=McpSettings(servers={"demo": stdio_server(cwd=workspace)}), **engine_sandbox())
    assert host.mcp is not None and host.mcp.sandbox is host.sandbox  # stdio servers in it
    channel = watch_channel(host, "test")
    sid = say(host, "add them up")
    asked = channel.wait_for("approval").text
    assert "demo__add" in asked and "a person (tier 3)" in asked
    say(host, f"/approve {asked.split()[1].rstrip(':')}", sid)
    channel.wait_for("completed")

    assert "mcp_demo" in str(llm.requests[0]["tools"])  # offered by load_tools
    assert "demo__add" in {t["name"] for t in llm.requests[-1]["tools"]}
    events = host.app.session_events(sid)
    loaded = [(e.groups, e.reason) for e in events if type(e).__name__ == "ToolsLoaded"]
    assert loaded == [(["mcp_demo"], "load_tools")]
    decided = [(e.decision, e.tier) for e in events
               if type(e).__name__ == "ToolCallDecided" and e.tier != "engine"]
    assert decided == [("escalate", "escalation"), ("allow", "human")]
    executed = [(e.output, e.is_error) for e in events
                if type(e).__name__ == "ToolCallExecuted" and e.tool == "demo__add"]
    assert executed == [("42", False)]
    (entry,) = audited(host, sid, "demo__add")
    assert (entry.verdict, entry.tier, entry.outcome, entry.approver) == (
        "allow", "human", "executed", "user")
    assert entry.input_summary == '{"a": 20, "b": 22}' and entry.user == "user"


def audited(host: Host, sid: str, tool: str) -> list[AuditEntry]:
    """The audit index's entries for ``tool`` in session ``sid``, once the index has
    caught up with the log (it follows it in the background, a batch at a time, so a
    call can still read as running there after the turn's end was told)."""
    host.audit_follower.catch_up()
    return host.audit.query(session=sid, tool=tool)


def test_a_read_server_call_runs_without_approval(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], workspace: Path,
) -> None:
    host, _, _ = engine("""
responses:
  - match: "add them"
    blocks:
      - tool_use: {name: load_tools, input: {groups: [mcp_docs]}}
  - match: "loaded mcp_docs"
    blocks:
      - tool_use: {name: docs__add, input: {a: 1, b: 2}}
  - match: "3"
    blocks: [{text: "The sum is 3."}]
""", mcp=McpSettings(servers={"docs": stdio_server(cwd=workspace, trust="read")}),
                        **engine_sandbox())
    channel = watch_channel(host, "test")
    sid = say(host, "add them up")
    channel.wait_for("completed")
    assert [m for m in channel.seen if m.kind == "approval"] == []
    events = host.app.session_events(sid)
    decided = [(e.decision, e.tier) for e in events
               if type(e).__name__ == "ToolCallDecided" and e.tier != "engine"]
    assert decided == [("allow", "tier1")]
    executed = [(e.output, e.is_error) for e in events
                if type(e).__name__ == "ToolCallExecuted" and e.tool == "docs__add"]
    assert executed == [("3", False)]
    (entry,) = audited(host, sid, "docs__add")
    assert (entry.verdict, entry.tier, entry.outcome, entry.approver) == (
        "allow", "tier1", "executed", "tier1")


def test_the_engine_starts_with_an_mcp_server_that_cannot_start(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], workspace: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tether.adapters.mcp_tools")
    (workspace / "notes.txt").write_text("built-in tools still work\n")
    host, _, llm = engine("""
responses:
  - match: "read the notes"
    blocks:
      - tool_use: {name: read_file, input: {path: notes.txt}}
  - match: "still work"
    blocks: [{text: "Done."}]
""", mcp=McpSettings(servers={"broken": McpServer(command=str(REPO / "no-such-server"))},
                     connect_timeout=5), **engine_sandbox())
    assert "MCP server broken is unavailable: FileNotFoundError" in caplog.text
    channel = watch_channel(host, "test")
    sid = say(host, "read the notes")
    channel.wait_for("completed")
    executed = [(e.tool, e.is_error) for e in host.app.session_events(sid)
                if type(e).__name__ == "ToolCallExecuted"]
    assert executed == [("read_file", False)]
    assert "built-in tools still work" in str(llm.requests[-1]["messages"])
    assert "mcp_broken" not in str(llm.requests[0]["tools"])  # never listed: not offered
