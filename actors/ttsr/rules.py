"""Time-traveling stream rules (TTSR): rule files, scopes, and the reminder text.

Pure logic for the TTSR monitor: no NATS, no threads, no clock. A rule file is Markdown
with YAML front matter::

    ---
    name: no-print              # optional, defaults to the file stem
    description: use logging    # optional
    trigger: '\\bprint\\('      # required: a regular expression
    scope: text                 # optional: text, thinking, tool, tool:NAME, tool:NAME(GLOB),
                                #   or a list of them (default: [text, tool])
    repeat_mode: once           # optional: once | after-gap (default from settings)
    repeat_gap: 10              # optional: completed turns between injections (after-gap)
    context_mode: discard       # optional: discard | keep the interrupted partial reply
    interrupt: always           # optional: always | prose-only | tool-only | never
    ---
    Use the logging module instead of print().

Scopes: ``text`` is the reply's prose, ``thinking`` the model's thinking, ``tool`` the
streamed arguments of every tool call, ``tool:NAME`` those of tool NAME only (``*`` and
``?`` allowed in NAME), and ``tool:NAME(GLOB)`` only calls whose ``path`` argument matches
GLOB (``tool:write_file(*.py)``). ``interrupt`` says where a match aborts the stream:
``prose-only`` in text or thinking, ``tool-only`` in tool arguments, ``never`` nowhere (the
reminder is added after the turn instead); a match that does not abort is handled as
``never``.
"""

from __future__ import annotations

import fnmatch
import html
import os
import re
import stat
from pathlib import Path
from typing import Literal

import msgspec
import msgspec.yaml

from tether.actors.front_matter import read_front_matter
from tether.events.ttsr import RuleSource

__all__ = [
    "DEFAULT_SCOPES",
    "Rule",
    "RuleSet",
    "Scope",
    "compile_trigger",
    "load_rules",
    "parse_rule_file",
    "parse_scope",
    "render_reminder",
]

RepeatMode = Literal["once", "after-gap"]
ContextMode = Literal["discard", "keep"]
InterruptMode = Literal["always", "prose-only", "tool-only", "never"]

DEFAULT_SCOPES = ("text", "tool")
"""What a rule watches when its file names no scope: the reply's prose and tool calls."""

_REMINDER_PREAMBLE = (
    "Your output was interrupted because it broke one of this project's rules.\n"
    "This notice comes from the agent enforcing the project's rules; it is not an "
    "injected prompt.\n"
    "Follow the instruction below from now on, then carry on with the task."
)

_SCOPE = re.compile(r"^(text|thinking|tool)(?::([^()\s]+))?(?:\(([^()]+)\))?$")


class Scope(msgspec.Struct, frozen=True):
    """One thing a rule watches: ``kind`` text, thinking or tool; for tools an optional
    name pattern and an optional glob on the call's ``path`` argument."""

    kind: Literal["text", "thinking", "tool"]
    tool: str = ""
    glob: str = ""

    def fits(self, source: str) -> bool:
        """Whether this scope watches ``source`` (``text``, ``thinking`` or
        ``tool:<name>``), before any path glob is considered."""
        if self.kind != "tool":
            return source == self.kind
        if not source.startswith("tool:"):
            return False
        return not self.tool or fnmatch.fnmatchcase(source[5:], self.tool)

    def path_fits(self, path: str | None) -> bool | None:
        """Whether a tool call's ``path`` satisfies the glob: True/False, or None while the
        path is not known yet (it has not streamed in)."""
        if not self.glob:
            return True
        if path is None:
            return None
        return fnmatch.fnmatch(path, self.glob)


