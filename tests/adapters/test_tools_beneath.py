"""The file tools against links, ``..``, FIFOs and races, on real folders.

Every test runs twice: through ``openat2(2)`` (skipped where the kernel lacks it) and through
the portable component-by-component walk (:data:`adapters.tools.beneath.FORCE_WALK`).
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tether.actors.ports import ToolOutput
from tether.adapters.tools import BuiltinTools, beneath
from tether.adapters.tools.beneath import EscapeError


@pytest.fixture(params=["openat2", "walk"], autouse=True)
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode: str = request.param
    if mode == "openat2" and not beneath.openat2_available():
        pytest.skip("this kernel has no openat2 (Linux 5.6+)")
    monkeypatch.setattr(beneath, "FORCE_WALK", mode == "walk")
    return mode


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "sub").mkdir()
    (workspace / "sub" / "file.txt").write_text("inside\n")
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace holding ``secret.txt``."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_bytes(b"top secret\n")
    return folder


@pytest.fixture
def tools() -> BuiltinTools:
    return BuiltinTools(timeout=5)


def run(tools: BuiltinTools, ws: Path, name: str, **tool_input: object) -> ToolOutput:
    return tools.execute(name, dict(tool_input), str(ws))


def untouched(outside: Path) -> None:
    """The outside folder holds exactly what the fixture put there."""
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"top secret\n"


def refused(out: ToolOutput, path: str) -> None:
    assert out.is_error, out
    assert "outside the workspace" in out.content, out
    assert "top secret" not in out.content


# --- symlinks out ---------------------------------------------------------------------------


@pytest.mark.parametrize("relative", [False, True])
def test_file_symlink_out_is_refused_by_every_tool(
    tools: BuiltinTools, ws: Path, outside: Path, relative: bool
) -> None:
    target = "../outside/secret.txt" if relative else str(outside / "secret.txt")
    os.symlink(target, ws / "leak.txt")
    for name, extra in (
        ("read_file", {}),
        ("write_file", {"content": "owned"}),
        ("edit_file", {"old_text": "top", "new_text": "owned"}),
        ("list_dir", {}),
        ("grep", {"pattern": "secret"}),
        ("glob", {"pattern": "*"}),
    ):
        out = run(tools, ws, name, path="leak.txt", **extra)
        refused(out, "leak.txt")
        assert out.content.startswith("refused: path leak.txt is outside the workspace")
    assert run(tools, ws, "glob", pattern="**/*") == ToolOutput("sub/file.txt")
    assert run(tools, ws, "grep", pattern="secret") == ToolOutput("no matches for 'secret' in .")
    listing = run(tools, ws, "list_dir")
    assert listing.content == "leak.txt@ (symlink leading outside the workspace)\nsub/"
    assert (ws / "leak.txt").is_symlink()
    untouched(outside)


def test_dangling_symlink_out_is_not_created_through(
    tools: BuiltinTools, ws: Path, outside: Path
) -> None:
    os.symlink(outside / "planted.txt", ws / "dangling.txt")
    os.symlink("../outside/planted2.txt", ws / "dangling2.txt")
    for path in ("dangling.txt", "dangling2.txt"):
        refused(run(tools, ws, "write_file", path=path, content="x"), path)
    untouched(outside)


@pytest.mark.parametrize("relative", [False, True])
def test_folder_symlink_out_is_never_entered(
    tools: BuiltinTools, ws: Path, outside: Path, relative: bool
) -> None:
    os.symlink("../outside" if relative else str(outside), ws / "exit")
    os.symlink("../../outside", ws / "sub" / "up")  # climbs out from a subfolder
    for folder in ("exit", "sub/up"):
        for name, extra in (
            ("read_file", {"path": f"{folder}/secret.txt"}),
            ("write_file", {"path": f"{folder}/planted.txt", "content": "x"}),
            ("write_file", {"path": f"{folder}/new/deep.txt", "content": "x"}),
            ("edit_file", {"path": f"{folder}/secret.txt", "old_text": "top", "new_text": "x"}),
            ("list_dir", {"path": folder}),
            ("glob", {"pattern": "*", "path": folder}),
            ("grep", {"pattern": "secret", "path": folder}),
            ("grep", {"pattern": "secret", "path": f"{folder}/secret.txt"}),
        ):
            refused(run(tools, ws, name, **extra), folder)
    assert run(tools, ws, "glob", pattern="**/*") == ToolOutput("sub/file.txt")
    assert run(tools, ws, "grep", pattern="secret").content == "no matches for 'secret' in ."
    untouched(outside)


def test_dotdot_escapes_are_refused_and_dotdot_inside_works(
    tools: BuiltinTools, ws: Path, outside: Path
) -> None:
    for path in ("../outside/secret.txt", "sub/../../outside/secret.txt", "sub/../..", ".."):
        refused(run(tools, ws, "read_file", path=path), path)
        refused(run(tools, ws, "write_file", path=f"{path}/x", content="x"), path)
    out = run(tools, ws, "write_file", path="sub/../top.txt", content="top\n")
    assert out == ToolOutput("wrote 4 bytes to sub/../top.txt")
    assert (ws / "top.txt").read_text() == "top\n"
    assert run(tools, ws, "read_file", path="sub/./../sub/file.txt").content == "inside\n"
    untouched(outside)


def test_absolute_paths_inside_are_accepted_others_refused(
    tools: BuiltinTools, ws: Path, outside: Path
) -> None:
    assert run(tools, ws, "read_file", path=str(ws / "sub" / "file.txt")).content == "inside\n"
    assert not run(tools, ws, "write_file", path=str(ws / "abs.txt"), content="a").is_error
    assert (ws / "abs.txt").read_text() == "a"
    out = run(tools, ws, "read_file", path=str(outside / "secret.txt"))
    assert out == ToolOutput(
        f"refused: path {outside / 'secret.txt'} is outside the workspace {ws}", is_error=True
    )
    refused(run(tools, ws, "read_file", path=f"{ws}/../outside/secret.txt"), "")
    untouched(outside)


def test_symlinks_that_stay_inside_keep_working(tools: BuiltinTools, ws: Path) -> None:
    os.symlink("sub/file.txt", ws / "link")
    os.symlink("sub", ws / "dirlink")
    os.symlink("../sub/file.txt", ws / "sub" / "back")  # relative, through ..
    os.symlink("link", ws / "chain")  # a link to a link
    for path in ("link", "dirlink/file.txt", "sub/back", "chain"):
        assert run(tools, ws, "read_file", path=path) == ToolOutput("inside\n"), path
    out = run(tools, ws, "write_file", path="link", content="rewritten\n")
    assert not out.is_error
    assert (ws / "sub" / "file.txt").read_text() == "rewritten\n"
    assert (ws / "link").is_symlink()  # the target was replaced, the link kept
    edit = run(tools, ws, "edit_file", path="chain", old_text="rewritten", new_text="edited")
    assert not edit.is_error
    assert (ws / "sub" / "file.txt").read_text() == "edited\n"
    assert (ws / "chain").is_symlink() and (ws / "link").is_symlink()
    assert not run(tools, ws, "write_file", path="dirlink/new/x.txt", content="x").is_error
    assert (ws / "sub" / "new" / "x.txt").read_text() == "x"
    assert run(tools, ws, "glob", pattern="**/*.txt", path="dirlink").content == (
        "dirlink/file.txt\ndirlink/new/x.txt"
    )
    assert run(tools, ws, "list_dir").content == "chain\ndirlink/\nlink\nsub/"


def test_symlink_loops_end_with_an_error(tools: BuiltinTools, ws: Path) -> None:
    os.symlink("b", ws / "a")
    os.symlink("a", ws / "b")
    for name, extra in (
        ("read_file", {}),
        ("write_file", {"content": "x"}),
        ("edit_file", {"old_text": "x", "new_text": "y"}),
    ):
        out = run(tools, ws, name, path="a", **extra)
        assert out.is_error and "symbolic links" in out.content, out
    assert run(tools, ws, "glob", pattern="*").content == "no files match '*' in ."


# --- hard links -----------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
def test_hard_link_to_outside_is_replaced_not_written_through(
    tools: BuiltinTools, ws: Path, outside: Path, tool: str
) -> None:
    os.link(outside / "secret.txt", ws / "hard.txt")
    if tool == "write_file":
        out = run(tools, ws, tool, path="hard.txt", content="new\n")
    else:
        out = run(tools, ws, tool, path="hard.txt", old_text="top", new_text="new")
    assert not out.is_error, out
    untouched(outside)
    assert os.stat(outside / "secret.txt").st_nlink == 1  # the link was replaced
    assert (ws / "hard.txt").read_text() == ("new\n" if tool == "write_file" else "new secret\n")


def test_hard_link_to_a_protected_file_leaves_it_alone(tools: BuiltinTools, ws: Path) -> None:
    (ws / "SOUL.md").write_text("be kind\n")
    os.link(ws / "SOUL.md", ws / "notes.md")
    assert not run(tools, ws, "write_file", path="notes.md", content="be evil\n").is_error
    assert not run(tools, ws, "edit_file", path="notes.md", old_text="evil", new_text="x").is_error
    assert (ws / "SOUL.md").read_text() == "be kind\n"
    assert (ws / "notes.md").read_text() == "be x\n"


# --- modes and file types -------------------------------------------------------------------


def test_write_keeps_the_mode_of_an_existing_file(tools: BuiltinTools, ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o750)
    assert not run(tools, ws, "write_file", path="run.sh", content="echo bye\n").is_error
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert not run(tools, ws, "edit_file", path="run.sh", old_text="bye", new_text="yo").is_error
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    mask = os.umask(0o022)
    os.umask(mask)
    assert not run(tools, ws, "write_file", path="fresh.txt", content="x").is_error
    assert stat.S_IMODE((ws / "fresh.txt").stat().st_mode) == 0o666 & ~mask
    assert not [p for p in ws.iterdir() if "tether-tmp" in p.name]  # no temporary left


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_write_refuses_a_read_only_file(tools: BuiltinTools, ws: Path) -> None:
    (ws / "ro.txt").write_text("keep\n")
    (ws / "ro.txt").chmod(0o444)
    out = run(tools, ws, "write_file", path="ro.txt", content="x")
    assert out == ToolOutput("write_file failed: Permission denied", is_error=True)
    assert (ws / "ro.txt").read_text() == "keep\n"


def within(seconds: float, call: Callable[[], ToolOutput]) -> ToolOutput:
    """``call()``'s answer, failing the test if it takes longer than ``seconds``."""
    answer: list[ToolOutput] = []
    worker = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the tool blocked"
    return answer[0]


