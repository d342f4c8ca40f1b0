"""The sandbox's cost on a short command: bubblewrap against a plain subprocess.

The sandbox is the one the host builds from default settings
(:func:`adapters.host.build_sandbox`: default protection lists, limits and visible home
entries, the placeholder ledger in a temporary state directory), and the commands run with
the shell tools' environment (:func:`adapters.host.tool_environment`). The workspace is a
small git repository in a temporary folder holding SOUL.md and AGENTS.md; IDENTITY.md and
the other protected files are absent, so each writable call makes (and removes) their
placeholders. Commands: ``true``, ``ls`` and ``git status``.

* **Sandbox.run**: ``Sandbox.run(argv, writable=True)`` (protected-file discovery,
  placeholders, the bwrap and prlimit command line, :func:`adapters.process.run_process`)
  against ``subprocess.run(argv)`` with stdout and stderr captured (the raw baseline).
* **run_shell**: the whole tool path, ``BuiltinTools(sandbox=...).execute("run_shell",
  {"command": C})``, against ``subprocess.run(["bash", "-c", C])``; the same tools with
  the sandbox off (``Unconfined(True, ...)``) are shown too, to tell the tool's own cost
  from the sandbox's.
* **where the time goes**: one sandboxed ``true`` taken apart: bwrap with a minimal
  command line; the call's own bwrap command line (recorded from a real call, replayed with
  its placeholders held outside the timing), the same without the placeholder mounts,
  without prlimit, without a network namespace; the whole call split into its time in
  ``run_process`` and the Python work around it (and, where each call gets a pids cgroup,
  the same call without one); protected-file discovery and placeholders on their own.

Each side runs in alternating blocks (plain, sandboxed, plain, sandboxed...) after a
warm-up, so load from other processes falls on both. Figures are wall milliseconds per
call, p50 and p90; ``added`` is sandboxed p50 - plain p50, checked against the issue's goal
of under :data:`GOAL_MS` ms added per call. Cost ratios (sandboxed p50 / plain p50):
``RATIO sandbox/plain <cmd>`` for Sandbox.run and ``RATIO sandbox/plain run_shell <cmd>``.

Where bubblewrap is not usable, one line says why and the benchmark ends (exit 0).

``python -m bench.sandbox [--quick]``
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import tether.adapters.sandbox.runner as sandbox_runner
from bench.common import Printer, ratio, say, table
from tether.actors.ports import Grant
from tether.adapters.config import load_settings
from tether.adapters.host import build_sandbox, tool_environment
from tether.adapters.process import run_process
from tether.adapters.sandbox import Placeholders, Sandbox, protected_targets
from tether.adapters.sandbox.bwrap import bwrap_argv
from tether.adapters.sandbox.prepared import Prepared
from tether.adapters.tools import BuiltinTools
from tether.adapters.tools.shell import Unconfined

GOAL_MS = 10.0
"""The issue's goal: the sandbox adds less than this per call (p50, milliseconds)."""

PAUSE_SECONDS = 0.05
"""The pause before each timed call, on both sides: an agent's tool calls come one model
reply apart (seconds), and the sandbox builds the next call's sandbox in that time. Calls
back to back, with no pause, are measured too (``true`` only)."""

FULL_N = 200
FULL_WARMUP = 10
FULL_BLOCK = 20
QUICK_N = 6
QUICK_WARMUP = 1
QUICK_BLOCK = 3
FULL_PARTS_N = 100
QUICK_PARTS_N = 3
PARTS_BLOCK = 10
PYTHON_REPEATS = 200
"""Calls per Python-only part of the breakdown (they take microseconds to a millisecond)."""

TIMEOUT = 30.0
CAP = 30_000

Commands = tuple[tuple[str, list[str]], ...]
COMMANDS: Commands = (
    ("true", ["true"]),
    ("ls", ["ls"]),
    ("git status", ["git", "status"]),
)
"""(name, argv): the short commands measured; run_shell gets the name as its command."""

FILES = {
    "README.md": "# demo\n",
    "SOUL.md": "who I am\n",
    "AGENTS.md": "how to work here\n",
    "src/__init__.py": "",
    "src/app.py": "print('hi')\n",
    "tests/test_app.py": "def test_app():\n    assert True\n",
}
"""The workspace's files (committed); IDENTITY.md is left absent on purpose."""

_MOUNTS = ("--tmpfs", "--ro-bind-try", "--bind", "--ro-bind")