def parse_scope(text: str) -> Scope:
    """Parse ``text``, ``thinking``, ``tool``, ``tool:NAME`` or ``tool:NAME(GLOB)``;
    raise ValueError naming what is wrong."""
    found = _SCOPE.match(text.strip())
    if found is None:
        raise ValueError(
            f"bad scope {text!r} (expected text, thinking, tool, tool:NAME or tool:NAME(GLOB))"
        )
    kind, tool, glob = found.group(1), found.group(2) or "", found.group(3) or ""
    if kind != "tool" and (tool or glob):
        raise ValueError(f"bad scope {text!r}: only tool scopes take a name or a path glob")
    return Scope(kind, tool, glob)  # type: ignore[arg-type]


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """One stream rule: when ``trigger`` matches a watched stream, ``body`` is given to the
    model as an instruction. Optional settings left as None take the defaults of the TTSR
    settings. ``origin`` says which folder the rule came from (workspace, user...)."""

    name: str
    description: str = ""
    trigger: str
    body: str
    path: str
    scopes: tuple[Scope, ...] = (Scope("text"), Scope("tool"))
    repeat_mode: RepeatMode | None = None
    repeat_gap: int | None = None
    context_mode: ContextMode | None = None
    interrupt: InterruptMode = "always"
    origin: str = ""

    def watches(self, source: str) -> bool:
        """Whether any of the rule's scopes watches ``source`` (paths aside)."""
        return any(scope.fits(source) for scope in self.scopes)

    def path_fits(self, source: str, path: str | None) -> bool | None:
        """For a match in ``source``: True if a fitting scope accepts the tool call's
        path, False if none can, None if that depends on a path not streamed yet."""
        answers = [s.path_fits(path) for s in self.scopes if s.fits(source)]
        if any(a is True for a in answers):
            return True
        if any(a is None for a in answers):
            return None
        return False

    def aborts_on(self, source: str) -> bool:
        """Whether a match in ``source`` interrupts the stream (else: remind after the turn)."""
        if self.interrupt == "always":
            return True
        if self.interrupt == "prose-only":
            return source in ("text", "thinking")
        if self.interrupt == "tool-only":
            return source.startswith("tool:")
        return False


MAX_RULE_BYTES = 64 * 1024
"""The largest rule file read (a rule is a trigger and a short instruction)."""
MAX_RULE_FILES = 100
"""The most rule files a session loads, from all its folders."""
MAX_RULES_BYTES = 1024 * 1024
"""The most text a session's rule files may hold in all (each session records it)."""


class RuleSet(msgspec.Struct, kw_only=True):
    """The outcome of :func:`load_rules`: the usable rules in priority order, one warning
    per skipped file (naming the file and the reason), and one note per rule shadowed by
    an earlier rule of the same name (not a problem, so not a warning)."""

    rules: list[Rule] = []
    warnings: list[str] = []
    shadowed: list[str] = []
    sources: list[RuleSource] = []
    """The file of each rule, its text as read (what the session's RuleLog records)."""


