"""Built-in tools against real files in a temporary workspace and real subprocesses."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from actors.ports import ToolExecutor, ToolOutput
from adapters.tools import BuiltinTools


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("top secret\n")
    return secret


@pytest.fixture
def tools() -> BuiltinTools:
    return BuiltinTools(timeout=5)


def test_is_a_tool_executor(tools: BuiltinTools, ws: Path) -> None:
    executor: ToolExecutor = tools
    assert executor.execute("list_dir", {}, str(ws)) == ToolOutput(". is empty")


# --- definitions --------------------------------------------------------------------------


def test_definitions_in_messages_api_format(tools: BuiltinTools) -> None:
    definitions = tools.definitions()
    assert [d["name"] for d in definitions] == ["read_file", "write_file", "list_dir", "run_shell"]
    for definition in definitions:
        assert set(definition) == {"name", "description", "input_schema"}
        assert definition["description"]
        assert definition["input_schema"]["type"] == "object"
    by_name = {d["name"]: d for d in definitions}
    assert by_name["write_file"]["input_schema"]["required"] == ["path", "content"]
    assert by_name["run_shell"]["input_schema"]["required"] == ["command"]
    # a caller changing its copy does not change the next one
    definitions[0]["name"] = "changed"
    assert tools.definitions()[0]["name"] == "read_file"


# --- write_file / read_file ---------------------------------------------------------------


def test_write_then_read(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("write_file", {"path": "deep/er/hello.txt", "content": "héllo\n"}, str(ws))
    assert out == ToolOutput("wrote 7 bytes to deep/er/hello.txt")
    assert (ws / "deep" / "er" / "hello.txt").read_text(encoding="utf-8") == "héllo\n"
    read = tools.execute("read_file", {"path": "deep/er/hello.txt"}, str(ws))
    assert read == ToolOutput("héllo\n")


def test_write_overwrites(tools: BuiltinTools, ws: Path) -> None:
    (ws / "a.txt").write_text("old content")
    tools.execute("write_file", {"path": "a.txt", "content": "new"}, str(ws))
    assert (ws / "a.txt").read_text() == "new"


def test_read_offset_and_limit(tools: BuiltinTools, ws: Path) -> None:
    (ws / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = tools.execute("read_file", {"path": "lines.txt", "offset": 2, "limit": 3}, str(ws))
    assert out == ToolOutput("line 3\nline 4\nline 5\n")
    tail = tools.execute("read_file", {"path": "lines.txt", "offset": 8}, str(ws))
    assert tail.content == "line 9\nline 10\n"
    past = tools.execute("read_file", {"path": "lines.txt", "offset": 50}, str(ws))
    assert past.content == "[offset 50 is past the end of the file (10 lines)]"


def test_read_truncates_with_note(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"{i:04d}\n" for i in range(1000)))  # 5000 chars
    out = BuiltinTools(max_read_chars=12).execute("read_file", {"path": "big.txt"}, str(ws))
    assert not out.is_error
    assert out.content.startswith("0000\n0001\n00")
    assert "[truncated: output capped at 12 characters; showed lines 1-3 of 1000" in out.content
    assert "Use offset and limit to read the rest.]" in out.content


def test_read_missing_file(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("read_file", {"path": "nope.txt"}, str(ws))
    assert out == ToolOutput("file not found: nope.txt", is_error=True)


def test_read_folder_is_an_error(tools: BuiltinTools, ws: Path) -> None:
    (ws / "sub").mkdir()
    out = tools.execute("read_file", {"path": "sub"}, str(ws))
    assert out.is_error
    assert out.content == "sub is a folder, not a file; use list_dir"


# --- confinement --------------------------------------------------------------------------


def test_absolute_path_outside_refused(tools: BuiltinTools, ws: Path, outside: Path) -> None:
    out = tools.execute("read_file", {"path": str(outside)}, str(ws))
    assert out == ToolOutput(
        f"refused: path {outside} is outside the workspace {ws}", is_error=True
    )


def test_dotdot_escape_refused(tools: BuiltinTools, ws: Path, outside: Path) -> None:
    out = tools.execute("write_file", {"path": "../outside/planted.txt", "content": "x"}, str(ws))
    assert out.is_error
    assert out.content.startswith("refused: path ../outside/planted.txt is outside")
    assert not (outside.parent / "planted.txt").exists()
    listing = tools.execute("list_dir", {"path": ".."}, str(ws))
    assert listing.is_error and "outside the workspace" in listing.content


def test_symlink_escape_refused(tools: BuiltinTools, ws: Path, outside: Path) -> None:
    os.symlink(outside, ws / "innocent.txt")
    os.symlink(outside.parent, ws / "dir")
    read = tools.execute("read_file", {"path": "innocent.txt"}, str(ws))
    assert read.is_error and "refused" in read.content
    assert "top secret" not in read.content
    write = tools.execute("write_file", {"path": "dir/planted.txt", "content": "x"}, str(ws))
    assert write.is_error and "refused" in write.content
    assert not (outside.parent / "planted.txt").exists()
    overwrite = tools.execute("write_file", {"path": "innocent.txt", "content": "x"}, str(ws))
    assert overwrite.is_error
    assert outside.read_text() == "top secret\n"


def test_bad_workspace(tools: BuiltinTools, tmp_path: Path) -> None:
    out = tools.execute("list_dir", {}, "relative")
    assert out == ToolOutput("workspace 'relative' is not an absolute path", is_error=True)
    missing = tools.execute("list_dir", {}, str(tmp_path / "gone"))
    assert missing == ToolOutput(f"workspace {tmp_path / 'gone'} does not exist", is_error=True)


# --- list_dir -----------------------------------------------------------------------------


def test_list_dir_sorted_with_folder_slashes(tools: BuiltinTools, ws: Path) -> None:
    (ws / "b.txt").write_text("")
    (ws / "a_dir").mkdir()
    (ws / "c").mkdir()
    (ws / "a_dir" / "inner.py").write_text("")
    assert tools.execute("list_dir", {}, str(ws)) == ToolOutput("a_dir/\nb.txt\nc/")
    assert tools.execute("list_dir", {"path": "a_dir"}, str(ws)) == ToolOutput("inner.py")
    assert tools.execute("list_dir", {"path": "c"}, str(ws)) == ToolOutput("c is empty")


def test_list_dir_errors(tools: BuiltinTools, ws: Path) -> None:
    (ws / "f.txt").write_text("")
    assert tools.execute("list_dir", {"path": "nope"}, str(ws)) == ToolOutput(
        "folder not found: nope", is_error=True
    )
    assert tools.execute("list_dir", {"path": "f.txt"}, str(ws)) == ToolOutput(
        "f.txt is a file, not a folder; use read_file", is_error=True
    )


# --- input validation ---------------------------------------------------------------------


def test_unknown_tool(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("delete_everything", {}, str(ws))
    assert out.is_error
    assert out.content == (
        "unknown tool 'delete_everything'; available tools: "
        "list_dir, read_file, run_shell, write_file"
    )


@pytest.mark.parametrize(
    ("name", "tool_input", "expected"),
    [
        ("read_file", {}, "invalid input for read_file: Object missing required field `path`"),
        (
            "read_file",
            {"path": "a", "offset": "3"},
            "invalid input for read_file: Expected `int`, got `str` - at `$.offset`",
        ),
        (
            "read_file",
            {"path": "a", "limit": 0},
            "invalid input for read_file: Expected `int` >= 1 - at `$.limit`",
        ),
        (
            "write_file",
            {"path": "a", "content": 42},
            "invalid input for write_file: Expected `str`, got `int` - at `$.content`",
        ),
        (
            "run_shell",
            {"command": "ls", "sudo": True},
            "invalid input for run_shell: Object contains unknown field `sudo`",
        ),
    ],
)
def test_bad_input_gives_clear_message(
    tools: BuiltinTools, ws: Path, name: str, tool_input: dict[str, object], expected: str
) -> None:
    assert tools.execute(name, tool_input, str(ws)) == ToolOutput(expected, is_error=True)


# --- run_shell ----------------------------------------------------------------------------


def test_shell_runs_in_workspace_with_combined_output(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("run_shell", {"command": "pwd; echo oops >&2; echo made > f.txt"}, str(ws))
    assert out == ToolOutput(f"exit code: 0\n{os.path.realpath(ws)}\noops\n")
    assert (ws / "f.txt").read_text() == "made\n"


def test_shell_nonzero_exit(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("run_shell", {"command": "echo failing; exit 3"}, str(ws))
    assert out == ToolOutput("exit code: 3\nfailing\n", is_error=True)


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (absent, or a zombie waiting to be reaped)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def test_shell_timeout_kills_process_group(ws: Path) -> None:
    started = time.monotonic()
    out = BuiltinTools(timeout=0.5).execute(
        "run_shell",
        {"command": "echo started; sleep 30 & echo $! > bg.pid; sleep 30"},
        str(ws),
    )
    assert time.monotonic() - started < 10
    assert out.is_error
    assert out.content == ("command timed out after 0.5 s; its process group was killed\nstarted\n")
    assert _gone(int((ws / "bg.pid").read_text()))


def test_shell_background_child_holding_output_is_killed(ws: Path) -> None:
    out = BuiltinTools(timeout=0.5).execute(
        "run_shell", {"command": "echo hi; sleep 30 &"}, str(ws)
    )
    assert out.is_error
    assert out.content.startswith("command timed out after 0.5 s; its process group was killed")


def test_shell_output_is_capped(ws: Path) -> None:
    out = BuiltinTools(max_output_chars=100).execute(
        "run_shell", {"command": "seq 1 100000"}, str(ws)
    )
    assert out.content.startswith("exit code: 0\n1\n2\n3\n")
    assert "bytes of output omitted ...]" in out.content
    assert out.content.endswith("99999\n100000\n")
    assert len(out.content) < 300


def test_shell_empty_command(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("run_shell", {"command": "  "}, str(ws))
    assert out == ToolOutput("run_shell needs a non-empty command", is_error=True)


def test_shell_killed_by_signal(tools: BuiltinTools, ws: Path) -> None:
    out = tools.execute("run_shell", {"command": "kill -TERM $$"}, str(ws))
    assert out.is_error
    assert out.content.startswith("exit code: -15 (killed by signal SIGTERM)")


def test_shell_env_is_configurable(ws: Path) -> None:
    out = BuiltinTools(env={"PATH": os.environ["PATH"], "GREETING": "bonjour"}).execute(
        "run_shell", {"command": 'echo "$GREETING"'}, str(ws)
    )
    assert out == ToolOutput("exit code: 0\nbonjour\n")


def test_invalid_settings() -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        BuiltinTools(timeout=0)
