"""The command tools: ``run_shell`` and the read-only git tools."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable, Mapping

from actors.ports import ToolOutput
from adapters.tools.base import ToolError, ToolLimits
from adapters.tools.process import Finished, run_process
from adapters.tools.schemas import GitDiffInput, GitStatusInput, RunShellInput

#: Configuration that git commands run with, over anything the repository sets: no
#: fsmonitor hook, no hooks, no pager, no colour, UTF-8 paths shown as they are.
_GIT_SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.quotePath", "false"),
    ("color.ui", "never"),
)



class ShellTools(ToolLimits):
    """Running bash and git in the workspace."""

    env: dict[str, str] | None

    def _run_shell(self, args: RunShellInput, workspace: str) -> ToolOutput:
        if not args.command.strip():
            raise ToolError("run_shell needs a non-empty command")
        try:
            done = self._run_process(["bash", "-c", args.command], workspace, self.env)
        except OSError as err:
            raise ToolError(f"could not start bash: {err.strerror or err}") from err
        if done.timed_out:
            header = f"command timed out after {self.timeout:g} s; its process group was killed"
            return ToolOutput(f"{header}\n{done.output}", is_error=True)
        code = done.code
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            header = f"exit code: {code} (killed by signal {name})"
        else:
            header = f"exit code: {code}"
        return ToolOutput(f"{header}\n{done.output}", is_error=code != 0)

    def _run_process(
        self, argv: list[str], workspace: str, env: Mapping[str, str] | None
    ) -> Finished:
        return run_process(argv, os.path.realpath(workspace), env, timeout=self.timeout,
                           cap=self.max_output_chars)

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

    def _git_quick(self, argv: list[str], root: str, env: Mapping[str, str]) -> tuple[int, str]:
        """Run a small git query in ``root``: ``(exit code, stdout)``; stderr on failure."""
        try:
            done = subprocess.run(
                ["git", *argv],
                cwd=root,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError as err:
            raise ToolError("git is not installed (or not on the PATH)") from err
        except subprocess.TimeoutExpired as err:
            raise ToolError(f"git did not answer within {self.timeout:g} s") from err
        out = done.stdout if done.returncode == 0 else done.stderr
        return done.returncode, out.decode("utf-8", errors="replace")

    def _git(self, argv: list[str], workspace: str) -> str:
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
        code, out = self._git_quick(["rev-parse", "--show-toplevel"], root, env)
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
            ["config", "-z", "--name-only", "--get-regexp", r"^filter\."], root, env
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
            done = self._run_process(["git", "--no-pager", *argv], workspace, env)
        except OSError as err:
            raise ToolError(f"could not start git: {err.strerror or err}") from err
        if done.timed_out:
            raise ToolError(f"git {argv[0]} timed out after {self.timeout:g} s")
        if done.code != 0:
            raise ToolError(f"git {argv[0]} failed (exit code {done.code}):\n{done.output}")
        return done.output

    def _git_status(self, args: GitStatusInput, workspace: str) -> ToolOutput:
        output = self._git(
            ["status", "--short", "--branch", "--ignore-submodules=dirty"], workspace
        )
        lines = output.rstrip("\n").splitlines()
        if all(line.startswith("## ") for line in lines):
            output = output.rstrip("\n") + "\nnothing to commit, working tree clean"
        return ToolOutput(output.rstrip("\n"))

    def _git_diff(self, args: GitDiffInput, workspace: str) -> ToolOutput:
        argv = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty"]
        if args.staged:
            argv.append("--cached")
        target = self._confine(args.path, workspace)
        argv += ["--", os.path.relpath(target, os.path.realpath(workspace))]
        where = "" if args.path == "." else f" in {args.path}"
        output = self._git(argv, workspace)
        if not output.strip():
            kind = "staged" if args.staged else "unstaged"
            hint = "" if args.staged else " (untracked files never show here; see git_status)"
            return ToolOutput(f"no {kind} changes{where}{hint}")
        return ToolOutput(output)

    # --- time -------------------------------------------------------------------------
