"""Hard protection rules, applied before any policy.

Contract of :func:`check_protection` (first match per path, all paths checked):

* anything the enrichment could not analyse (an unparseable command, a payload field of the
  wrong type, a missing workspace) is **refused**;
* anything the enrichment could analyse but not read completely (``unreadable``: a shell
  construct such as a program fed on standard input, inline code, ``eval``, a computed
  command name) needs :data:`UNREADABLE_MIN_TIER` (a person): it is never allowed by the
  policy or the heuristics alone;
* a path written or deleted (tool field or shell target) that is dynamic (cannot be known
  before running), climbs above the workspace with ``..``, or lies outside the workspace
  (before or after following symlinks) is **refused**; ``/dev/null`` and friends are fine;
* a file-tool path that is read but lies outside the workspace or climbs out is **refused**
  (shell commands may read outside the workspace unless ``confine_shell_reads`` is set;
  credential reads are tier 1's business);
* **identity and guardrail files** can never be written or deleted; **agent configuration
  files** can never be deleted and need ``config_min_tier`` (2) to be written; **memory and
  user-profile files** need ``memory_min_tier`` (1) to be written or deleted. A protected
  file is recognised without regard to case, by its path before and after symlinks, by a
  hard link to it, by a glob that could match it, by a recursive operation on a folder that
  holds it, and by being named in the arguments of a command whose file effects are not
  modelled (``python``, ``vim``, ``git checkout``...), also through a glob or brace
  pattern there that matches it (``gzip *.md``).

The result is a refusal (with every reason) or the minimum tier the decision must reach.
"""

from __future__ import annotations

import functools
import glob as globmod
import os
import re
from collections.abc import Callable
from typing import Literal

import msgspec

from tether.actors.gatekeeper.security.action import EnrichedAction, PathRef
from tether.actors.gatekeeper.security.globs import (
    expand_braces,
    glob_match,
    has_glob,
    literal_prefix,
)

#: Identity and guardrail files: never written, never deleted (seed: IDENTITY.md, SOUL.md).
DEFAULT_IDENTITY_FILES: tuple[str, ...] = ("SOUL.md", "IDENTITY.md", "GUARDRAILS.md")
#: Memory and user-profile files: writing or deleting them needs at least tier 1.
DEFAULT_MEMORY_FILES: tuple[str, ...] = ("MEMORY.md", "USER.md")
#: Agent configuration: writing needs at least tier 2; never deleted (seed: AGENTS.md,
#: HEARTBEAT.md at tier 2).
DEFAULT_CONFIG_FILES: tuple[str, ...] = (
    "AGENTS.md",
    "HEARTBEAT.md",
    "CLAUDE.md",
    "tether.toml",
    ".tether/config.toml",
    ".tether/policy.yaml",
    ".tether/rules/**",
    ".tether/skills/**",
    ".claude/settings.json",
    ".claude/settings.local.json",
    # git runs the programs its configuration and hooks name (pager, fsmonitor, aliases)
    ".git/config",
    ".git/config.worktree",
    ".git/hooks/**",
    "*/.git/config",
    "*/.git/hooks/**",
)

#: The tier a call the judge cannot read completely needs: a person.
UNREADABLE_MIN_TIER = 3

Category = Literal["identity", "config", "memory"]
Rule = Literal[
    "identity", "config", "memory", "outside", "escape", "dynamic", "unanalysable", "unreadable"
]


class ProtectionConfig(msgspec.Struct, frozen=True):
    """The protected file lists (workspace-relative globs, see :mod:`.globs`,
    matched without regard to case) and the tiers they need."""

    identity_files: tuple[str, ...] = DEFAULT_IDENTITY_FILES
    memory_files: tuple[str, ...] = DEFAULT_MEMORY_FILES
    config_files: tuple[str, ...] = DEFAULT_CONFIG_FILES
    memory_min_tier: int = 1
    config_min_tier: int = 2
    confine_shell_reads: bool = False


class ProtectionFinding(msgspec.Struct, frozen=True):
    """One rule that fired: ``refuse`` True, or the ``min_tier`` it demands."""

    rule: Rule
    path: str
    refuse: bool
    min_tier: int
    reason: str


class ProtectionResult(msgspec.Struct, frozen=True):
    """The protection stage's outcome: ``refused`` with ``reason`` (all refusal reasons
    joined), else ``min_tier`` (0-3, the highest any finding demands)."""

    refused: bool
    reason: str
    min_tier: int
    findings: tuple[ProtectionFinding, ...]


