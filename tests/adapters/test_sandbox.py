"""The sandbox, judged by its effects: files on disk and a loopback listener.

Every test here runs real bubblewrap. Where it is absent locally the tests skip with the
reason; under CI (``CI`` set, and ``.ci/run`` installs bubblewrap) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Listener, need_sandbox, need_sealing
from tether.actors.ports import Grant
from tether.adapters.sandbox import (
    MountPlan,
    Placeholders,
    Sandbox,
    UnholdablePath,
    bwrap_argv,
    protected_targets,
)
from tether.adapters.sandbox.cgroup import CgroupPool, find_parent, sweep_cgroups
from tether.adapters.tools import BuiltinTools
from tether.adapters.tools.shell import Unconfined
from tether.events.sandbox import SandboxLimits

pytestmark = pytest.mark.slow  # runs commands in the bubblewrap sandbox

PROTECTED = ("SOUL.md", "IDENTITY.md", "GUARDRAILS.md", "MEMORY.md", "AGENTS.md", "*/.git/config",
             "HEARTBEAT.md", ".tether/policy.yaml", ".tether/rules/**")


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    report = need_sandbox()
    return Sandbox(report.bwrap, report.prlimit, protected=PROTECTED,
                   limits=SandboxLimits(cpu_seconds=5, memory_mb=512, file_size_mb=1,
                                        processes=64, scratch_mb=8),
                   placeholders=Placeholders(str(tmp_path / "ledger.json")))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "SOUL.md").write_text("soul\n")
    (root / "AGENTS.md").write_text("agents\n")
    (root / "README.md").write_text("readme\n")
    (root / ".env").write_text("API_KEY=secret\n")
    return root


def shell(sandbox: Sandbox, ws: Path, command: str, grant: Grant | None = None,
          timeout: float = 10, env: dict[str, str] | None = None) -> str:
    tools = BuiltinTools(timeout=timeout, sandbox=sandbox,
                         env=dict(os.environ) if env is None else env)
    out = tools.execute("run_shell", {"command": command}, str(ws), grant)
    return out.content


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()


# --- the command line, pure ---------------------------------------------------------------


def test_the_command_line_mounts_in_order_and_drops_everything() -> None:
    plan = MountPlan(workspace="/w", hide=["/tmp", "/home/u"], show=["/home/u/.gitconfig"],
                     pin=["/w/.tether"], read_only=["/w/SOUL.md"], granted=["/w/AGENTS.md"])
    argv = bwrap_argv("bwrap", plan, ["bash", "-c", "true"], prlimit="prlimit",
                      limits=SandboxLimits(cpu_seconds=7, memory_mb=1, file_size_mb=2,
                                           processes=3))
    text = " ".join(argv)
    assert text.index("--ro-bind / /") < text.index("--tmpfs /tmp") < text.index(
        "--bind /w /w") < text.index("--bind /w/.tether /w/.tether") < text.index(
        "--ro-bind /w/SOUL.md /w/SOUL.md") < text.index("--bind /w/AGENTS.md /w/AGENTS.md")
    assert "--unshare-all" in argv and "--share-net" not in argv
    assert argv[argv.index("--cap-drop"):argv.index("--cap-drop") + 2] == ["--cap-drop", "ALL"]
    assert "--die-with-parent" in argv and "--new-session" in argv
    assert "--cpu=7:8" in argv and f"--as={1024 * 1024}" in argv and "--nproc=3" in argv
    assert argv[-3:] == ["bash", "-c", "true"]
    networked = bwrap_argv("bwrap", MountPlan(workspace="/w", network=True), ["true"],
                           prlimit="prlimit", limits=SandboxLimits())
    assert "--share-net" in networked
    read_only = bwrap_argv("bwrap", MountPlan(workspace="/w", writable=False), ["true"],
                           prlimit="prlimit", limits=SandboxLimits())
    assert "--ro-bind /w /w" in " ".join(read_only)


def test_protected_targets_find_case_variants_and_absent_files(ws: Path) -> None:
    (ws / "identity.MD").write_text("x")
    targets = {t.path: t for t in protected_targets(str(ws), PROTECTED)}
    assert targets[str(ws / "SOUL.md")].exists
    assert targets[str(ws / "identity.MD")].exists
    # A variant is held too, and does not stand in for the real name.
    assert not targets[str(ws / "IDENTITY.md")].exists
    assert not targets[str(ws / "GUARDRAILS.md")].exists
    # No .tether folder yet: it is held whole, not file by file.
    assert targets[str(ws / ".tether")] == (str(ws / ".tether"), False, True)
    assert not any(path.startswith(str(ws / ".tether") + "/") for path in targets)
    (ws / ".tether").mkdir()
    targets = {t.path: t for t in protected_targets(str(ws), PROTECTED)}
    assert not targets[str(ws / ".tether/policy.yaml")].exists
    assert targets[str(ws / ".tether/rules")].is_dir


def test_a_protected_path_through_a_link_cannot_be_held(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("x")
    (ws / "GUARDRAILS.md").symlink_to(tmp_path / "real.md")
    with pytest.raises(UnholdablePath):
        protected_targets(str(ws), PROTECTED)


# --- placeholders -------------------------------------------------------------------------


def test_placeholders_are_shared_then_removed(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    holder = Placeholders(str(tmp_path / "ledger.json"))
    soul, rules = str(root / "SOUL.md"), str(root / ".tether" / "rules")
    with holder.holding([(soul, False), (rules, True)]) as made:
        assert made == [soul, str(root / ".tether"), rules]
        with holder.holding([(soul, False)]):
            pass
        assert os.path.exists(soul)  # still held by the outer call
    assert not os.path.exists(soul) and not os.path.exists(root / ".tether")


def test_a_placeholder_another_call_holds_is_shared_not_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    holder = Placeholders()
    soul = str(root / "SOUL.md")
    first = holder.holding([(soul, False)])
    first.__enter__()
    second = holder.holding([(soul, False)])  # it exists now: another call's placeholder
    assert second.__enter__() == [soul]
    first.__exit__(None, None, None)
    assert os.path.exists(soul)  # the second call's mount would be detached otherwise
    second.__exit__(None, None, None)
    assert not os.path.exists(soul)


def test_a_sealed_placeholder_cannot_be_replaced_even_by_root(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    holder = Placeholders()
    soul, tether = root / "SOUL.md", root / ".tether"
    with holder.holding([(str(soul), False), (str(tether), True)]) as made:
        need_sealing(holder.sealed(made) == set(made), "an immutable placeholder")
        (root / "evil").write_text("x")
        for attempt in (lambda: soul.write_text("x"), soul.unlink,
                        lambda: os.rename(root / "evil", soul),
                        lambda: os.link(root / "evil", tether / "policy.yaml"),
                        lambda: os.rename(tether, root / "t2")):
            with pytest.raises(PermissionError):
                attempt()
    assert not soul.exists() and not tether.exists()


def test_placeholders_left_by_a_dead_engine_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    ledger = str(tmp_path / "ledger.json")
    held = Placeholders(ledger).holding([(str(root / "SOUL.md"), False)])
    held.__enter__()  # the engine dies here: never released
    (root / "kept.md").write_text("x")
    assert Placeholders(ledger).sweep() == [str(root / "SOUL.md")]
    assert sorted(os.listdir(root)) == ["kept.md"]


def test_a_watched_file_made_before_the_engine_died_is_swept(tmp_path: Path) -> None:
    commondir = tmp_path / "commondir"
    ledger = str(tmp_path / "ledger.json")
    watch = Placeholders(ledger).watching([str(commondir)])
    watch.__enter__()  # a call runs; the engine dies here, after the call made the file:
    commondir.write_text("../evil\n")
    assert str(commondir) in Placeholders(ledger).sweep()
    assert not commondir.exists()


def test_a_placeholder_someone_filled_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    ledger = str(tmp_path / "ledger.json")
    # Unsealed, as where the engine is not root: a sealed one cannot be filled at all.
    held = Placeholders(ledger, seal=False).holding([(str(root / "SOUL.md"), False)])
    held.__enter__()  # the engine dies here: never released
    os.chmod(root / "SOUL.md", 0o644)
    (root / "SOUL.md").write_text("a person wrote this meanwhile")
    assert Placeholders(ledger).sweep() == []
    assert (root / "SOUL.md").read_text() == "a person wrote this meanwhile"


# --- effects ------------------------------------------------------------------------------


def test_protected_files_cannot_be_written_removed_or_created(sandbox: Sandbox,
                                                              ws: Path) -> None:
    out = shell(sandbox, ws, "echo x > SOUL.md; rm -f SOUL.md AGENTS.md; mv SOUL.md s; "
                             "echo x > IDENTITY.md; echo x > GUARDRAILS.md; "
                             "mkdir -p .tether/rules && echo x > .tether/rules/r.md; "
                             "echo x > .tether/policy.yaml; mv .tether t2; "
                             "echo ok > fine.txt; cat fine.txt")
    assert out.rstrip().endswith("ok")
    assert (ws / "SOUL.md").read_text() == "soul\n"
    assert (ws / "AGENTS.md").read_text() == "agents\n"
    assert not (ws / "IDENTITY.md").exists() and not (ws / "GUARDRAILS.md").exists()
    assert not (ws / ".tether").exists() and not (ws / "t2").exists()
    assert (ws / "fine.txt").read_text() == "ok\n"


def test_nothing_outside_the_workspace_can_be_written(sandbox: Sandbox, ws: Path,
                                                      tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("original")
    shell(sandbox, ws, f"echo x > {outside}/target; echo x > {outside}/new; "
                       f"cp -s {outside}/target lnk && echo x > lnk; "
                       f"ln -s {outside} out && echo x > out/new2; "
                       f"CDPATH={tmp_path} cd outside && echo x > f; touch /etc/tether-x")
    assert (outside / "target").read_text() == "original"
    assert sorted(os.listdir(outside)) == ["target"]
    assert not os.path.exists("/etc/tether-x")


def test_home_state_and_host_tmp_are_hidden(sandbox: Sandbox, ws: Path,
                                            tmp_path: Path) -> None:
    secret = Path(os.path.expanduser("~")) / ".tether-sandbox-test-secret"
    secret.write_text("ssh key")
    try:
        out = shell(sandbox, ws, f"cat {secret}; stat -f -c %T ~; ls /run | wc -l")
    finally:
        secret.unlink()
    assert "ssh key" not in out
    assert out.split()[-2:] == ["tmpfs", "0"]


def test_the_network_is_off_unless_granted(sandbox: Sandbox, ws: Path,
                                           listener: Listener) -> None:
    send = (f"cat .env > /dev/tcp/127.0.0.1/{listener.port}; "
            f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', "
            f"{listener.port})); s.sendall(b'py')\"")
    shell(sandbox, ws, send)
    time.sleep(0.3)  # the listener is a real socket: let a connection land if one came
    assert listener.connections == 0 and listener.received == b""
    shell(sandbox, ws, f"echo granted > /dev/tcp/127.0.0.1/{listener.port}",
          Grant(network=True))
    deadline = time.monotonic() + 5
    while b"granted" not in listener.received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.received == b"granted\n"


def test_a_granted_protected_write_is_allowed_but_not_a_deletion(sandbox: Sandbox,
                                                                 ws: Path) -> None:
    grant = Grant(writes=(str(ws / "AGENTS.md"),))
    shell(sandbox, ws, "echo new > AGENTS.md; rm -f AGENTS.md; echo x > SOUL.md", grant)
    assert (ws / "AGENTS.md").read_text() == "new\n"
    assert (ws / "SOUL.md").read_text() == "soul\n"


def _git_init(ws: Path) -> None:
    subprocess.run(["git", "init", "-q", str(ws)], check=True)


def test_git_configuration_and_hooks_are_read_only(sandbox: Sandbox, ws: Path) -> None:
    _git_init(ws)
    shutil.rmtree(ws / ".git" / "hooks")  # an absent hooks folder cannot be made either
    config = (ws / ".git" / "config").read_text()
    shell(sandbox, ws, "git config alias.x '!touch pwned'; mkdir -p .git/hooks; "
                       "echo 'touch pwned' > .git/hooks/pre-commit; mv .git g2; "
                       "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > "
                       "evil/config && echo ../evil > .git/commondir; "
                       "echo '[core]' > .git/config.worktree; mkdir -p .git/worktrees/w")
    assert (ws / ".git" / "config").read_text() == config
    assert not (ws / ".git" / "hooks").exists()
    assert sorted(os.listdir(ws / ".git")) == sorted(
        n for n in os.listdir(ws / ".git") if n not in ("commondir", "config.worktree",
                                                       "worktrees"))
    assert not (ws / ".git" / "commondir").exists()
    assert (ws / ".git").is_dir() and not (ws / "g2").exists()


def test_git_in_the_sandbox_does_not_see_the_placeholders(sandbox: Sandbox, ws: Path) -> None:
    _git_init(ws)
    exclude = (ws / ".git" / "info" / "exclude").read_text()
    out = shell(sandbox, ws, "git status --porcelain --untracked-files=all; git add -A && "
                             "git -c user.name=t -c user.email=t@e commit -qm all && "
                             "git show --stat --format= HEAD")
    assert "IDENTITY.md" not in out and "GUARDRAILS.md" not in out
    assert "exit code: 0" in out
    assert (ws / ".git" / "info" / "exclude").read_text() == exclude  # never written
    assert not (ws / "IDENTITY.md").exists()


def test_a_sandbox_built_ahead_runs_the_next_call_where_and_as_asked(
        sandbox: Sandbox, ws: Path) -> None:
    shell(sandbox, ws, "true")
    need_sealing(sandbox.settle(), "a sandbox built ahead")
    out = shell(sandbox, ws, "pwd; echo \"$TETHER_PROBE\"; cat; echo done",
                env={"TETHER_PROBE": "it's \"quoted\" $(not run)", "PATH": os.defpath})
    lines = out.splitlines()
    assert lines[0] == "exit code: 0"
    assert lines[1:4] == [str(ws), "it's \"quoted\" $(not run)", "done"]  # cat read nothing


def test_a_protected_file_made_between_calls_is_held_by_the_next(
        sandbox: Sandbox, ws: Path) -> None:
    shell(sandbox, ws, "true")  # IDENTITY.md absent: the sandbox built ahead mounts none
    sandbox.settle()
    (ws / "IDENTITY.md").write_text("me\n")  # a person writes it meanwhile
    soul = ws / "SOUL.md"
    soul.unlink()
    soul.write_text("new soul\n")  # and replaces SOUL.md (a new file at the same path)
    shell(sandbox, ws, "echo x > IDENTITY.md; echo x > SOUL.md; rm -f IDENTITY.md SOUL.md")
    assert (ws / "IDENTITY.md").read_text() == "me\n"
    assert soul.read_text() == "new soul\n"


def test_a_sandbox_built_ahead_and_killed_is_replaced(sandbox: Sandbox, ws: Path) -> None:
    shell(sandbox, ws, "true")
    need_sealing(sandbox.settle(), "a sandbox built ahead")
    # Someone kills the waiting sandbox (bwrap, our child): the call must still run.
    waiting = [int(p) for p in subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "bwrap"], capture_output=True, text=True,
        check=False).stdout.split()]
    assert waiting
    for pid in waiting:
        os.kill(pid, signal.SIGKILL)
    for pid in waiting:  # dead (a zombie until the sandbox reaps it)
        while _state(pid) not in ("Z", ""):
            time.sleep(0.001)
    assert "ran" in shell(sandbox, ws, "echo ran")


def test_a_held_file_unlinked_and_linked_back_between_calls_stays_held(
        sandbox: Sandbox, ws: Path) -> None:
    _git_init(ws)
    for name in ("IDENTITY.md", "GUARDRAILS.md", "MEMORY.md", "HEARTBEAT.md"):
        (ws / name).write_text("x\n")  # nothing absent: the plan needs no placeholder
    config = ws / ".git" / "config"
    shell(sandbox, ws, "true")
    need_sealing(sandbox.settle(), "a sandbox built ahead")
    # Same inode at the same path, but the waiting sandbox's mount of it is gone.
    os.link(config, ws / "h")
    config.unlink()
    os.link(ws / "h", config)
    (ws / "h").unlink()
    before = config.read_text()
    shell(sandbox, ws, "git config core.fsmonitor 'touch pwned'")
    assert config.read_text() == before


def test_a_linked_git_info_shows_the_sandbox_nothing_of_elsewhere(
        sandbox: Sandbox, ws: Path, tmp_path: Path) -> None:
    _git_init(ws)
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "exclude").write_text("TOP-SECRET\n")
    info = ws / ".git" / "info"
    shutil.rmtree(info)
    info.symlink_to(secret)
    out = shell(sandbox, ws, "cat .git/info/exclude; echo ran")
    assert "ran" in out and "TOP-SECRET" not in out  # /tmp is hidden: the link dangles
    info.unlink()
    info.symlink_to("/nonexistent/info")
    assert "ran" in shell(sandbox, ws, "echo ran")  # and calls still run


def test_an_environment_that_is_not_utf8_runs_and_leaks_nothing(
        sandbox: Sandbox, ws: Path) -> None:
    env = {"PATH": os.defpath, "ODD": os.fsdecode(b"\xff\xfe")}
    before = set(_bwrap_children())
    for _ in range(3):
        out = shell(sandbox, ws, "printf %s \"$ODD\" | od -An -tx1", env=env)
        assert "ff fe" in out
    sandbox.close()
    assert set(_bwrap_children()) <= before  # every sandbox it started has ended


def _bwrap_children() -> list[str]:
    return subprocess.run(["pgrep", "-P", str(os.getpid()), "bwrap"], capture_output=True,
                          text=True, check=False).stdout.split()


def test_two_engines_share_sealed_placeholder_folders(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    one, two = Placeholders(), Placeholders()
    with one.holding([(str(root / ".claude"), True)]) as made:
        need_sealing(one.sealed(made) == set(made), "a placeholder folder sealed by another")
        with two.holding([(str(root / ".claude" / "settings.json"), False)]) as also:
            assert also == []  # held already by the other engine's sealed folder
    assert not (root / ".claude").exists()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_workspace_without_a_repository_cannot_be_given_one(sandbox: Sandbox,
                                                              ws: Path) -> None:
    out = shell(sandbox, ws, "git init -q . && git config core.fsmonitor 'touch pwned'")
    assert "exit code: 0" not in out
    assert not (ws / ".git").exists() and not (ws / "pwned").exists()


def test_kernel_settings_and_new_namespaces_are_out_of_reach(sandbox: Sandbox,
                                                             ws: Path) -> None:
    current = Path("/proc/sys/fs/file-max").read_text().strip()
    out = shell(sandbox, ws, f"sysctl -w fs.file-max={current}; echo {current} > "
                             f"/proc/sys/fs/file-max; unshare -Urm true && echo NESTED")
    assert "permission denied" in out.lower() or "read-only" in out.lower()
    assert "NESTED" not in out


def test_private_folders_are_small(sandbox: Sandbox, ws: Path) -> None:
    out = shell(sandbox, ws, "for i in $(seq 1 20); do head -c 900000 /dev/zero > /tmp/f$i; "
                             "done; cat /tmp/f* | wc -c")
    assert int(out.split()[-1]) <= 8 * 1024 * 1024


def test_limits_stop_a_fork_bomb_a_memory_hog_and_an_endless_loop(sandbox: Sandbox,
                                                                  ws: Path) -> None:
    bomb = shell(sandbox, ws, "f(){ f | f & }; f; sleep 5", timeout=20)
    assert "process limit" in bomb
    hog = shell(sandbox, ws, "python3 -c \"b = bytearray(2 * 1024 ** 3); print('allocated')\"")
    assert "MemoryError" in hog and "allocated" not in hog
    spin = shell(sandbox, ws, "while :; do :; done", timeout=30)
    assert "CPU time limit" in spin or "SIGXCPU" in spin
    big = shell(sandbox, ws, "head -c 5000000 /dev/zero > big.bin")
    assert "file size limit" in big and os.path.getsize(ws / "big.bin") <= 1024 * 1024
    # Each was stopped, and the sandbox still serves the next call.
    assert shell(sandbox, ws, "echo alive").rstrip().endswith("alive")


def test_without_cgroups_a_root_engine_counts_processes_itself(sandbox: Sandbox,
                                                                ws: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the process watchdog serves a root engine only (RLIMIT_NPROC binds "
                    "everyone else)")
    sandbox.cgroup_parent = ""
    # Not a real fork bomb: without a cgroup one outruns any poll and starves the machine.
    many = shell(sandbox, ws, "for i in $(seq 1 100); do sleep 5 & done; wait", timeout=20)
    assert "more than 64 processes" in many and "stopped" in many


def test_a_cancelled_call_leaves_nothing_running(sandbox: Sandbox, ws: Path) -> None:
    grant = Grant()
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(shell(
        sandbox, ws, "(while :; do date +%s%N >> ticks; sleep 0.05; done) & wait", grant)))
    thread.start()
    deadline = time.monotonic() + 10
    while not (ws / "ticks").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    grant.cancel.set()
    thread.join(10)
    assert "cancelled" in result[0]
    lines = (ws / "ticks").read_text().count("\n")
    time.sleep(0.3)
    assert (ws / "ticks").read_text().count("\n") == lines


def test_a_timed_out_call_leaves_no_background_writer(sandbox: Sandbox, ws: Path) -> None:
    out = shell(sandbox, ws, "setsid sh -c 'while :; do echo x >> bg; sleep 0.05; done' &"
                             " sleep 30", timeout=0.5)
    assert "timed out" in out
    size = (ws / "bg").stat().st_size
    time.sleep(0.3)
    assert (ws / "bg").stat().st_size == size


def test_git_tools_run_read_only(sandbox: Sandbox, ws: Path) -> None:
    _git_init(ws)
    shell(sandbox, ws, "git add README.md && git -c user.email=a@b -c user.name=a "
                       "commit -qm init")
    (ws / "README.md").write_text("changed\n")
    tools = BuiltinTools(timeout=10, sandbox=sandbox, env=dict(os.environ))
    assert "changed" in tools.execute("git_diff", {}, str(ws)).content
    assert "M README.md" in tools.execute("git_status", {}, str(ws)).content
    profile = tools.sandbox_profile("git_diff", Grant())
    assert profile is not None and profile.writable == "none" and not profile.network


# --- no sandbox ---------------------------------------------------------------------------


def test_without_a_sandbox_shell_tools_are_refused_in_one_line(ws: Path) -> None:
    tools = BuiltinTools()
    out = tools.execute("run_shell", {"command": "echo x > pwned"}, str(ws))
    assert out.is_error and out.content.startswith("refused:") and "\n" not in out.content
    assert "bubblewrap" in out.content and not (ws / "pwned").exists()
    assert tools.execute("git_status", {}, str(ws)).is_error
    assert tools.sandbox_profile("run_shell", Grant()) is None


def test_with_the_sandbox_off_commands_run_plain_and_say_so(ws: Path) -> None:
    tools = BuiltinTools(sandbox=Unconfined(True, "off"))
    out = tools.execute("run_shell", {"command": "echo hi > f && cat f"}, str(ws))
    assert out.content.endswith("hi\n") and (ws / "f").exists()
    profile = tools.sandbox_profile("run_shell", Grant())
    assert profile is not None and profile.kind == "none"


def test_a_nested_repository_configuration_is_held_too(sandbox: Sandbox, ws: Path) -> None:
    sub = ws / "vendor"
    (sub / ".git").mkdir(parents=True)
    (sub / ".git" / "config").write_text("[core]\n")
    shell(sandbox, ws, "echo '[alias] x = !touch pwned' >> vendor/.git/config")
    assert (sub / ".git" / "config").read_text() == "[core]\n"


def test_a_file_write_lands_where_it_was_judged_or_nowhere(ws: Path) -> None:
    (ws / "notes.md").symlink_to("SOUL.md")  # swapped in after notes.md was judged
    tools = BuiltinTools()
    judged = Grant(writes=(str(ws / "notes.md"),))
    out = tools.execute("write_file", {"path": "notes.md", "content": "pwned"}, str(ws), judged)
    assert out.is_error and "nothing was written" in out.content
    assert (ws / "SOUL.md").read_text() == "soul\n"
    (ws / "notes.md").unlink()
    (ws / "notes.md").write_text("old")
    out = tools.execute("write_file", {"path": "notes.md", "content": "new"}, str(ws), judged)
    assert not out.is_error and (ws / "notes.md").read_text() == "new"


def test_only_the_cgroups_of_dead_engines_are_swept(tmp_path: Path) -> None:
    parent = find_parent()
    if not parent:
        pytest.skip("no cgroup can be made here")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(parent) / f"tether-{dead.pid}-0123456789ab"
    stale.mkdir()
    pool = CgroupPool(parent, 8)
    with pool.cgroup() as mine:
        pass
    assert sweep_cgroups(parent) >= 1
    assert not stale.exists() and os.path.isdir(mine.path)  # a live engine's stays
    pool.close()
    assert not os.path.exists(mine.path)
