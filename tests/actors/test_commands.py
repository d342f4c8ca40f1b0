"""Command parsing and the folder rule of /dir (pure)."""

from __future__ import annotations

from pathlib import Path

from tether.actors.commands import Command, parse_command, resolve_dir
from tether.actors.paths import inside


def test_parse() -> None:
    assert parse_command("/status") == Command("status", "")
    assert parse_command("  /DIR  src/app ") == Command("dir", "src/app")
    assert parse_command("hello /status") is None
    assert parse_command("//not a command") is None
    assert parse_command("/") is None


def test_dir_stays_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "link").symlink_to("/etc")
    root = str(tmp_path)
    assert resolve_dir(root, "a/b", root) == str(tmp_path / "a" / "b")
    assert resolve_dir(str(tmp_path / "a"), "..", root) == root
    assert resolve_dir(root, "..", root) is None
    assert resolve_dir(root, "a/link", root) is None  # a symlink out does not count
    assert resolve_dir(root, "missing", root) is None
    assert resolve_dir(root, "a\x00b", root) is None  # bad input is no folder, not a crash


def test_help_is_a_list_one_command_a_line() -> None:
    from tether.actors.commands import COMMANDS, help_text

    lines = help_text().splitlines()
    assert lines[0] == "commands:"
    assert [line.split()[0] for line in lines[1:]] == [f"/{name}" for name in COMMANDS]
    assert "/status" in lines[1] and "mode" in lines[1]


def test_inside_is_the_folder_itself_or_below_it() -> None:
    assert inside("/ws", "/ws") and inside("/ws/a/b", "/ws") and inside("/ws/a", "/ws/")
    assert not inside("/wsx", "/ws") and not inside("/", "/ws") and not inside("/w", "/ws")
    assert inside("/anything", "/")  # every absolute path is below the root folder
