"""Repositories a sandboxed call creates are made harmless: judged by what a person's git
then runs (a file that fsmonitor or a hook would write), and what the repository keeps."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import need_sandbox
from tether.actors.ports import Grant
from tether.adapters.sandbox import Placeholders, Sandbox
from tether.adapters.sandbox.newrepos import git_folders, make_harmless
from tether.events.sandbox import SandboxLimits

pytestmark = pytest.mark.slow  # runs commands in the bubblewrap sandbox

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True,
                          text=True, check=False)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    git("init", "-q", cwd=root)
    (root / "README.md").write_text("hi\n")
    return root


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    report = need_sandbox()
    return Sandbox(report.bwrap, report.prlimit, protected=("SOUL.md",),
                   limits=SandboxLimits(cpu_seconds=5, memory_mb=512, processes=64),
                   placeholders=Placeholders(str(tmp_path / "ledger.json")))


def run(sandbox: Sandbox, ws: Path, command: str) -> str:
    done = sandbox.run(["bash", "-c", command], str(ws), grant=Grant(), writable=True,
                       env=GIT_ENV, timeout=20, cap=20_000)
    assert done.code == 0, done.output
    return done.output


def a_person_runs_git_status(folder: Path) -> None:
    git("status", cwd=folder)


@pytest.mark.parametrize("command", [
    "git init -q sub && git -C sub config core.fsmonitor 'touch {pwn}'",
    "mkdir -p sub/.git && cp -r .git/. sub/.git/ && "
    "printf '[core]\\n\\tfsmonitor = touch {pwn}\\n' >> sub/.git/config",
    "git init -q sub && printf '#!/bin/sh\\ntouch {pwn}\\n' > sub/.git/hooks/post-checkout"
    " && chmod +x sub/.git/hooks/post-checkout && git -C sub config alias.st '!touch {pwn}'",
    "git init -q sub && printf '[core]\\n\\tfsmonitor = touch {pwn}\\n' > evil.cfg && "
    "git -C sub config include.path ../../evil.cfg",
])
def test_a_new_nested_repository_runs_nothing_for_a_person(
        sandbox: Sandbox, ws: Path, tmp_path: Path, command: str) -> None:
    pwn = tmp_path / "pwn"
    run(sandbox, ws, command.format(pwn=pwn))
    sub = ws / "sub"
    a_person_runs_git_status(sub)
    git("checkout", "-q", "-b", "x", cwd=sub)
    git("st", cwd=sub)
    assert not pwn.exists()
    assert git("config", "--get", "core.fsmonitor", cwd=sub).stdout == ""


def test_a_new_bare_repository_runs_nothing_for_a_person(
        sandbox: Sandbox, ws: Path, tmp_path: Path) -> None:
    pwn = tmp_path / "pwn"
    run(sandbox, ws, f"git init -q --bare bare && git -C bare config core.fsmonitor 'touch {pwn}'"
                     f" && git -C bare config core.sshCommand 'touch {pwn}'")
    a_person_runs_git_status(ws / "bare")
    assert not pwn.exists()
    assert git("config", "--file", "bare/config", "--list", cwd=ws).stdout.count("touch") == 0


def test_a_workspace_made_a_bare_repository_runs_nothing_for_a_person(
        sandbox: Sandbox, tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    pwn = tmp_path / "pwn"
    run(sandbox, ws, f"git init -q --bare . && git config --file config core.fsmonitor "
                     f"'touch {pwn}'")
    a_person_runs_git_status(ws)
    assert not pwn.exists()


def test_a_new_repository_keeps_where_it_fetches_from_and_who_commits(
        sandbox: Sandbox, ws: Path) -> None:
    run(sandbox, ws, "git init -q sub && cd sub && git remote add origin "
                     "https://example.com/r.git && git config user.name Ada && "
                     "git config core.pager 'less -R' && echo x > f && git add f && "
                     "git commit -qm first")
    sub = ws / "sub"
    assert git("remote", "get-url", "origin", cwd=sub).stdout.strip() == \
        "https://example.com/r.git"
    assert git("config", "user.name", cwd=sub).stdout.strip() == "Ada"
    assert git("config", "--local", "core.pager", cwd=sub).stdout == ""
    assert git("log", "--format=%s", cwd=sub).stdout.strip() == "first"


def test_an_existing_nested_repository_is_left_as_it_is(
        sandbox: Sandbox, ws: Path) -> None:
    sub = ws / "sub"
    sub.mkdir()
    git("init", "-q", cwd=sub)
    git("config", "core.pager", "less -R", cwd=sub)  # the person's own choice
    run(sandbox, ws, "echo x > sub/f")
    assert git("config", "core.pager", cwd=sub).stdout.strip() == "less -R"


def test_repositories_finds_git_folders_bare_ones_and_pointers(ws: Path) -> None:
    (ws / "a").mkdir()
    git("init", "-q", cwd=ws / "a")
    git("init", "-q", "--bare", "b", cwd=ws)
    git("init", "-q", "--bare", "c.git", cwd=ws)
    (ws / "d").mkdir()
    (ws / "d" / ".git").write_text("gitdir: ../c.git\n")
    (ws / "e").mkdir()
    os.mkfifo(ws / "e" / "HEAD")  # taken for one (nothing is read: a FIFO would block)
    (ws / "e" / "objects").mkdir()
    (ws / "f").mkdir()
    (ws / "f" / "HEAD").write_text("ref: refs/heads/main\n")  # no objects/: not one
    assert git_folders(str(ws)) == {str(ws / ".git"), str(ws / "a" / ".git"),
                                     str(ws / "b"), str(ws / "c.git"), str(ws / "e")}


def test_make_harmless_replaces_an_unreadable_configuration(ws: Path) -> None:
    git_dir = ws / ".git"
    (git_dir / "config").write_text("[core\n\tfsmonitor = oops\n")
    make_harmless(str(git_dir))
    assert "fsmonitor" not in (git_dir / "config").read_text()
    assert git("status", cwd=ws).returncode == 0


# --- what a red team found (each once a way through) --------------------------------------


def test_a_link_left_where_the_engine_writes_is_not_followed(
        sandbox: Sandbox, ws: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    run(sandbox, ws, f"git init -q sub && git -C sub config core.fsmonitor x && "
                     f"for n in config.tether-tmp .tether-config-x; do "
                     f"ln -s {victim} sub/.git/$n; done; ln -s ../../SOUL.md sub/.git/tmp")
    assert victim.read_text() == "mine\n"
    assert git("config", "--get", "core.fsmonitor", cwd=ws / "sub").stdout == ""


@pytest.mark.parametrize("head", [
    "ref:refs/heads/master", "ref:\trefs/heads/master", "0" * 39 + "A junk"])
def test_any_head_git_accepts_makes_a_repository(
        sandbox: Sandbox, ws: Path, tmp_path: Path, head: str) -> None:
    pwn = tmp_path / "pwn"
    run(sandbox, ws, f"git init -q sub && printf '%s\\n' '{head}' > sub/.git/HEAD && "
                     f"git -C sub config core.fsmonitor 'touch {pwn}'")
    a_person_runs_git_status(ws / "sub")
    assert not pwn.exists()
    assert "fsmonitor" not in (ws / "sub" / ".git" / "config").read_text()


def test_a_deep_repository_added_as_a_gitlink_runs_nothing_for_a_person(
        sandbox: Sandbox, ws: Path, tmp_path: Path) -> None:
    pwn = tmp_path / "pwn"
    run(sandbox, ws, f"git init -q lib/inner && cd lib/inner && echo x > f && git add f && "
                     f"git -c user.name=a -c user.email=a@b commit -qm x && "
                     f"git config core.fsmonitor 'touch {pwn}' && cd ../.. && "
                     f"git update-index --add --cacheinfo 160000,$(git -C lib/inner "
                     f"rev-parse HEAD),lib/inner")
    a_person_runs_git_status(ws)
    assert not pwn.exists()


def test_a_repository_made_in_one_call_cannot_be_armed_in_the_next(
        sandbox: Sandbox, ws: Path, tmp_path: Path) -> None:
    pwn = tmp_path / "pwn"
    run(sandbox, ws, "git init -q --bare sub")
    sandbox.run(["bash", "-c", f"git -C sub config core.fsmonitor 'touch {pwn}'; "
                               f"printf '#!/bin/sh\\ntouch {pwn}\\n' > sub/hooks/pre-commit; "
                               "chmod +x sub/hooks/pre-commit"],
                str(ws), grant=Grant(), writable=True, env=GIT_ENV, timeout=20, cap=20_000)
    a_person_runs_git_status(ws / "sub")
    assert not pwn.exists() and not (ws / "sub" / "hooks" / "pre-commit").exists()


def test_a_workspace_made_bare_cannot_be_armed_in_the_next_call(
        sandbox: Sandbox, tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    pwn = tmp_path / "pwn"
    run(sandbox, ws, "git init -q --bare .")
    sandbox.run(["bash", "-c", f"git config --file config alias.st '!touch {pwn}'"],
                str(ws), grant=Grant(), writable=True, env=GIT_ENV, timeout=20, cap=20_000)
    git("st", cwd=ws)
    assert not pwn.exists()


def test_the_persons_own_repository_is_never_made_harmless(
        sandbox: Sandbox, ws: Path) -> None:
    git("config", "alias.lg", "log --oneline", cwd=ws)  # the person's own choices
    hook = ws / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    run(sandbox, ws, "echo garbage > .git/HEAD")
    run(sandbox, ws, "echo 'ref: refs/heads/master' > .git/HEAD")
    assert git("config", "alias.lg", cwd=ws).stdout.strip() == "log --oneline"
    assert hook.exists()


def test_a_fifo_for_head_does_not_stall_the_engine(sandbox: Sandbox, ws: Path) -> None:
    done = sandbox.run(["bash", "-c", "mkdir -p x/.git/refs x/.git/objects && "
                                      "mkfifo x/.git/HEAD x/.git/config"],
                       str(ws), grant=Grant(), writable=True, env=GIT_ENV, timeout=10,
                       cap=20_000)
    assert done.code == 0  # and it came back: nothing opened the FIFOs