def test_a_fifo_never_blocks_a_tool(tools: BuiltinTools, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "notes.txt").write_text("needle\n")
    fifo_error = ToolOutput("pipe is not a regular file", is_error=True)
    assert within(5, lambda: run(tools, ws, "read_file", path="pipe")) == fifo_error
    assert within(5, lambda: run(tools, ws, "write_file", path="pipe", content="x")) == fifo_error
    edit = within(5, lambda: run(tools, ws, "edit_file", path="pipe", old_text="a", new_text="b"))
    assert edit == fifo_error
    grep = within(5, lambda: run(tools, ws, "grep", pattern="needle"))
    assert grep == ToolOutput("notes.txt:1:needle")
    named = within(5, lambda: run(tools, ws, "grep", pattern="needle", path="pipe"))
    assert named == ToolOutput("pipe is not a regular file or folder", is_error=True)
    assert run(tools, ws, "glob", pattern="*").content == "notes.txt"
    assert stat.S_ISFIFO(os.lstat(ws / "pipe").st_mode)


def test_grep_skips_a_link_to_a_credential_file(tools: BuiltinTools, ws: Path) -> None:
    (ws / ".env").write_text("TOKEN=abc\n")
    os.symlink(".env", ws / "innocent.txt")
    out = run(tools, ws, "grep", pattern="TOKEN")
    assert out.content.startswith("no matches for 'TOKEN' in .\n[skipped 2 credential files")