def _sample(pattern: str) -> str:
    """A concrete path matched by ``pattern`` (glob parts replaced by ``x``)."""
    return re.sub(r"\*\*|\*|\?|\[[^\]]*\]", "x", pattern)


def _matches(candidate: str, pattern: str, *, is_glob: bool, recursive: bool) -> bool:
    """Could a write to ``candidate`` (a relative path or glob) touch ``pattern``?"""
    cand = candidate.casefold()
    pat = pattern.casefold()
    if glob_match(pat, cand, ignore_case=True):
        return True
    if is_glob and glob_match(cand, _sample(pat), ignore_case=True):
        return True
    if recursive:
        if cand == ".":
            return True
        prefix = literal_prefix(pat) if has_glob(pat) else pat
        if pat.startswith("**") or prefix.startswith(cand.rstrip("/") + "/"):
            return True
        if is_glob and glob_match(cand + "/**", _sample(pat), ignore_case=True):
            return True
    return False


def _remember_inode(
    found: dict[tuple[int, int], Category], workspace: str, rel: str, category: Category
) -> None:
    """Note the inode of workspace-relative ``rel`` (found whatever its case), if it exists."""
    current = workspace
    for part in rel.split("/"):
        try:
            entries = os.listdir(current)
        except OSError:
            return
        match = [e for e in entries if e.casefold() == part.casefold()]
        if not match:
            return
        current = os.path.join(current, match[0])
    try:
        st = os.stat(current)
    except OSError:
        return
    found.setdefault((st.st_dev, st.st_ino), category)


@functools.lru_cache(maxsize=32)
def _name_patterns(config: ProtectionConfig) -> tuple[tuple[Category, re.Pattern[str]], ...]:
    """The protected leaf names as word patterns (they depend on the settings only). Files
    inside ``.git`` have generic names (``config``), so they are recognised by the
    ``.git/<name>`` path instead."""
    names: list[tuple[Category, re.Pattern[str]]] = []
    for category, patterns in _groups(config):
        for pattern in patterns:
            folder, _, leaf = pattern.rpartition("/")
            if folder == ".git" or folder.endswith("/.git"):
                leaf = ".git/" + leaf
            if leaf and not has_glob(leaf):
                names.append((
                    category,
                    re.compile(r"(?<![\w.-])" + re.escape(leaf) + r"(?![\w-])", re.IGNORECASE),
                ))
    return tuple(names)


def _groups(config: ProtectionConfig) -> list[tuple[Category, tuple[str, ...]]]:
    return [
        ("identity", config.identity_files),
        ("config", config.config_files),
        ("memory", config.memory_files),
    ]


class _Protected:
    def __init__(self, config: ProtectionConfig, workspace: str) -> None:
        self.groups = _groups(config)
        self.names = _name_patterns(config)
        self.workspace = workspace
        self._inodes: dict[tuple[int, int], Category] | None = None

    @property
    def inodes(self) -> dict[tuple[int, int], Category]:
        """The protected files' inodes, read from disk when first needed (only a path
        with several hard links asks): most verdicts never list the workspace."""
        if self._inodes is None:
            found: dict[tuple[int, int], Category] = {}
            for category, patterns in self.groups:
                for pattern in patterns:
                    if not has_glob(pattern):
                        _remember_inode(found, self.workspace, pattern, category)
            self._inodes = found
        return self._inodes

    def categories(self, ref: PathRef) -> list[Category]:
        found: list[Category] = []
        candidates = {c for c in (ref.relative, ref.lexical_relative) if c is not None}
        for category, patterns in self.groups:
            for pattern in patterns:
                if any(
                    _matches(c, pattern, is_glob=ref.glob, recursive=ref.recursive)
                    for c in candidates
                ):
                    found.append(category)
                    break
        if ref.resolved is not None and not ref.glob:
            try:
                st = os.stat(ref.resolved)
            except OSError:
                st = None
            if st is not None and st.st_nlink > 1:
                linked = self.inodes.get((st.st_dev, st.st_ino))
                if linked is not None and linked not in found:
                    found.append(linked)
        return found

    def mentioned(self, text: str) -> list[tuple[Category, str]]:
        return [(c, m.group(0)) for c, rx in self.names if (m := rx.search(text))]

    def mentioned_by(self, arg: str, cwds: list[str]) -> list[tuple[Category, str]]:
        """The protected files an argument names: as written, through its brace
        alternatives, and through the files its glob patterns match in any of ``cwds``."""
        found = self.mentioned(arg)
        words = expand_braces(arg) if "{" in arg else [arg]
        for word in words:
            found.extend(self.mentioned(word))
            for cwd in cwds if has_glob(word) else []:
                try:
                    matches = sorted(globmod.glob(os.path.join(cwd, word)))[:1000]
                except (OSError, ValueError):
                    matches = []
                for match in matches:
                    found.extend(self.mentioned(os.path.relpath(match, cwd)))
        return list(dict.fromkeys(found))


