"""What the sandbox can do on this machine: found by running it, not by guessing.

:func:`find_sandbox` locates bubblewrap and prlimit and runs one tiny sandboxed command
that proves the parts every call relies on: namespaces can be made, the file system is
read-only outside the workspace, the network is off, the PID namespace is private and the
limits are in force. :func:`probe` reports each part, for ``tether sandbox check``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import msgspec

from tether.actors.ports import Grant
from tether.adapters.sandbox.runner import Sandbox
from tether.events.sandbox import SandboxLimits

#: How to get bubblewrap, for the one line a refusal says.
HOW_TO_ENABLE = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap) and allow unprivileged user namespaces, or set sandbox = \"off\" in "
    "tether.toml to run commands unconfined, each one asked of a person"
)

# Each check prints one word on success; the probe reads them back.
_SCRIPT = r"""
ws=$1
echo ns-ok
( echo x > /etc/tether-probe ) 2>/dev/null && echo root-writable || echo root-read-only
( echo x > "$ws/probe.txt" ) 2>/dev/null && echo workspace-writable || echo workspace-read-only
[ "$(grep -c : /proc/net/dev)" = 1 ] && echo net-off || echo net-on
[ "$$" -lt 10 ] && echo pid-private || echo pid-shared
[ "$(ulimit -t)" != unlimited ] && echo limits-on || echo limits-off
[ "$(stat -f -c %T "$HOME" 2>/dev/null)" = tmpfs ] && echo home-hidden || echo home-visible
"""


class SandboxReport(msgspec.Struct, frozen=True):
    """The probe's findings: ``usable`` when every part a call relies on holds; ``checks``
    one line each (what, ok or not, detail); ``reason`` why it is not usable."""

    usable: bool
    bwrap: str = ""
    prlimit: str = ""
    version: str = ""
    checks: list[tuple[str, bool, str]] = []
    reason: str = ""


def _version(bwrap: str) -> str:
    try:
        done = subprocess.run([bwrap, "--version"], capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _process_limiter(sandbox: Sandbox) -> str:
    if sandbox.cgroup_parent:
        return "a pids cgroup per call"
    if os.geteuid() != 0:
        return "RLIMIT_NPROC"
    return "a watchdog polling every 50 ms (root, and no cgroup can be made)"


def probe(bwrap: str = "", prlimit: str = "") -> SandboxReport:
    """Run the sandbox once and say what holds. ``bwrap`` and ``prlimit`` name the
    binaries (default: found on PATH)."""
    bwrap = bwrap or shutil.which("bwrap") or ""
    prlimit = prlimit or shutil.which("prlimit") or ""
    if not bwrap:
        return SandboxReport(False, reason=f"bubblewrap (bwrap) is not on the PATH; "
                                           f"{HOW_TO_ENABLE}")
    if not prlimit:
        return SandboxReport(False, bwrap=bwrap, reason=(
            "prlimit (util-linux) is not on the PATH: the sandbox's limits cannot be set"))
    sandbox = Sandbox(bwrap, prlimit, limits=SandboxLimits(cpu_seconds=10))
    with tempfile.TemporaryDirectory(prefix="tether-probe-") as workspace:
        try:
            done = sandbox.run(["bash", "-c", _SCRIPT, "probe", workspace], workspace,
                               grant=Grant(), writable=True, env=dict(os.environ),
                               timeout=10, cap=10_000)
        except OSError as err:
            return SandboxReport(False, bwrap=bwrap, prlimit=prlimit,
                                 reason=f"bwrap could not start: {err}; {HOW_TO_ENABLE}")
    words = set(done.output.split())
    if "ns-ok" not in words:
        first = done.output.strip().splitlines()[:1]
        detail = first[0] if first else f"exit code {done.code}"
        return SandboxReport(False, bwrap=bwrap, prlimit=prlimit, version=_version(bwrap),
                             reason=f"bwrap could not build a sandbox ({detail}); "
                                    f"{HOW_TO_ENABLE}")
    checks = [
        ("namespaces", True, "user, PID, IPC, UTS, network"),
        ("file system read-only outside the workspace", "root-read-only" in words, ""),
        ("workspace writable", "workspace-writable" in words, ""),
        ("network off", "net-off" in words, "only a private loopback"),
        ("own PID namespace", "pid-private" in words, ""),
        ("resource limits", "limits-on" in words, "CPU, memory, file size, processes"),
        ("process limit enforced by", True, _process_limiter(sandbox)),
        ("home hidden", "home-hidden" in words, ""),
    ]
    failed = [name for name, ok, _ in checks if not ok]
    return SandboxReport(
        not failed, bwrap=bwrap, prlimit=prlimit, version=_version(bwrap), checks=checks,
        reason=f"the sandbox does not hold: {', '.join(failed)}" if failed else "")


def render_report(report: SandboxReport | None) -> str:
    """The report for people: one line per check (None: the settings turned it off)."""
    if report is None:
        return ('sandbox: OFF (sandbox = "off" in the settings): shell and git commands run '
                'as plain processes, and every shell command is asked of a person')
    lines = [f"sandbox: {'bubblewrap' if report.usable else 'UNAVAILABLE'}"
             + (f" ({report.version}, {report.bwrap})" if report.version else "")]
    for name, ok, detail in report.checks:
        lines.append(f"  [{'ok' if ok else 'NO'}] {name}" + (f": {detail}" if detail else ""))
    if report.prlimit:
        lines.append(f"  limits set with {report.prlimit}")
    if not report.usable:
        lines.append(f"  run_shell and the git tools are refused: {report.reason}")
    return "\n".join(lines)


def find_sandbox(**options: object) -> tuple[Sandbox | None, SandboxReport]:
    """A :class:`Sandbox` built with ``options`` when the probe says it holds, with the
    report either way."""
    report = probe()
    if not report.usable:
        return None, report
    return Sandbox(report.bwrap, report.prlimit, **options), report  # type: ignore[arg-type]