# --- races ----------------------------------------------------------------------------------


def _exchanger() -> Callable[[str, str], None] | None:
    """An atomic swap of two names (``renameat2(RENAME_EXCHANGE)``), where libc has it."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except AttributeError:
        return None

    def exchange(a: str, b: str) -> None:
        if renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:  # RENAME_EXCHANGE
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return exchange


@contextmanager
def keep_swapping(a: Path, b: Path) -> Iterator[None]:
    """While the body runs, a thread keeps exchanging names ``a`` and ``b`` (atomically
    where libc has ``renameat2``, else through a third name, ``a`` briefly missing)."""
    exchange = _exchanger()
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            try:
                if exchange is not None:
                    exchange(str(a), str(b))
                else:
                    held = a.with_name(a.name + ".held")
                    os.rename(a, held)
                    os.rename(b, a)
                    os.rename(a, b)
                    os.rename(held, a)
                swaps[0] += 1
            except OSError:
                pass

    worker = threading.Thread(target=swap, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(5)
    assert swaps[0] > 0


@pytest.fixture
def swapping(ws: Path, outside: Path) -> Iterator[None]:
    """``ws/box`` keeps changing between a real folder and a symlink to the outside."""
    (ws / "box").mkdir()
    (ws / "box" / "secret.txt").write_text("box secret\n")
    os.symlink(outside, ws / "spare")
    with keep_swapping(ws / "box", ws / "spare"):
        yield


def test_race_swapping_a_folder_for_a_symlink_never_writes_outside(
    tools: BuiltinTools, ws: Path, outside: Path, swapping: None
) -> None:
    written = 0
    for i in range(200):
        out = run(tools, ws, "write_file", path=f"box/f{i}.txt", content=f"{i}\n")
        written += not out.is_error
        read = run(tools, ws, "read_file", path="box/secret.txt")
        assert "top secret" not in read.content
        edit = run(tools, ws, "edit_file", path="box/secret.txt", old_text="top", new_text="x")
        assert "top secret" not in edit.content
    untouched(outside)
    assert written > 0


def test_race_on_grep_and_glob_never_reads_outside(
    tools: BuiltinTools, ws: Path, outside: Path, swapping: None
) -> None:
    for _ in range(100):
        assert "top secret" not in run(tools, ws, "grep", pattern="secret").content
        assert "outside" not in run(tools, ws, "glob", pattern="**/*").content
    untouched(outside)


def test_race_swapping_the_file_for_a_symlink_never_writes_outside(
    tools: BuiltinTools, ws: Path, outside: Path
) -> None:
    (ws / "target.txt").write_text("mine\n")
    os.symlink(outside / "secret.txt", ws / "spare.txt")
    with keep_swapping(ws / "target.txt", ws / "spare.txt"):
        for i in range(200):
            run(tools, ws, "write_file", path="target.txt", content=f"{i}\n")
            run(tools, ws, "edit_file", path="target.txt", old_text="top", new_text="x")
    untouched(outside)


# --- the module's own API -------------------------------------------------------------------


def test_open_beneath_api(
    ws: Path, outside: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.symlink("../outside", ws / "exit")
    os.symlink("sub/file.txt", ws / "link")
    calls: list[int] = []
    real = beneath._syscall_openat2

    def counting(dir_fd: int, path: bytes, how: beneath._OpenHow) -> tuple[int, int]:
        calls.append(1)
        return real(dir_fd, path, how)

    monkeypatch.setattr(beneath, "_syscall_openat2", counting)
    with beneath.open_root(str(ws)) as root:
        with beneath.closing_fd(beneath.open_beneath(root, "link", os.O_RDONLY)) as fd:
            assert os.read(fd, 100) == b"inside\n"
        for path in ("exit/secret.txt", "..", "sub/../../outside", "/etc/passwd", "a\0b"):
            with pytest.raises(EscapeError):
                beneath.open_beneath(root, path, os.O_RDONLY)
        with pytest.raises(OSError):  # ELOOP: the final link is not followed
            beneath.open_beneath(root, "link", os.O_RDONLY, follow=False)
        assert stat.S_ISLNK(beneath.stat_beneath(root, "link", follow=False).st_mode)
        assert stat.S_ISREG(beneath.stat_beneath(root, "link").st_mode)
        assert beneath.realpath_beneath(root, "link") == "sub/file.txt"
        assert beneath.realpath_beneath(root, "sub/..") == "."
        assert beneath.listdir_beneath(root, ".") == [
            ("exit", "link"),
            ("link", "link"),
            ("sub", "dir"),
        ]
        os.close(beneath.mkdirs_beneath(root, "a/b/c"))
        assert (ws / "a" / "b" / "c").is_dir()
        with pytest.raises(EscapeError):
            beneath.mkdirs_beneath(root, "exit/new")
        assert root.relative(str(ws / "sub")) == "sub"
        assert root.relative(str(ws)) == "."
        with pytest.raises(EscapeError):
            root.relative(str(outside))
        other = os.stat(outside / "secret.txt")
        with pytest.raises(beneath.ChangedError):
            beneath.write_beneath(root, "sub/file.txt", b"x", expect=other)
        assert beneath.write_beneath(root, "link", b"via link\n") == "sub/file.txt"
        assert (ws / "sub" / "file.txt").read_bytes() == b"via link\n"
    assert bool(calls) == (resolver == "openat2")
    untouched(outside)