def check_protection(
    action: EnrichedAction, config: ProtectionConfig | None = None
) -> ProtectionResult:
    """Apply the hard rules (module docstring) to ``action``; never raises."""
    cfg = config or ProtectionConfig()
    protected = _Protected(cfg, action.workspace)
    findings: list[ProtectionFinding] = []

    def refuse(rule: Rule, path: str, reason: str) -> None:
        findings.append(ProtectionFinding(rule, path, True, 0, reason))

    def tier(rule: Rule, path: str, level: int, reason: str) -> None:
        findings.append(ProtectionFinding(rule, path, False, level, reason))

    for problem in action.problems:
        refuse("unanalysable", "", f"refused: {problem}")
    for why in action.unreadable:
        tier("unreadable", "", UNREADABLE_MIN_TIER,
             f"the judge cannot read this command completely: {why}")

    for ref in action.paths:
        shown = ref.original or "(unknown)"
        writes = ref.access in ("write", "delete")
        verb = {"write": "write", "delete": "delete", "read": "read"}[ref.access]
        if writes or ref.command < 0 or cfg.confine_shell_reads:
            if ref.dynamic:
                refuse(
                    "dynamic",
                    shown,
                    f"refused: cannot tell before running which file "
                    f"{ref.via} would {verb} ({shown!r})",
                )
                continue
            if ref.escapes:
                refuse("escape", shown, f"refused: path {shown} climbs out of the workspace")
                continue
            if not ref.inside or ref.lexical_relative is None:
                where = ref.resolved or shown
                refuse(
                    "outside",
                    shown,
                    f"refused: {ref.via} would {verb} {shown}, which is "
                    f"outside the workspace ({where})",
                )
                continue
        if not writes:
            continue
        label = shown
        if ref.recursive or ref.glob:
            label = f"{shown} (a tree or pattern that takes in a protected file)"
        for category in protected.categories(ref):
            _apply(category, ref.access, label, ref.via, cfg, refuse, tier)

    for cmd in action.commands:
        if not cmd.opaque:
            continue
        for arg in cmd.argv[1:]:
            bases = [cmd.cwd, *cmd.alt_cwds] if cmd.cwd is not None else []
            for category, name in protected.mentioned_by(arg, bases):
                _apply(
                    category, "write", name, f"{cmd.name} (arguments name it)", cfg, refuse, tier
                )

    refusals = [f.reason for f in findings if f.refuse]
    if refusals:
        return ProtectionResult(True, "; ".join(dict.fromkeys(refusals)), 0, tuple(findings))
    level = max((f.min_tier for f in findings), default=0)
    reason = "; ".join(dict.fromkeys(f.reason for f in findings)) or "no protected path touched"
    return ProtectionResult(False, reason, level, tuple(findings))


def _apply(
    category: Category,
    access: str,
    path: str,
    via: str,
    cfg: ProtectionConfig,
    refuse: Callable[[Rule, str, str], None],
    tier: Callable[[Rule, str, int, str], None],
) -> None:
    if category == "identity":
        refuse(
            "identity",
            path,
            f"refused: {path} is an identity or guardrail file and can "
            f"never be written or deleted ({via})",
        )
    elif category == "config":
        if access == "delete":
            refuse(
                "config",
                path,
                f"refused: {path} is agent configuration and can never be deleted ({via})",
            )
        else:
            tier(
                "config",
                path,
                cfg.config_min_tier,
                f"{path} is agent configuration: writing "
                f"it needs at least tier {cfg.config_min_tier} ({via})",
            )
    else:
        tier(
            "memory",
            path,
            cfg.memory_min_tier,
            f"{path} is a memory or user-profile file: "
            f"changing it needs at least tier {cfg.memory_min_tier} ({via})",
        )
