"""The command tools: ``run_shell`` and the read-only git tools, each process inside the
sandbox.

Every process these tools start runs through :meth:`ShellTools._contained`: inside the
bubblewrap sandbox when there is one (``run_shell`` with the workspace writable, git with
nothing writable); as a plain process only when the settings turned the sandbox off
(``Unconfined(allowed=True)``); refused with one line saying why and how to enable it
otherwise. The call's :class:`~actors.ports.Grant` carries the network permission, the
protected files it may write, and the switch that kills its processes.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from tether.actors.gatekeeper.actor import PROCESS_TOOLS, SHELL_TOOLS
from tether.actors.ports import Grant, ToolOutput
from tether.adapters.process import Finished, run_process
from tether.adapters.sandbox import HOW_TO_ENABLE, Sandbox, UnholdablePath
from tether.adapters.tools.base import ToolError, ToolLimits
from tether.adapters.tools.schemas import GitDiffInput, GitStatusInput, RunShellInput
from tether.events.sandbox import SandboxProfile

#: Configuration that git commands run with, over anything the repository sets: no
#: fsmonitor hook, no hooks, no pager, no colour, UTF-8 paths shown as they are.
_GIT_SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.quotePath", "false"),
    ("color.ui", "never"),
)



class Unconfined(NamedTuple):
    """No sandbox. ``allowed``: the settings turned it off (processes run plain, and the
    gatekeeper asks a person for every shell call); otherwise every process tool is
    refused, saying ``reason``."""

    allowed: bool
    reason: str


#: What a BuiltinTools made without a sandbox does: refuse (fail closed).
NO_SANDBOX = Unconfined(False, f"no sandbox was configured; {HOW_TO_ENABLE}")


def _exit_header(done: Finished, timeout: float) -> str:
    if done.timed_out:
        return f"command timed out after {timeout:g} s; its processes were killed"
    if done.stopped:
        return f"command {done.stopped}; its processes were killed"
    code = done.code
    # A process killed by a signal: -N from a plain child, 128+N through bash or bwrap.
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    try:
        name = signal.Signals(number).name if number else ""
    except ValueError:
        name = str(number)
    if not name:
        return f"exit code: {code}"
    why = {signal.SIGXCPU: ": the CPU time limit", signal.SIGXFSZ: ": the file size limit"}
    return f"exit code: {code} (killed by signal {name}{why.get(number, '')})"  # type: ignore[call-overload]


class ShellTools(ToolLimits):
    """Running bash and git in the workspace, contained."""

    env: dict[str, str] | None
    sandbox: Sandbox | Unconfined

    def sandbox_profile(self, name: str, grant: Grant) -> SandboxProfile | None:
        """The containment tool ``name`` runs under with ``grant``; None for a tool that
        starts no process, or when it would be refused."""
        if name not in PROCESS_TOOLS:
            return None
        writable = name in SHELL_TOOLS  # the git tools' sandbox has nothing writable
        if isinstance(self.sandbox, Sandbox):
            return self.sandbox.profile(grant, writable=writable, wall_seconds=self.timeout)
        if self.sandbox.allowed:
            return SandboxProfile(kind="none", network=True, wall_seconds=self.timeout)
        return None

    def _contained(
        self, argv: list[str], workspace: str, env: Mapping[str, str] | None,
        grant: Grant, *, writable: bool,
    ) -> Finished:
        """Run ``argv`` as the module's contract says; raises ToolError when refused."""
        box = self.sandbox
        if isinstance(box, Sandbox):
            try:
                return box.run(argv, workspace, grant=grant, writable=writable, env=env,
                               timeout=self.timeout, cap=self.max_output_chars)
            except UnholdablePath as err:
                raise ToolError(f"refused: {err}") from err
        if not box.allowed:
            raise ToolError(f"refused: {argv[0]} runs only inside the sandbox, and there is "
                            f"none: {box.reason}")
        return run_process(argv, os.path.realpath(workspace), env, timeout=self.timeout,
                           cap=self.max_output_chars, cancel=grant.cancel)

    def _run_shell(self, args: RunShellInput, workspace: str, grant: Grant) -> ToolOutput:
        if not args.command.strip():
            raise ToolError("run_shell needs a non-empty command")
        try:
            done = self._contained(["bash", "-c", args.command], workspace, self.env, grant,
                                   writable=True)
        except OSError as err:
            raise ToolError(f"could not start bash: {err.strerror or err}") from err
        failed = done.timed_out or bool(done.stopped) or done.code != 0
        return ToolOutput(f"{_exit_header(done, self.timeout)}\n{done.output}", is_error=failed)

    def _git_env(self, overrides: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
        """The environment of git commands: no inherited ``GIT_*`` variables (they could
        point git at another repository or run an external diff), repository discovery
        stopped at the workspace (``GIT_CEILING_DIRECTORIES`` is set per call), literal
        pathspecs, no optional locks (status does not rewrite the index), and the
        configuration ``overrides`` (passed as ``GIT_CONFIG_*``, which outrank every file).
        """
        base = self.env if self.env is not None else os.environ
        env = {k: v for k, v in base.items() if not k.startswith("GIT_")}
        env.update(
            GIT_OPTIONAL_LOCKS="0",
            GIT_LITERAL_PATHSPECS="1",
            GIT_TERMINAL_PROMPT="0",
            GIT_PAGER="cat",
        )
        items = list(_GIT_SAFE_CONFIG) + list(overrides)
        env["GIT_CONFIG_COUNT"] = str(len(items))
        for index, (key, value) in enumerate(items):
            env[f"GIT_CONFIG_KEY_{index}"] = key
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        return env

    def _git_quick(
        self, argv: list[str], root: str, env: Mapping[str, str], grant: Grant
    ) -> tuple[int, str]:
        """Run a small git query in ``root``, read-only: ``(exit code, output)``."""
        try:
            done = self._contained(["git", *argv], root, env, grant, writable=False)
        except FileNotFoundError as err:
            raise ToolError("git is not installed (or not on the PATH)") from err
        if done.timed_out or done.stopped:
            raise ToolError(f"git did not answer within {self.timeout:g} s")
        return done.code, done.output

    def _git(self, argv: list[str], workspace: str, grant: Grant) -> str:
        """Run ``git argv`` read-only in the repository at the top of ``workspace``.

        Refuses a workspace that is not the top of a work tree (git never looks at the
        folders above it, and a ``core.worktree`` elsewhere is refused). Commands that the
        repository's configuration could make git run are switched off: the fsmonitor
        hook, hooks, external diff and textconv (also by the callers' flags), and every
        clean/smudge filter driver found in the configuration. Returns the capped output.
        """
        root = os.path.realpath(workspace)
        env = self._git_env()
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(root)
        code, out = self._git_quick(["rev-parse", "--show-toplevel"], root, env, grant)
        if code != 0:
            reason = out.strip().splitlines()[0] if out.strip() else f"exit code {code}"
            raise ToolError(
                f"the workspace {workspace} is not a git repository (git looks only at the "
                f"workspace itself, not the folders above it): {reason}"
            )
        top = os.path.realpath(out.strip())
        if top != root:
            raise ToolError(
                f"refused: the repository's work tree is {top}, not the workspace {workspace}"
            )
        code, out = self._git_quick(
            ["config", "-z", "--name-only", "--get-regexp", r"^filter\."], root, env, grant
        )
        drivers = {
            name[len("filter.") :].rsplit(".", 1)[0]
            for name in (out.split("\0") if code == 0 else [])
            if name.startswith("filter.") and name.count(".") >= 2
        }
        neutral = [
            (f"filter.{driver}.{key}", value)
            for driver in sorted(drivers)
            for key, value in (
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            )
        ]
        env = self._git_env(neutral)
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(root)
        try:
            done = self._contained(["git", "--no-pager", *argv], workspace, env, grant,
                                   writable=False)
        except OSError as err:
            raise ToolError(f"could not start git: {err.strerror or err}") from err
        if done.timed_out or done.stopped:
            raise ToolError(f"git {argv[0]} {done.stopped or 'timed out'} "
                            f"(after at most {self.timeout:g} s)")
        if done.code != 0:
            raise ToolError(f"git {argv[0]} failed (exit code {done.code}):\n{done.output}")
        return done.output

    def _git_status(self, args: GitStatusInput, workspace: str, grant: Grant) -> ToolOutput:
        output = self._git(
            ["status", "--short", "--branch", "--ignore-submodules=dirty"], workspace, grant
        )
        lines = output.rstrip("\n").splitlines()
        if all(line.startswith("## ") for line in lines):
            output = output.rstrip("\n") + "\nnothing to commit, working tree clean"
        return ToolOutput(output.rstrip("\n"))

    def _git_diff(self, args: GitDiffInput, workspace: str, grant: Grant) -> ToolOutput:
        argv = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty"]
        if args.staged:
            argv.append("--cached")
        target = self._confine(args.path, workspace)
        argv += ["--", os.path.relpath(target, os.path.realpath(workspace))]
        where = "" if args.path == "." else f" in {args.path}"
        output = self._git(argv, workspace, grant)
        if not output.strip():
            kind = "staged" if args.staged else "unstaged"
            hint = "" if args.staged else " (untracked files never show here; see git_status)"
            return ToolOutput(f"no {kind} changes{where}{hint}")
        return ToolOutput(output)