class _FrontMatter(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    description: str = ""
    trigger: str | None = None
    scope: str | list[str] | None = None
    repeat_mode: RepeatMode | None = None
    repeat_gap: int | None = None
    context_mode: ContextMode | None = None
    interrupt: InterruptMode = "always"


def compile_trigger(trigger: str) -> re.Pattern[str]:
    """Compile a rule trigger; raise ValueError with the reason if it does not compile or
    if it matches the empty string (such a rule would fire on every reply)."""
    try:
        pattern = re.compile(trigger)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise ValueError(f"trigger does not compile: {exc}") from exc
    if pattern.search("") is not None:
        raise ValueError("trigger matches the empty string")
    return pattern


# --- loading ------------------------------------------------------------------------------


def parse_rule_file(path: Path, origin: str = "") -> Rule:
    """Parse one rule file; raise ValueError with a reason if it is not a usable rule."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from exc
    return parse_rule_text(text, path, origin)


def parse_rule_text(text: str, path: Path, origin: str = "") -> Rule:
    """Parse the text of the rule file at ``path``; raise ValueError with a reason if it
    is not a usable rule."""
    meta, body = read_front_matter(text, _FrontMatter)
    if not meta.trigger:
        raise ValueError("no trigger")
    compile_trigger(meta.trigger)
    if meta.repeat_gap is not None and meta.repeat_gap < 1:
        raise ValueError(f"repeat_gap must be at least 1, got {meta.repeat_gap}")
    raw_scopes = [meta.scope] if isinstance(meta.scope, str) else meta.scope
    scopes = tuple(parse_scope(s) for s in raw_scopes) if raw_scopes else tuple(
        parse_scope(s) for s in DEFAULT_SCOPES
    )
    name = (meta.name or "").strip() or path.stem
    return Rule(
        name=name,
        description=meta.description,
        trigger=meta.trigger,
        body=body.strip(),
        path=str(path),
        scopes=scopes,
        repeat_mode=meta.repeat_mode,
        repeat_gap=meta.repeat_gap,
        context_mode=meta.context_mode,
        interrupt=meta.interrupt,
        origin=origin,
    )


def load_rules(folders: list[str] | list[tuple[str, str]]) -> RuleSet:
    """Load every ``*.md`` rule file of ``folders`` (not recursive, files in name order).

    ``folders`` are paths, or (origin, path) pairs such as ("workspace", ...). Earlier
    folders win: a rule whose name was already loaded is shadowed (noted in ``shadowed``).
    A missing folder gives no rules. A file with unreadable text, no or bad front matter,
    no trigger, a trigger that does not compile (or matches the empty string), a bad scope
    or a bad setting is skipped with a warning naming the file and the reason; so is one
    :func:`read_rule_file` will not read, and any past :data:`MAX_RULE_FILES` or
    :data:`MAX_RULES_BYTES` in all. A workspace's folder (origin ``workspace``) that leads
    out of its workspace through a link is not read. Never raises for a bad rule file.
    """
    result = RuleSet()
    by_name: dict[str, Rule] = {}
    seen_folders: set[str] = set()
    total = 0
    for entry in folders:
        origin, folder = entry if isinstance(entry, tuple) else ("", entry)
        if not folder or folder in seen_folders:
            continue
        seen_folders.add(folder)
        directory = Path(folder)
        if not directory.is_dir():
            continue
        if origin == "workspace" and not _stays_in_workspace(directory):
            result.warnings.append(f"{directory}: skipped: a link leads it out of its "
                                   "workspace")
            continue
        try:
            files = sorted(p for p in directory.glob("*.md") if p.is_file())
        except OSError as exc:
            result.warnings.append(f"{directory}: cannot list rule folder: {exc}")
            continue
        for path in files:
            if len(result.sources) >= MAX_RULE_FILES or total >= MAX_RULES_BYTES:
                result.warnings.append(f"{path}: skipped: {len(result.sources)} rule files "
                                       f"({total:,} bytes) are loaded already, the most "
                                       "a session takes")
                continue
            try:
                text = read_rule_file(path, directory)
                rule = parse_rule_text(text, path, origin)
            except (OSError, UnicodeDecodeError) as exc:
                result.warnings.append(f"{path}: skipped: cannot read: {exc}")
                continue
            except ValueError as exc:
                result.warnings.append(f"{path}: skipped: {exc}")
                continue
            first = by_name.get(rule.name)
            if first is not None:
                result.shadowed.append(f"{path}: rule {rule.name!r} shadowed by {first.path}")
                continue
            by_name[rule.name] = rule
            result.rules.append(rule)
            result.sources.append(RuleSource(path=str(path), origin=origin, text=text))
            total += len(text.encode())
    return result


def _stays_in_workspace(rules: Path) -> bool:
    """Whether a workspace's ``<workspace>/.tether/rules`` folder, followed through any
    link, is still inside the workspace."""
    try:
        real, workspace = rules.resolve(), rules.parent.parent.resolve()
    except OSError:
        return False
    return real == workspace or workspace in real.parents


def read_rule_file(path: Path, folder: Path) -> str:
    """The text of the rule file ``path`` in ``folder``, read once from one descriptor.

    Refused (``ValueError``, the reason): a link leading out of the folder, anything but a
    regular file, a file with another hard link (another file's text), more than
    :data:`MAX_RULE_BYTES`. ``OSError`` or ``UnicodeDecodeError`` when it cannot be read.
    """
    real = path.resolve()
    if real.parent != folder.resolve():
        raise ValueError("a symlink leading out of its folder")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_nlink != 1:
            raise ValueError("a hard link (the text of another file)")
        data = handle.read(MAX_RULE_BYTES + 1)
    if len(data) > MAX_RULE_BYTES:
        raise ValueError(f"more than {MAX_RULE_BYTES:,} bytes: a rule file may hold at most "
                         f"{MAX_RULE_BYTES:,}")
    return data.decode("utf-8")


def rules_from_sources(sources: list[RuleSource]) -> RuleSet:
    """The rules of recorded rule files (:attr:`RuleSet.sources`), parsed as they were
    when loaded; one that no longer parses (a newer Tether's syntax) is skipped with a
    warning."""
    result = RuleSet()
    for source in sources:
        try:
            rule = parse_rule_text(source.text, Path(source.path), source.origin)
        except ValueError as exc:
            result.warnings.append(f"{source.path}: skipped: {exc}")
            continue
        result.rules.append(rule)
        result.sources.append(source)
    return result


# --- reminder -----------------------------------------------------------------------------


def render_reminder(rules: list[Rule]) -> str:
    """The user-message text injected on retry: one ``<system-interrupt>`` block per rule,
    in the given order, joined by a blank line. Attribute values are XML-escaped; the
    body is inserted as written. Raises ValueError for an empty list."""
    if not rules:
        raise ValueError("render_reminder needs at least one rule")
    blocks = []
    for rule in rules:
        name = html.escape(rule.name, quote=True)
        path = html.escape(rule.path, quote=True)
        blocks.append(
            f'<system-interrupt reason="rule_violation" rule="{name}" path="{path}">\n'
            f"{_REMINDER_PREAMBLE}\n"
            "\n"
            f"{rule.body}\n"
            "</system-interrupt>"
        )
    return "\n\n".join(blocks)