@dataclass(frozen=True)
class Timing:
    """Wall time per call of one case, in milliseconds."""

    n: int
    p50_ms: float
    p90_ms: float

    @classmethod
    def of(cls, samples_ns: Sequence[int]) -> Timing:
        """p50 and p90 (nearest rank) of per-call samples in nanoseconds."""
        ordered = sorted(samples_ns)
        n = len(ordered)
        p90 = ordered[min(n - 1, max(0, math.ceil(0.9 * n) - 1))]
        return cls(n, statistics.median(ordered) / 1e6, p90 / 1e6)


@dataclass(frozen=True)
class Row:
    """One command: the plain baseline, the sandboxed call and (run_shell only) the tool
    with the sandbox off."""

    command: str
    plain: Timing
    sandboxed: Timing
    unconfined: Timing | None = None

    @property
    def added_ms(self) -> float:
        """Sandboxed p50 - plain p50."""
        return self.sandboxed.p50_ms - self.plain.p50_ms

    @property
    def ratio(self) -> float:
        """Sandboxed p50 / plain p50 (a cost ratio: above 1, the sandbox is slower)."""
        return ratio(self.sandboxed.p50_ms, self.plain.p50_ms)


@dataclass(frozen=True)
class SandboxResults:
    """Everything measured: a row per command for Sandbox.run and for run_shell."""

    bare: list[Row]
    shell: list[Row]

    @property
    def worst(self) -> tuple[str, Row]:
        """The path and row with the most time added."""
        rows = [("Sandbox.run", r) for r in self.bare] + [("run_shell", r) for r in self.shell]
        return max(rows, key=lambda item: item[1].added_ms)

    @property
    def goal_met(self) -> bool:
        """Whether every command, on both paths, adds less than :data:`GOAL_MS`."""
        return self.worst[1].added_ms < GOAL_MS

    def ratio_lines(self) -> list[str]:
        """The ``RATIO`` lines, in the fixed format."""
        return [f"RATIO sandbox/plain {r.command} = {r.ratio:.2f}" for r in self.bare] + [
            f"RATIO sandbox/plain run_shell {r.command} = {r.ratio:.2f}" for r in self.shell
        ]


# --- timing -------------------------------------------------------------------------------


Call = Callable[[], object]


def alternate(cases: Sequence[Call], n: int, warmup: int, block: int,
              pause: float = 0.0) -> list[list[int]]:
    """Warm each case up (``warmup`` calls), then ``n`` timed calls of each in alternating
    blocks of ``block``, each after ``pause`` seconds (not timed); returns each case's
    per-call wall times in nanoseconds."""
    for case in cases:
        for _ in range(warmup):
            case()
    samples: list[list[int]] = [[] for _ in cases]
    done = 0
    while done < n:
        size = min(block, n - done)
        for i, case in enumerate(cases):
            for _ in range(size):
                if pause:
                    time.sleep(pause)
                t0 = time.perf_counter_ns()
                case()
                samples[i].append(time.perf_counter_ns() - t0)
        done += size
    return samples


def alternate_blocks(
    cases: Sequence[Callable[[int], list[int]]], n: int, warmup: int, block: int
) -> list[list[int]]:
    """Like :func:`alternate` for cases that time their own calls: each is called with a
    count and returns that many per-call times (ns), so work around the calls (holding
    placeholders) stays out of the timing."""
    for case in cases:
        case(warmup)
    samples: list[list[int]] = [[] for _ in cases]
    done = 0
    while done < n:
        size = min(block, n - done)
        for i, case in enumerate(cases):
            samples[i].extend(case(size))
        done += size
    return samples


def timed(call: Call, n: int) -> list[int]:
    """``n`` calls of ``call``, each timed (ns)."""
    out: list[int] = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        call()
        out.append(time.perf_counter_ns() - t0)
    return out


# --- workspace and the calls compared --------------------------------------------------------


