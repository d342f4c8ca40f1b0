"""Built-in tools against real files in a temporary workspace and real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.helpers import need_sandbox
from tether.actors.ports import ToolExecutor, ToolOutput
from tether.adapters.sandbox import Sandbox
from tether.adapters.tools import TOOL_GROUP_DESCRIPTIONS, TOOL_GROUPS, TOOLS, BuiltinTools


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


def sandboxed(**options: Any) -> BuiltinTools:
    """Built-in tools whose shell and git commands run in the real sandbox."""
    report = need_sandbox()
    return BuiltinTools(sandbox=Sandbox(report.bwrap, report.prlimit), **options)


@pytest.fixture
def tools() -> BuiltinTools:
    return sandboxed(timeout=5)


def test_is_a_tool_executor(tools: BuiltinTools, ws: Path) -> None:
    executor: ToolExecutor = tools
    assert executor.execute("list_dir", {}, str(ws)) == ToolOutput(". is empty")


# --- definitions --------------------------------------------------------------------------


def test_definitions_in_messages_api_format(tools: BuiltinTools) -> None:
    definitions = tools.definitions()
    assert [d["name"] for d in definitions] == [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "run_shell",
        "glob",
        "grep",
        "git_status",
        "git_diff",
        "current_date",
    ]
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


def test_schemas_match_the_inputs(tools: BuiltinTools) -> None:
    # every tool has a schema naming exactly its input fields, the required ones required
    for definition in tools.definitions():
        input_type = tools._tools[definition["name"]][0]
        fields = msgspec.structs.fields(input_type)
        schema = definition["input_schema"]
        assert set(schema["properties"]) == {f.name for f in fields}, definition["name"]
        required = [f.name for f in fields if f.required]
        assert schema.get("required", []) == required, definition["name"]
        assert schema["additionalProperties"] is False
    assert {d["name"] for d in tools.definitions()} == set(tools._tools)


def test_every_tool_is_in_exactly_one_group(tools: BuiltinTools) -> None:
    grouped = [name for names in TOOL_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(tools._tools)
    assert list(TOOL_GROUPS) == ["files", "search", "shell", "git", "time"]
    assert set(TOOL_GROUP_DESCRIPTIONS) == set(TOOL_GROUPS)


def test_definitions_of_chosen_groups(tools: BuiltinTools) -> None:
    def names(groups: object) -> list[str]:
        return [d["name"] for d in tools.definitions(groups)]  # type: ignore[arg-type]

    assert names(["files"]) == ["read_file", "write_file", "edit_file", "list_dir"]
    assert names(["git", "search"]) == ["glob", "grep", "git_status", "git_diff"]
    assert names("time") == ["current_date"]  # a single name is one group
    assert names(("shell", "shell")) == ["run_shell"]
    assert names([]) == []
    assert tools.definitions(None) == tools.definitions()
    with pytest.raises(ValueError, match=r"unknown tool group 'web'; known groups: files, "):
        tools.definitions(["files", "web"])


def test_each_call_gets_its_own_copy_of_the_definitions(tools: BuiltinTools) -> None:
    first = json.loads(json.dumps(tools.definitions()[0]))  # as sent before any change
    for groups in (None, ["files"]):
        given = tools.definitions(groups)
        given[0]["input_schema"]["properties"].clear()  # a caller that changes its copy
        given[0]["name"] = "changed"
        assert tools.definitions(groups)[0] == first


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
        "unknown tool 'delete_everything'; available tools: current_date, edit_file, "
        "git_diff, git_status, glob, grep, list_dir, read_file, run_shell, write_file"
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


def test_shell_timeout_kills_process_group(ws: Path) -> None:
    started = time.monotonic()
    out = sandboxed(timeout=0.5).execute(
        "run_shell",
        {"command": "echo started; (while :; do echo x >> bg; sleep 0.05; done) & sleep 30"},
        str(ws),
    )
    assert time.monotonic() - started < 10
    assert out.is_error
    assert out.content == ("command timed out after 0.5 s; its processes were killed\nstarted\n")
    size = (ws / "bg").stat().st_size
    time.sleep(0.3)  # a writer left running would grow the file meanwhile
    assert (ws / "bg").stat().st_size == size


def test_shell_background_children_end_with_the_call(ws: Path) -> None:
    started = time.monotonic()
    out = sandboxed(timeout=20).execute(
        "run_shell", {"command": "echo hi; (sleep 0.5; echo late > late.txt) &"}, str(ws)
    )
    assert time.monotonic() - started < 10  # the output's holder did not outlive the call
    assert out == ToolOutput("exit code: 0\nhi\n")
    time.sleep(1)
    assert not (ws / "late.txt").exists()


def test_shell_output_is_capped(ws: Path) -> None:
    out = sandboxed(max_output_chars=100).execute(
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
    assert out.content.startswith("exit code: 143 (killed by signal SIGTERM)")


def test_shell_env_is_configurable(ws: Path) -> None:
    out = sandboxed(env={"PATH": os.environ["PATH"], "GREETING": "bonjour"}).execute(
        "run_shell", {"command": 'echo "$GREETING"'}, str(ws)
    )
    assert out == ToolOutput("exit code: 0\nbonjour\n")


# --- edit_file ----------------------------------------------------------------------------


def _edit(tools: BuiltinTools, ws: Path, **tool_input: object) -> ToolOutput:
    return tools.execute("edit_file", dict(tool_input), str(ws))


def test_edit_replaces_exactly_once_and_reports_lines(tools: BuiltinTools, ws: Path) -> None:
    (ws / "a.py").write_text("import os\n\ndef f():\n    return 1\n")
    out = _edit(
        tools, ws, path="a.py", old_text="    return 1\n", new_text="    x = 1\n    return x\n"
    )
    assert out == ToolOutput("edited a.py: 1 replacement: line 4 -> lines 4-5")
    assert (ws / "a.py").read_text() == "import os\n\ndef f():\n    x = 1\n    return x\n"


def test_edit_within_a_line_and_deleting(tools: BuiltinTools, ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo three\nfour\n")
    assert _edit(tools, ws, path="a.txt", old_text="three", new_text="3") == ToolOutput(
        "edited a.txt: 1 replacement: line 2 -> line 2"
    )
    out = _edit(tools, ws, path="a.txt", old_text="one\ntwo 3\n", new_text="")
    assert out == ToolOutput("edited a.txt: 1 replacement: lines 1-2 -> line 1")
    assert (ws / "a.txt").read_text() == "four\n"


def test_edit_refuses_ambiguous_text_and_says_how_often(tools: BuiltinTools, ws: Path) -> None:
    (ws / "a.txt").write_text("x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n")
    out = _edit(tools, ws, path="a.txt", old_text="x = 1", new_text="x = 9")
    assert out.is_error
    assert out.content == (
        "old_text occurs 3 times in a.txt (line 1, line 3, line 5); include more surrounding "
        "lines to make it unique, or set replace_all to replace every occurrence"
    )
    assert (ws / "a.txt").read_text() == "x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n"


def test_edit_replace_all(tools: BuiltinTools, ws: Path) -> None:
    (ws / "a.txt").write_text("x = 1\ny = 2\nx = 1\n")
    out = _edit(
        tools, ws, path="a.txt", old_text="x = 1\n", new_text="x = 1\n# again\n", replace_all=True
    )
    assert out == ToolOutput(
        "edited a.txt: 2 replacements: line 1 -> lines 1-2; line 3 -> lines 4-5"
    )
    assert (ws / "a.txt").read_text() == "x = 1\n# again\ny = 2\nx = 1\n# again\n"
    # replace_all with a single occurrence is fine too
    single = _edit(tools, ws, path="a.txt", old_text="y = 2", new_text="y = 3", replace_all=True)
    assert single == ToolOutput("edited a.txt: 1 replacement: line 3 -> line 3")


def test_edit_text_not_found(tools: BuiltinTools, ws: Path) -> None:
    (ws / "a.txt").write_text("    indented\n")
    out = _edit(tools, ws, path="a.txt", old_text="  indented", new_text="x")
    assert out.is_error is False  # a substring of the line: found
    out = _edit(tools, ws, path="a.txt", old_text="\tindented", new_text="x")
    assert out.is_error
    assert out.content.startswith("old_text was not found in a.txt; it must match the file")
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    crlf = _edit(tools, ws, path="crlf.txt", old_text="one\ntwo", new_text="x")
    assert crlf.is_error and "Windows (CRLF) line endings" in crlf.content
    ok = _edit(tools, ws, path="crlf.txt", old_text="one\r\ntwo", new_text="1\r\n2")
    assert not ok.is_error
    assert (ws / "crlf.txt").read_bytes() == b"1\r\n2\r\n"  # line endings kept


@pytest.mark.parametrize(
    ("tool_input", "expected"),
    [
        (
            {"path": "a.txt", "old_text": "", "new_text": "x"},
            "old_text is empty; give the exact text to replace (write_file replaces a whole file)",
        ),
        (
            {"path": "a.txt", "old_text": "abc", "new_text": "abc"},
            "old_text and new_text are the same; there is nothing to change",
        ),
        (
            {"path": "nope.txt", "old_text": "a", "new_text": "b"},
            "file not found: nope.txt; use write_file to create a file",
        ),
        ({"path": "sub", "old_text": "a", "new_text": "b"}, "sub is not a regular file"),
        (
            {"path": "a.txt", "old": "a", "new_text": "b"},
            "invalid input for edit_file: Object contains unknown field `old`",
        ),
        (
            {"path": "a.txt", "old_text": "a", "new_text": "b", "replace_all": "yes"},
            "invalid input for edit_file: Expected `bool`, got `str` - at `$.replace_all`",
        ),
    ],
)
def test_edit_errors(
    tools: BuiltinTools, ws: Path, tool_input: dict[str, object], expected: str
) -> None:
    (ws / "a.txt").write_text("abc\n")
    (ws / "sub").mkdir()
    assert tools.execute("edit_file", tool_input, str(ws)) == ToolOutput(expected, is_error=True)
    assert (ws / "a.txt").read_text() == "abc\n"


def test_edit_refuses_binary_files(tools: BuiltinTools, ws: Path) -> None:
    (ws / "blob.bin").write_bytes(b"\xff\xfe abc")
    out = _edit(tools, ws, path="blob.bin", old_text="abc", new_text="x")
    assert out.is_error
    assert out.content.startswith("blob.bin is not UTF-8 text (invalid start byte at byte 0)")
    assert (ws / "blob.bin").read_bytes() == b"\xff\xfe abc"


def test_edit_confined_to_the_workspace(tools: BuiltinTools, ws: Path, outside: Path) -> None:
    os.symlink(outside, ws / "innocent.txt")
    os.symlink(outside.parent, ws / "dir")
    for path in (str(outside), "../outside/secret.txt", "innocent.txt", "dir/secret.txt"):
        out = _edit(tools, ws, path=path, old_text="top secret", new_text="owned")
        assert out.is_error and out.content.startswith(f"refused: path {path} is outside"), path
    assert outside.read_text() == "top secret\n"


def test_edit_through_a_symlink_inside_edits_its_target(tools: BuiltinTools, ws: Path) -> None:
    (ws / "real.txt").write_text("a\n")
    os.symlink(ws / "real.txt", ws / "alias.txt")
    assert not _edit(tools, ws, path="alias.txt", old_text="a", new_text="b").is_error
    assert (ws / "real.txt").read_text() == "b\n"
    assert (ws / "alias.txt").is_symlink()


# --- glob -----------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Path) -> Path:
    for rel in (
        "b.py",
        "a.txt",
        "src/main.py",
        "src/pkg/util.py",
        "src/pkg/data.json",
        ".hidden.py",
    ):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(f"# {rel}\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config.py").write_text("in git\n")
    return ws


def _glob(tools: BuiltinTools, ws: Path, **tool_input: object) -> ToolOutput:
    return tools.execute("glob", dict(tool_input), str(ws))


def test_glob_matches_sorted_workspace_paths(tools: BuiltinTools, tree: Path) -> None:
    assert _glob(tools, tree, pattern="*.py") == ToolOutput(".hidden.py\nb.py")
    assert _glob(tools, tree, pattern="**/*.py") == ToolOutput(
        ".hidden.py\nb.py\nsrc/main.py\nsrc/pkg/util.py"
    )
    # the pattern is relative to path; results stay workspace-relative
    assert _glob(tools, tree, pattern="*.py", path="src/pkg") == ToolOutput("src/pkg/util.py")
    assert _glob(tools, tree, pattern="pkg/*.json", path="src") == ToolOutput("src/pkg/data.json")
    assert _glob(tools, tree, pattern="*.rs") == ToolOutput("no files match '*.rs' in .")
    assert _glob(tools, tree, pattern="**/*.json") == ToolOutput("src/pkg/data.json")


def test_glob_never_leaves_the_workspace(tools: BuiltinTools, ws: Path, outside: Path) -> None:
    (ws / "inside.txt").write_text("x")
    os.symlink(outside, ws / "leak.txt")  # file symlink out: not listed
    os.symlink(outside.parent, ws / "exit")  # folder symlink out: not entered
    os.symlink(ws / "inside.txt", ws / "alias.txt")  # symlink inside: listed
    assert _glob(tools, ws, pattern="**/*") == ToolOutput("alias.txt\ninside.txt")
    for pattern in ("../outside/*", "/etc/*", "~/*", "a/../../x"):
        out = _glob(tools, ws, pattern=pattern)
        assert out.is_error and out.content.startswith("refused: pattern"), pattern
    for path in ("..", "exit", str(outside.parent)):
        out = _glob(tools, ws, pattern="*", path=path)
        assert out.is_error and "outside the workspace" in out.content, path


def test_glob_errors(tools: BuiltinTools, tree: Path) -> None:
    assert _glob(tools, tree, pattern="*", path="b.py") == ToolOutput(
        "b.py is a file, not a folder; glob searches a folder", is_error=True
    )
    assert _glob(tools, tree, pattern="*", path="nope") == ToolOutput(
        "path not found: nope", is_error=True
    )
    assert _glob(tools, tree, pattern="") == ToolOutput(
        "pattern is empty; give a glob such as '**/*.py'", is_error=True
    )


def test_glob_caps_the_count_with_a_note(ws: Path) -> None:
    for i in range(5):
        (ws / f"f{i}.txt").write_text("")
    out = BuiltinTools(max_results=3).execute("glob", {"pattern": "*.txt"}, str(ws))
    assert out == ToolOutput(
        "f0.txt\nf1.txt\nf2.txt\n[showing the first 3 of 5 files, sorted by path; narrow the "
        "pattern or the path to see the rest]"
    )


# --- grep -----------------------------------------------------------------------------------


def _grep(tools: BuiltinTools, ws: Path, **tool_input: object) -> ToolOutput:
    return tools.execute("grep", dict(tool_input), str(ws))


def test_grep_lists_file_line_text(tools: BuiltinTools, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("def main():\n    return Main\n")
    (ws / "b.md").write_text("main points\r\nnothing\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("main\n")
    assert _grep(tools, ws, pattern=r"\bmain\b") == ToolOutput(
        "b.md:1:main points\nsrc/a.py:1:def main():"
    )
    assert _grep(tools, ws, pattern="main", ignore_case=True, glob="*.py") == ToolOutput(
        "src/a.py:1:def main():\nsrc/a.py:2:    return Main"
    )
    assert _grep(tools, ws, pattern="main", glob="src/*.py", path=".") == ToolOutput(
        "src/a.py:1:def main():"
    )
    assert _grep(tools, ws, pattern="return", path="src/a.py") == ToolOutput(
        "src/a.py:2:    return Main"
    )
    assert _grep(tools, ws, pattern="absent") == ToolOutput("no matches for 'absent' in .")


def test_grep_bad_regex_is_a_clear_error(tools: BuiltinTools, ws: Path) -> None:
    out = _grep(tools, ws, pattern="foo(")
    assert out.is_error
    assert out.content.startswith(
        "invalid regular expression 'foo(': missing ), unterminated subpattern at position 3"
    )


def test_grep_skips_binary_and_large_files(ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\x00\x00needle")
    (ws / "big.txt").write_text("needle\n" * 20)
    (ws / "small.txt").write_text("needle\n")
    out = BuiltinTools(max_grep_file_bytes=100).execute("grep", {"pattern": "needle"}, str(ws))
    assert out == ToolOutput(
        "small.txt:1:needle\n[skipped 1 binary file]\n"
        "[skipped 1 file larger than 100 bytes: big.txt]"
    )


def test_grep_does_not_read_credential_files_while_walking(tools: BuiltinTools, ws: Path) -> None:
    (ws / ".env").write_text("TOKEN=abc123\n")
    (ws / ".env.example").write_text("TOKEN=placeholder\n")
    out = _grep(tools, ws, pattern="TOKEN")
    assert out == ToolOutput(
        ".env.example:1:TOKEN=placeholder\n"
        "[skipped 1 credential file: .env; name one in 'path' to search it]"
    )
    # named explicitly, the gatekeeper sees the read: the tool then searches it
    assert _grep(tools, ws, pattern="TOKEN", path=".env") == ToolOutput(".env:1:TOKEN=abc123")


def test_grep_never_leaves_the_workspace(tools: BuiltinTools, ws: Path, outside: Path) -> None:
    (ws / "inside.txt").write_text("secret inside\n")
    os.symlink(outside, ws / "leak.txt")
    os.symlink(outside.parent, ws / "exit")
    out = _grep(tools, ws, pattern="secret")
    assert out == ToolOutput("inside.txt:1:secret inside")
    for path in ("leak.txt", "exit", "..", str(outside)):
        refused = _grep(tools, ws, pattern="secret", path=path)
        assert refused.is_error and "outside the workspace" in refused.content, path
        assert "top secret" not in refused.content
    glob_out = _grep(tools, ws, pattern="secret", glob="../outside/*")
    assert glob_out.is_error and glob_out.content.startswith("refused: glob")


def test_grep_caps_results(ws: Path) -> None:
    (ws / "a.txt").write_text("hit\n" * 10)
    (ws / "b.txt").write_text("hit\n")
    tools = BuiltinTools(max_results=5)
    out = tools.execute("grep", {"pattern": "hit", "max_results": 2}, str(ws))
    assert out == ToolOutput(
        "a.txt:1:hit\na.txt:2:hit\n[results capped at 2 matching lines; there are more: "
        "narrow the pattern, the path or the glob, or raise max_results (up to 5)]"
    )
    clamped = tools.execute("grep", {"pattern": "hit", "max_results": 1000}, str(ws))
    assert clamped.content.count("a.txt:") == 5 and "capped at 5" in clamped.content
    exact = tools.execute("grep", {"pattern": "hit", "path": "b.txt", "max_results": 1}, str(ws))
    assert exact == ToolOutput("b.txt:1:hit")  # exactly at the cap: no note


def test_grep_cuts_long_lines_and_caps_output(ws: Path) -> None:
    (ws / "long.txt").write_text("x" * 1000 + "\n")
    out = BuiltinTools().execute("grep", {"pattern": "x"}, str(ws))
    assert out == ToolOutput("long.txt:1:" + "x" * 400 + " [line cut]")
    (ws / "many.txt").write_text("y\n" * 100)
    small = BuiltinTools(max_output_chars=50).execute("grep", {"pattern": "y"}, str(ws))
    assert small.content.startswith("many.txt:1:y\nmany.txt:2:y\n")
    assert small.content.endswith(
        "[output capped at 50 characters; narrow the pattern, the path or the glob]"
    )


# --- git ------------------------------------------------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=ws,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


@pytest.fixture
def repo(ws: Path) -> Path:
    _git(ws, "init", "-q", "-b", "main")
    (ws / "a.txt").write_text("one\ntwo\n")
    _git(ws, "add", "a.txt")
    _git(ws, "commit", "-q", "-m", "init")
    return ws


@needs_git
def test_git_status(tools: BuiltinTools, repo: Path) -> None:
    assert tools.execute("git_status", {}, str(repo)) == ToolOutput(
        "## main\nnothing to commit, working tree clean"
    )
    (repo / "a.txt").write_text("one\nTWO\n")
    (repo / "new.txt").write_text("new\n")
    index = (repo / ".git" / "index").read_bytes()
    out = tools.execute("git_status", {}, str(repo))
    assert out == ToolOutput("## main\n M a.txt\n?? new.txt")
    assert (repo / ".git" / "index").read_bytes() == index  # read-only: no index refresh


@needs_git
def test_git_diff_unstaged_staged_and_by_path(tools: BuiltinTools, repo: Path) -> None:
    assert tools.execute("git_diff", {}, str(repo)) == ToolOutput(
        "no unstaged changes (untracked files never show here; see git_status)"
    )
    (repo / "a.txt").write_text("one\nTWO\n")
    (repo / "b.txt").write_text("b\n")
    out = tools.execute("git_diff", {}, str(repo))
    assert "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n" in out.content
    assert not out.is_error
    assert tools.execute("git_diff", {"staged": True}, str(repo)) == ToolOutput("no staged changes")
    _git(repo, "add", "a.txt", "b.txt")
    staged = tools.execute("git_diff", {"staged": True, "path": "b.txt"}, str(repo))
    assert "+++ b/b.txt\n@@ -0,0 +1 @@\n+b\n" in staged.content and "a.txt" not in staged.content
    assert tools.execute("git_diff", {"path": "b.txt"}, str(repo)) == ToolOutput(
        "no unstaged changes in b.txt (untracked files never show here; see git_status)"
    )


@needs_git
def test_git_pathspec_magic_is_taken_literally(tools: BuiltinTools, repo: Path) -> None:
    (repo / "a.txt").write_text("changed\n")
    out = tools.execute("git_diff", {"path": ":(top)a.txt"}, str(repo))
    assert out.content.startswith("no unstaged changes in :(top)a.txt")


@needs_git
def test_git_outside_a_repository(tools: BuiltinTools, ws: Path, tmp_path: Path) -> None:
    out = tools.execute("git_status", {}, str(ws))
    assert out.is_error
    assert out.content.startswith(
        f"the workspace {ws} is not a git repository (git looks only at the workspace itself, "
        "not the folders above it): fatal: not a git repository"
    )
    # a workspace below a repository's top does not see the repository above it
    _git(tmp_path, "init", "-q")
    nested = tools.execute("git_diff", {}, str(ws))
    assert nested.is_error and "is not a git repository" in nested.content


@needs_git
def test_git_diff_path_confined(tools: BuiltinTools, repo: Path, outside: Path) -> None:
    os.symlink(outside.parent, repo / "exit")
    for path in ("..", "exit", str(outside)):
        out = tools.execute("git_diff", {"path": path}, str(repo))
        assert out.is_error and "outside the workspace" in out.content, path


@needs_git
def test_git_refuses_a_work_tree_elsewhere(tools: BuiltinTools, repo: Path, outside: Path) -> None:
    _git(repo, "config", "core.worktree", str(outside.parent))
    out = tools.execute("git_status", {}, str(repo))
    assert out == ToolOutput(
        f"refused: the repository's work tree is {os.path.realpath(outside.parent)}, not the "
        f"workspace {repo}",
        is_error=True,
    )


@needs_git
def test_git_runs_nothing_the_repository_configures(
    tools: BuiltinTools, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    hook.chmod(0o755)
    (repo / ".gitattributes").write_text("*.txt filter=evil diff=evil\n")
    _git(repo, "config", "filter.evil.clean", str(hook))
    _git(repo, "config", "filter.evil.required", "true")
    _git(repo, "config", "diff.evil.textconv", str(hook))
    _git(repo, "config", "diff.external", str(hook))
    _git(repo, "config", "core.fsmonitor", str(hook))
    _git(repo, "config", "core.pager", str(hook))
    (repo / "a.txt").write_text("one\nchanged\n")
    status = tools.execute("git_status", {}, str(repo))
    diff = tools.execute("git_diff", {}, str(repo))
    assert not status.is_error and " M a.txt" in status.content
    assert not diff.is_error and "+changed" in diff.content
    assert not marker.exists()
    # the same repository does run them for a plain git diff: the test is not vacuous
    subprocess.run(["git", "diff"], cwd=repo, capture_output=True, check=False)
    assert marker.exists()


@needs_git
def test_git_ignores_inherited_git_variables(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    (repo / "a.txt").write_text("edited\n")
    env = {"PATH": os.environ["PATH"], "GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other)}
    out = sandboxed(env=env).execute("git_status", {}, str(repo))
    assert out == ToolOutput("## main\n M a.txt")


@needs_git
def test_git_output_is_capped(repo: Path) -> None:
    (repo / "a.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    out = sandboxed(max_output_chars=200).execute("git_diff", {}, str(repo))
    assert out.content.startswith("diff --git a/a.txt b/a.txt")
    assert "bytes of output omitted ...]" in out.content
    assert len(out.content) < 400


def test_git_status_takes_no_input(tools: BuiltinTools, ws: Path) -> None:
    assert tools.execute("git_status", {"path": "."}, str(ws)) == ToolOutput(
        "invalid input for git_status: Object contains unknown field `path`", is_error=True
    )


# --- current_date ---------------------------------------------------------------------------


def test_current_date_from_an_injected_clock(ws: Path) -> None:
    clock = lambda: datetime(2024, 5, 1, 22, 30, 15, 123456, tzinfo=UTC)  # noqa: E731
    zone = timezone(timedelta(hours=2), "CEST")
    out = BuiltinTools(clock=clock, local_zone=zone).execute("current_date", {}, str(ws))
    assert out == ToolOutput(
        "UTC: Wednesday 2024-05-01 22:30:15 (2024-05-01T22:30:15+00:00)\n"
        "local: Thursday 2024-05-02 00:30:15 CEST, UTC+02:00 (2024-05-02T00:30:15+02:00)"
    )


def test_current_date_naive_clock_is_utc(ws: Path) -> None:
    naive = BuiltinTools(clock=lambda: datetime(2024, 1, 2, 3, 4, 5), local_zone=UTC)
    out = naive.execute("current_date", {}, str(ws))
    assert out.content.startswith("UTC: Tuesday 2024-01-02 03:04:05 (2024-01-02T03:04:05+00:00)")
    assert out.content.endswith(
        "local: Tuesday 2024-01-02 03:04:05 UTC, UTC+00:00 (2024-01-02T03:04:05+00:00)"
    )


def test_current_date_default_clock(ws: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    out = BuiltinTools().execute("current_date", {}, str(ws))
    stamp = out.content.split("(", 1)[1].split(")", 1)[0]
    assert before <= datetime.fromisoformat(stamp) <= datetime.now(UTC)
    assert not out.is_error
    assert BuiltinTools().execute("current_date", {"tz": "UTC"}, str(ws)).is_error


def test_invalid_settings() -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        BuiltinTools(timeout=0)
    with pytest.raises(ValueError, match="max_results and max_grep_file_bytes"):
        BuiltinTools(max_results=0)


@pytest.fixture
def project(ws: Path) -> Path:
    """A project as a developer has one: a virtual environment, caches, build output."""
    files = {
        ".gitignore": ".venv/\n*.log\nbuild/\n!keep.log\n",
        "src/app.py": "needle = 1\n",
        "sub/.gitignore": "gen/\n",
        "sub/tool.py": "needle = 2\n",
        "sub/gen/made.py": "needle = 3\n",
        ".venv/lib/site.py": "needle = 4\n",
        ".cache/c.py": "needle = 5\n",  # a hidden folder nobody listed
        "build/out.py": "needle = 6\n",
        "app.log": "needle 7\n",
        "keep.log": "needle 8\n",
    }
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    return ws


def test_glob_and_grep_leave_out_what_gitignore_and_hidden_folders_hide(
        tools: BuiltinTools, project: Path) -> None:
    assert _glob(tools, project, pattern="**/*.py").content == "src/app.py\nsub/tool.py"
    found = tools.execute("grep", {"pattern": "needle"}, str(project)).content.splitlines()
    assert found == ["keep.log:1:needle 8", "src/app.py:1:needle = 1",
                     "sub/tool.py:1:needle = 2"]
    everything = _glob(tools, project, pattern="**/*.py", include_ignored=True).content
    assert everything.splitlines() == [".cache/c.py", ".venv/lib/site.py", "build/out.py",
                                       "src/app.py", "sub/gen/made.py", "sub/tool.py"]
    all_lines = tools.execute("grep", {"pattern": "needle", "include_ignored": True},
                              str(project)).content.splitlines()
    assert len(all_lines) == 8


def test_grep_finds_what_only_a_line_by_line_search_would(tools: BuiltinTools, ws: Path
                                                          ) -> None:
    """The whole-file prefilter never hides a line's match: anchors, CRLF endings, \\A."""
    (ws / "crlf.txt").write_bytes(b"first\r\nend here\r\n")
    (ws / "lines.txt").write_text("a start\nstart b\n")
    grep = {"pattern": "here$"}
    assert tools.execute("grep", grep, str(ws)).content == "crlf.txt:2:end here"
    assert tools.execute("grep", {"pattern": "^start"}, str(ws)).content == (
        "lines.txt:2:start b")
    assert tools.execute("grep", {"pattern": "\\Astart"}, str(ws)).content == (
        "lines.txt:2:start b")


def test_the_schemas_sent_are_made_from_the_inputs_the_tools_accept(tmp_path: Path) -> None:
    tools = BuiltinTools()
    sent = {d["name"]: d["input_schema"] for d in tools.definitions()}
    assert list(sent) == [t.name for t in TOOLS]
    for tool in TOOLS:
        schema = sent[tool.name]
        fields = tool.input.__struct_fields__
        defaulted = fields[len(fields) - len(tool.input.__struct_defaults__):]
        assert list(schema["properties"]) == list(fields), tool.name
        assert schema.get("required", []) == [f for f in fields if f not in defaulted]
        assert schema["additionalProperties"] is False
        assert all(p.get("description") for p in schema["properties"].values()), tool.name
        refused = tools.execute(tool.name, {"no_such_field": 1}, str(tmp_path))
        assert refused.is_error and "invalid input" in refused.content
    assert sent["read_file"]["properties"]["offset"] == {
        "type": "integer", "minimum": 0,
        "description": "Number of lines to skip from the start (default 0)."}
    assert sent["grep"]["properties"]["glob"]["type"] == "string"  # optional: not nullable