@contextlib.contextmanager
def scratch() -> Iterator[tuple[str, str]]:
    """A temporary ``(workspace, state directory)``: the workspace is a git repository with
    :data:`FILES` committed, one file changed since and one untracked."""
    with tempfile.TemporaryDirectory(prefix="tether-bench-sandbox-") as root:
        workspace = os.path.join(root, "workspace")
        state = os.path.join(root, "state")
        os.makedirs(state)
        for name, content in FILES.items():
            path = os.path.join(workspace, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(content)
        if shutil.which("git"):
            git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
            for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
                subprocess.run([*git, *args], cwd=workspace, check=True, capture_output=True)
            with open(os.path.join(workspace, "src", "app.py"), "a", encoding="utf-8") as fh:
                fh.write("print('more')\n")
            with open(os.path.join(workspace, "notes.txt"), "w", encoding="utf-8") as fh:
                fh.write("todo\n")
        yield os.path.realpath(workspace), state


def plain(argv: list[str], workspace: str, env: dict[str, str]) -> Call:
    """The raw baseline: ``subprocess.run(argv)``, output captured, checked."""

    def call() -> None:
        done = subprocess.run(argv, cwd=workspace, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"plain {argv} failed ({done.returncode}): {done.stdout!r}")

    return call


def boxed(sandbox: Sandbox, argv: list[str], workspace: str, env: dict[str, str]) -> Call:
    """``Sandbox.run(argv)`` with the workspace writable, as ``run_shell`` runs it."""

    def call() -> None:
        done = sandbox.run(argv, workspace, grant=Grant(), writable=True, env=env,
                           timeout=TIMEOUT, cap=CAP)
        if done.code != 0 or done.timed_out or done.stopped:
            raise RuntimeError(f"sandboxed {argv} failed ({done.code}): {done.output!r}")

    return call


def tool(tools: BuiltinTools, command: str, workspace: str) -> Call:
    """``tools.execute("run_shell", {"command": command})``, checked."""

    def call() -> None:
        out = tools.execute("run_shell", {"command": command}, workspace)
        if out.is_error:
            raise RuntimeError(f"run_shell {command!r} failed: {out.content!r}")

    return call


# --- 1 and 2: per command -------------------------------------------------------------------


def measure_bare(
    sandbox: Sandbox, workspace: str, env: dict[str, str], commands: Commands, n: int,
    warmup: int, block: int, pause: float = 0.0,
) -> list[Row]:
    """Sandbox.run against subprocess.run, per command, each call after ``pause``."""
    rows = []
    for name, argv in commands:
        plain_ns, boxed_ns = alternate(
            [plain(argv, workspace, env), boxed(sandbox, argv, workspace, env)], n, warmup,
            block, pause)
        rows.append(Row(name, Timing.of(plain_ns), Timing.of(boxed_ns)))
    return rows


def measure_shell(
    sandbox: Sandbox, workspace: str, env: dict[str, str], commands: Commands, n: int,
    warmup: int, block: int, pause: float = 0.0,
) -> list[Row]:
    """``execute("run_shell")`` sandboxed and unconfined against ``bash -c``, per command,
    each call after ``pause``."""
    contained = BuiltinTools(env=env, sandbox=sandbox, timeout=TIMEOUT)
    loose = BuiltinTools(env=env, sandbox=Unconfined(True, "bench: the sandbox off"),
                         timeout=TIMEOUT)
    rows = []
    for name, _ in commands:
        plain_ns, loose_ns, boxed_ns = alternate(
            [plain(["bash", "-c", name], workspace, env), tool(loose, name, workspace),
             tool(contained, name, workspace)], n, warmup, block, pause)
        rows.append(Row(name, Timing.of(plain_ns), Timing.of(boxed_ns), Timing.of(loose_ns)))
    return rows


# --- 3. where the time goes -----------------------------------------------------------------


def call_command(sandbox: Sandbox, argv: list[str], workspace: str) -> list[str]:
    """The bwrap command line that runs ``argv`` in ``workspace``'s sandbox as a call
    would, with every placeholder mounted (as where placeholders cannot be sealed)."""
    cold = copy.copy(sandbox)
    cold.placeholders = Placeholders(seal=False)
    with cold._plan(workspace, writes=(), network=False, writable=True) as (plan, _):
        return bwrap_argv(sandbox.bwrap, plan, argv, prlimit=sandbox.prlimit,
                          limits=sandbox.limits)


def without_mounts(command: list[str], paths: set[str]) -> list[str]:
    """``command`` less every bind mount onto one of ``paths``."""
    out: list[str] = []
    i = 0
    while i < len(command):
        if command[i] in ("--bind", "--ro-bind") and command[i + 2] in paths:
            i += 3
            continue
        out.append(command[i])
        i += 1
    return out


def mounts(command: list[str]) -> int:
    """How many mounts a bwrap ``command`` makes besides ``/``, ``/dev`` and ``/proc``."""
    end = command.index("--")
    return sum(1 for a in command[:end] if a in _MOUNTS) - 1


@dataclass(frozen=True)
class Part:
    """One line of the breakdown."""

    label: str
    timing: Timing


class SplitRun:
    """Sandbox.run of one command, each call's wall time split into the time spent with
    the process (``run_process``, or a launcher's start and ``watch_process``) and the rest
    (the Python work around it)."""

    def __init__(self, sandbox: Sandbox, argv: list[str], workspace: str,
                 env: dict[str, str]) -> None:
        self.call = boxed(sandbox, argv, workspace, env)
        self.inside: list[int] = []
        self.outside: list[int] = []

    def __call__(self, count: int) -> list[int]:
        spent: list[int] = []

        def timing(real: Callable[..., Any]) -> Callable[..., Any]:
            def timed_call(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter_ns()
                try:
                    return real(*args, **kwargs)
                finally:
                    spent.append(time.perf_counter_ns() - t0)

            return timed_call

        totals: list[int] = []
        with (mock.patch.object(sandbox_runner, "watch_process",
                                timing(sandbox_runner.watch_process)),
              mock.patch.object(Prepared, "start", timing(Prepared.start))):
            for _ in range(count):
                spent.clear()
                t0 = time.perf_counter_ns()
                self.call()
                total = time.perf_counter_ns() - t0
                totals.append(total)
                self.inside.append(sum(spent))
                self.outside.append(total - sum(spent))
        return totals


def measure_parts(
    sandbox: Sandbox, workspace: str, env: dict[str, str], n: int, warmup: int
) -> tuple[list[Part], list[str]]:
    """The breakdown of one sandboxed ``true``, and lines describing the call."""
    command = call_command(sandbox, ["true"], workspace)
    if sandbox.bwrap not in command:
        return [], ["the call's command line could not be recorded: no breakdown"]
    bwrap = command[command.index(sandbox.bwrap):]
    if bwrap.count("--") < 2:
        return [], ["the call's command line is not bwrap -- prlimit -- ...: no breakdown"]
    targets = protected_targets(workspace, sandbox.protected)
    absent = [(t.path, t.is_dir) for t in targets if not t.exists]
    with sandbox.placeholders.holding(absent) as made:
        made_paths = set(made)
    inner = bwrap.index("--")
    after_prlimit = bwrap.index("--", inner + 1)
    no_prlimit = bwrap[: inner + 1] + bwrap[after_prlimit + 1 :]
    no_placeholders = without_mounts(bwrap, made_paths)
    shared_net = [*bwrap[:inner], "--share-net", *bwrap[inner:]]
    minimal = [sandbox.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--", "true"]

    def process(argv: list[str], hold: bool) -> Callable[[int], list[int]]:
        def case(count: int) -> list[int]:
            def one() -> None:
                done = run_process(argv, workspace, env, timeout=TIMEOUT, cap=CAP)
                if done.code != 0:
                    raise RuntimeError(f"{argv[:3]}... failed ({done.code}): {done.output!r}")

            if not hold:
                return timed(one, count)
            with sandbox.placeholders.holding(absent):
                return timed(one, count)

        return case

    split = SplitRun(sandbox, ["true"], workspace, env)
    cases: list[tuple[str, Callable[[int], list[int]]]] = [
        ("run_process(['true']), no sandbox", process(["true"], False)),
        ("bwrap, minimal (--ro-bind / /, --dev, --proc, --unshare-all)",
         process(minimal, False)),
        (f"bwrap + prlimit: the call's command line ({mounts(bwrap)} mounts)",
         process(bwrap, True)),
        (f"  the same without the {mounts(bwrap) - mounts(no_placeholders)} placeholder "
         "mounts", process(no_placeholders, True)),
        ("  the same without prlimit", process(no_prlimit, True)),
        ("  the same with --share-net (no network namespace)", process(shared_net, True)),
        ("Sandbox.run(['true']): all of it", split),
    ]
    if getattr(sandbox, "cgroup_parent", ""):
        # Sandboxes that put each call in a pids cgroup of its own: the same call without.
        plain_box = copy.copy(sandbox)
        plain_box.cgroup_parent = ""
        cases.append(("  the same with no per-call cgroup (cgroup_parent='')",
                      lambda count: timed(boxed(plain_box, ["true"], workspace, env), count)))
    samples = alternate_blocks([case for _, case in cases], n, warmup, PARTS_BLOCK)
    parts = [Part(label, Timing.of(s)) for (label, _), s in zip(cases, samples, strict=True)]
    cgroup = bool(getattr(sandbox, "cgroup_parent", ""))
    what = ("bwrap started ahead in the call's cgroup, prlimit, true" if cgroup
            else "bwrap, prlimit, true")
    whole = next(i for i, (_, case) in enumerate(cases) if case is split)
    parts[whole + 1 : whole + 1] = [
        Part(f"  of which with the process ({what})", Timing.of(split.inside[warmup:])),
        Part("  of which around it (Python: protected files, placeholders, new "
             "repositories, the plan)", Timing.of(split.outside[warmup:])),
    ]

    def hold_release(placeholders: Placeholders) -> Call:
        def call() -> None:
            with placeholders.holding(absent):
                pass

        return call

    python: list[tuple[str, Call]] = [
        (f"python: protected_targets ({len(sandbox.protected)} patterns)",
         lambda: protected_targets(workspace, sandbox.protected)),
        (f"python: {len(made_paths)} placeholders made and removed, ledger written twice",
         hold_release(sandbox.placeholders)),
        ("python: the same without a ledger", hold_release(Placeholders())),
    ]
    py_samples = alternate([call for _, call in python], PYTHON_REPEATS, PYTHON_REPEATS // 10,
                           PYTHON_REPEATS // 4)
    parts += [Part(label, Timing.of(s)) for (label, _), s in zip(python, py_samples, strict=True)]
    lines = [f"one writable call: {len(targets)} protected paths, {len(absent)} absent "
             f"({len(made_paths)} placeholders with the folders on their way), "
             f"{mounts(bwrap)} mounts"]
    if cgroup:
        lines.append("each call's bwrap is started ahead, after the call before it, and "
                     "joins the call's pids cgroup then (a cgroup v1 join waits for an RCU "
                     "grace period: 5-20 ms here)")
    return parts, lines


# --- running --------------------------------------------------------------------------------


class WarningCount(logging.Handler):
    """Counts what the adapters log at WARNING and above during the run (one line per
    call would bury the tables), keeping each distinct message's first rendering."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        key = f"{record.name}: {record.msg}"
        self.counts[key] = self.counts.get(key, 0) + 1
        self.first.setdefault(key, f"{record.name}: {record.getMessage()}")

    def lines(self) -> list[str]:
        """A line per distinct message: how often, and its first rendering."""
        return [f"  {count} x {self.first[key]}" for key, count in self.counts.items()]


@contextlib.contextmanager
def counting_warnings(name: str = "tether.adapters") -> Iterator[WarningCount]:
    """Route logger ``name``'s warnings to a :class:`WarningCount` for the block."""
    logger = logging.getLogger(name)
    handler = WarningCount()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate



def _ms(value: float) -> str:
    return f"{value:.2f}"


def _bare_table(rows: list[Row]) -> list[str]:
    return table(
        ["command", "plain p50", "plain p90", "sandbox p50", "sandbox p90", "added", "ratio"],
        [[r.command, _ms(r.plain.p50_ms), _ms(r.plain.p90_ms), _ms(r.sandboxed.p50_ms),
          _ms(r.sandboxed.p90_ms), _ms(r.added_ms), f"{r.ratio:.2f}"] for r in rows])


def run(quick: bool = False, out: Printer = say) -> SandboxResults | None:
    """Measure and print; None (after one line saying why) where bubblewrap is not usable."""
    n, warmup, block = (QUICK_N, QUICK_WARMUP, QUICK_BLOCK) if quick else (
        FULL_N, FULL_WARMUP, FULL_BLOCK)
    parts_n = QUICK_PARTS_N if quick else FULL_PARTS_N
    env = tool_environment()
    with counting_warnings() as warnings, scratch() as (workspace, state):
        settings = load_settings(
            env={"TETHER_STATE_DIR": state, "TETHER_WORKSPACE": workspace},
            cwd=os.path.dirname(state),
        )
        sandbox, report = build_sandbox(settings)
        if not isinstance(sandbox, Sandbox):
            out(f"== sandbox: SKIPPED, bubblewrap is not usable here: {sandbox.reason}")
            return None
        commands = COMMANDS
        if not shutil.which("git"):
            out("git is not on the PATH: git status is left out")
            commands = tuple(c for c in COMMANDS if c[1][0] != "git")
        version = report.version if report else ""
        cgroups = getattr(sandbox, "cgroup_parent", None)
        out(f"== sandbox: {version or 'bubblewrap'} ({sandbox.bwrap}), prlimit "
            f"({sandbox.prlimit}), uid {os.geteuid()}"
            + ("" if cgroups is None else f", per-call pids cgroup under {cgroups}"
               if cgroups else ", no per-call cgroup"))
        out(f"workspace: a small git repository with SOUL.md and AGENTS.md, IDENTITY.md "
            f"absent; N={n} calls per case, warm-up {warmup}, alternating blocks of {block}")
        out()
        out(f"-- Sandbox.run(argv, writable=True) vs plain subprocess.run(argv), ms per call, "
            f"each call {PAUSE_SECONDS * 1000:.0f} ms after the one before")
        bare = measure_bare(sandbox, workspace, env, commands, n, warmup, block,
                            PAUSE_SECONDS)
        for line in _bare_table(bare):
            out(line)
        out()
        out("-- the same back to back (no pause: the next call's sandbox may not be built "
            "yet)")
        back_to_back = measure_bare(sandbox, workspace, env, commands[:1], n, warmup, block)
        for line in _bare_table(back_to_back):
            out(line)
        out()
        out('-- execute("run_shell", {"command": C}): sandboxed, and with the sandbox off, '
            f'vs plain subprocess.run(["bash", "-c", C]), ms per call, each '
            f'{PAUSE_SECONDS * 1000:.0f} ms after the one before')
        shell = measure_shell(sandbox, workspace, env, commands, n, warmup, block,
                              PAUSE_SECONDS)
        rows = []
        for r in shell:
            loose = r.unconfined or r.plain
            rows.append([r.command, _ms(r.plain.p50_ms), _ms(r.plain.p90_ms),
                         _ms(loose.p50_ms), _ms(loose.p90_ms), _ms(r.sandboxed.p50_ms),
                         _ms(r.sandboxed.p90_ms), _ms(r.added_ms), f"{r.ratio:.2f}"])
        for line in table(
            ["command", "plain p50", "plain p90", "off p50", "off p90", "sandbox p50",
             "sandbox p90", "added", "ratio"],
            rows,
        ):
            out(line)
        out()
        out(f"-- where a sandboxed `true` goes, calls back to back (N={parts_n} per part, "
            f"alternating blocks of {PARTS_BLOCK}; Python parts {PYTHON_REPEATS} calls each)")
        parts, notes = measure_parts(sandbox, workspace, env, parts_n, max(1, warmup // 2))
        for note in notes:
            out(note)
        if parts:
            for line in table(["part", "p50 ms", "p90 ms"],
                              [[p.label, f"{p.timing.p50_ms:.3f}", f"{p.timing.p90_ms:.3f}"]
                               for p in parts]):
                out(line)
    results = SandboxResults(bare, shell)
    if warnings.counts:
        out()
        out(f"the adapters logged {sum(warnings.counts.values())} warnings during the run "
            "(not printed one by one):")
        for line in warnings.lines():
            out(line)
    out()
    out(f"goal (issue): under {GOAL_MS:g} ms added per call (sandboxed p50 - plain p50)")
    for path, group in (("Sandbox.run", bare), ("run_shell", shell)):
        worst = max(group, key=lambda r: r.added_ms)
        verdict = "met" if worst.added_ms < GOAL_MS else "NOT met"
        out(f"  {path}: " + ", ".join(f"{r.command} +{r.added_ms:.2f} ms" for r in group)
            + f": {verdict}")
    path, worst = results.worst
    out(f"GOAL sandbox under {GOAL_MS:g} ms added per call: "
        + ("met" if results.goal_met else "NOT met")
        + f" (worst: {path} {worst.command}, +{worst.added_ms:.2f} ms; calls "
           f"{PAUSE_SECONDS * 1000:.0f} ms apart)")
    for row in back_to_back:
        out(f"  back to back: Sandbox.run {row.command} +{row.added_ms:.2f} ms "
            f"(the next call's sandbox is still being built when it comes)")
    out("ratios are cost ratios: sandboxed p50 / plain p50 (above 1: the sandbox is slower)")
    for line in results.ratio_lines():
        out(line)
    for row in back_to_back:
        out(f"RATIO sandbox/plain back-to-back {row.command} = {row.ratio:.2f}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m bench.sandbox [--quick]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.sandbox",
        description="The bubblewrap sandbox's cost on true, ls and git status: Sandbox.run "
        "and the run_shell tool against a plain subprocess, in alternating blocks.",
    )
    parser.add_argument("--quick", action="store_true",
                        help=f"small N ({QUICK_N} calls per case) for smoke runs")
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
