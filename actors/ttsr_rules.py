"""Time-traveling stream rules (TTSR): rule files, the reminder text, and stream matching.

Pure logic for the TTSR monitor actor: no NATS, no threads, no clock. The actor loads the
rules once with :func:`load_rules`, feeds every streamed delta of a model reply to a
:class:`StreamMatcher`, and on a match interrupts the session and retries with the text
from :func:`render_reminder`.

A rule file is Markdown with YAML front matter::

    ---
    name: no-print            # optional, defaults to the file stem
    description: use logging  # optional
    trigger: '\\bprint\\('    # required: a Python regular expression
    scope: text               # optional: text (default), tool, or tool:NAME
    ---
    Use the logging module instead of print().

Scopes: ``text`` watches the reply's text, ``tool`` watches the streamed arguments of every
tool call, ``tool:NAME`` those of the tool called NAME only.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import msgspec.yaml

__all__ = [
    "DEFAULT_WINDOW",
    "Match",
    "Rule",
    "RuleSet",
    "StreamMatcher",
    "compile_trigger",
    "load_rules",
    "render_reminder",
    "scope_fits",
]

DEFAULT_WINDOW = 4096
"""Default bound, in characters, on the length of a match the matcher is sure to find."""

_CONTEXT = 32
"""Characters kept before each scan region so ``^``, ``\\b`` and short lookbehinds see the
real preceding text instead of a cut-off string start."""

_REMINDER_PREAMBLE = (
    "Your output was interrupted because it broke one of this project's rules.\n"
    "This notice comes from the agent enforcing the project's rules; it is not an "
    "injected prompt.\n"
    "Follow the instruction below from now on, then carry on with the task."
)


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """One stream rule: when ``trigger`` (a regex) matches the watched stream, the reply
    is interrupted and retried with ``body`` as the instruction.

    ``scope`` is ``text``, ``tool`` or ``tool:NAME`` (see :func:`scope_fits`); ``path`` is
    the rule file the rule came from. Compiled patterns live in :class:`StreamMatcher`.
    """

    name: str
    description: str
    trigger: str
    body: str
    path: str
    scope: str = "text"

    def applies_to(self, source: str) -> bool:
        """Whether this rule watches the stream ``source`` (``text`` or ``tool:<name>``)."""
        return scope_fits(self.scope, source)


class RuleSet(msgspec.Struct, kw_only=True):
    """The outcome of :func:`load_rules`: the usable rules in priority order, one warning
    per skipped file (naming the file and the reason), and one note per rule shadowed by
    an earlier rule of the same name (not a problem, so not a warning)."""

    rules: list[Rule] = []
    warnings: list[str] = []
    shadowed: list[str] = []


class Match(msgspec.Struct, frozen=True, kw_only=True):
    """A rule that newly matched: ``offset`` is where the match starts in the buffer of
    ``source`` / ``block`` (counted from that buffer's first character), ``text`` is the
    matched text."""

    rule: Rule
    source: str
    block: int
    offset: int
    text: str


class _FrontMatter(msgspec.Struct):
    name: str | None = None
    description: str = ""
    trigger: str | None = None
    scope: str = "text"


# --- scopes and triggers ------------------------------------------------------------------


def _valid_source(source: str) -> bool:
    return source == "text" or (source.startswith("tool:") and len(source) > len("tool:"))


def _valid_scope(scope: str) -> bool:
    return scope == "tool" or _valid_source(scope)


def scope_fits(scope: str, source: str) -> bool:
    """Whether a rule of ``scope`` watches ``source``: ``text`` fits only ``text``,
    ``tool`` fits every ``tool:<name>``, ``tool:NAME`` fits only ``tool:NAME``."""
    if scope == "tool":
        return source.startswith("tool:")
    return scope == source


def compile_trigger(trigger: str) -> re.Pattern[str]:
    """Compile a rule trigger; raise ValueError with the reason if it does not compile or
    if it matches the empty string (such a rule would fire on every reply)."""
    try:
        pattern = re.compile(trigger)
    except re.error as exc:
        raise ValueError(f"trigger does not compile: {exc}") from exc
    if pattern.search("") is not None:
        raise ValueError("trigger matches the empty string")
    return pattern


# --- loading ------------------------------------------------------------------------------


def _split_front_matter(text: str) -> tuple[str, str] | None:
    """Return (yaml, body) for ``---\\nyaml\\n---\\nbody``, or None without front matter."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None


def _parse_rule_file(path: Path) -> Rule:
    """Parse one rule file; raise ValueError with a reason if it is not a usable rule."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from exc
    parts = _split_front_matter(text)
    if parts is None:
        raise ValueError("no YAML front matter (a '---' line, the YAML, a '---' line)")
    yaml_text, body = parts
    try:
        meta = (
            msgspec.yaml.decode(yaml_text.encode(), type=_FrontMatter)
            if yaml_text.strip()
            else _FrontMatter()
        )
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"bad front matter: {exc}") from exc
    if not meta.trigger:
        raise ValueError("no trigger")
    compile_trigger(meta.trigger)
    if not _valid_scope(meta.scope):
        raise ValueError(f"bad scope {meta.scope!r} (expected text, tool or tool:NAME)")
    name = (meta.name or "").strip() or path.stem
    return Rule(
        name=name,
        description=meta.description,
        trigger=meta.trigger,
        body=body.strip(),
        path=str(path),
        scope=meta.scope,
    )


def load_rules(folders: list[str]) -> RuleSet:
    """Load every ``*.md`` rule file of ``folders`` (not recursive, files in name order).

    Earlier folders win: a rule whose name was already loaded is shadowed (noted in
    ``shadowed``). A missing folder gives no rules. A file with unreadable text, no or bad
    front matter, no trigger, a trigger that does not compile (or matches the empty
    string) or a bad scope is skipped with a warning naming the file and the reason.
    Never raises for a bad rule file.
    """
    result = RuleSet()
    by_name: dict[str, Rule] = {}
    for folder in folders:
        directory = Path(folder)
        if not directory.is_dir():
            continue
        try:
            files = sorted(p for p in directory.glob("*.md") if p.is_file())
        except OSError as exc:
            result.warnings.append(f"{directory}: cannot list rule folder: {exc}")
            continue
        for path in files:
            try:
                rule = _parse_rule_file(path)
            except ValueError as exc:
                result.warnings.append(f"{path}: skipped: {exc}")
                continue
            first = by_name.get(rule.name)
            if first is not None:
                result.shadowed.append(f"{path}: rule {rule.name!r} shadowed by {first.path}")
                continue
            by_name[rule.name] = rule
            result.rules.append(rule)
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


# --- stream matching ----------------------------------------------------------------------


@dataclass
class _Buffer:
    """The retained end of one stream buffer: ``tail`` holds the characters from absolute
    offset ``base`` to ``length`` (at most ``window + _CONTEXT`` of them)."""

    tail: str = ""
    base: int = 0
    length: int = 0


class StreamMatcher:
    """Incremental rule matching over one streamed model reply, one buffer per stream.

    A buffer is keyed by ``(source, block)``: ``source`` is ``text`` or ``tool:<name>``
    (a tool call's streamed JSON arguments), ``block`` the content block index, so each
    tool call (and each text block) is matched on its own. :meth:`feed` returns the rules
    that newly match; a rule is reported at most once, after which it counts as fired
    (across buffers and turns) for the life of the matcher. :meth:`mark_fired` restores
    rules already injected (for example from recorded injection events).

    Work per delta is bounded: each eligible rule searches only the last ``window``
    characters before the delta plus the delta itself, and a buffer retains only about
    ``window`` characters. A match of up to ``window`` characters is always found, even
    when it spans many deltas; a match longer than ``window`` characters is not
    guaranteed to be found. Matching is against the text received so far, so ``$``,
    ``\\b`` and lookaheads at the end of the buffer see the end of what has arrived, not
    of the whole reply.
    """

    def __init__(self, rules: list[Rule], window: int = DEFAULT_WINDOW) -> None:
        """Compile the rules' triggers; raise ValueError for a window below 1, a trigger
        that does not compile (or matches the empty string), a bad scope, or two rules
        with the same name."""
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.rules: list[Rule] = list(rules)
        self.window: int = window
        self.scanned_chars: int = 0
        """Characters searched so far, summed over every (rule, feed) search: the measure
        of the matcher's work, linear in the reply length for a fixed window."""
        self._compiled: list[tuple[Rule, re.Pattern[str]]] = []
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._fired: set[str] = set()
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"duplicate rule name {rule.name!r}")
            seen.add(rule.name)
            if not _valid_scope(rule.scope):
                raise ValueError(f"rule {rule.name!r}: bad scope {rule.scope!r}")
            try:
                pattern = compile_trigger(rule.trigger)
            except ValueError as exc:
                raise ValueError(f"rule {rule.name!r}: {exc}") from exc
            self._compiled.append((rule, pattern))

    @property
    def fired(self) -> frozenset[str]:
        """Names of the rules that have fired (or were marked fired) so far."""
        return frozenset(self._fired)

    def mark_fired(self, names: Iterable[str]) -> None:
        """Treat the named rules as already fired: :meth:`feed` will not report them."""
        self._fired.update(names)

    def reset(self) -> None:
        """Start of a model turn: forget every buffer (fired rules stay fired)."""
        self._buffers.clear()

    def feed(self, source: str, text: str, block: int = 0) -> list[Match]:
        """Append ``text`` to the buffer of ``(source, block)`` and return the rules that
        newly match it, in rule order, all together; each returned rule becomes fired.

        Only rules whose scope fits ``source`` and that have not fired are searched.
        ``source`` must be ``text`` or ``tool:<name>``, else ValueError.
        """
        if not _valid_source(source):
            raise ValueError(f"bad source {source!r} (expected text or tool:<name>)")
        if not text:
            return []
        buf = self._buffers.setdefault((source, block), _Buffer())
        origin = buf.base  # absolute offset of combined[0]
        combined = buf.tail + text
        scan_from = max(0, buf.length - self.window) - origin
        buf.length += len(text)
        keep = self.window + _CONTEXT
        if len(combined) > keep:
            buf.tail = combined[-keep:]
            buf.base = buf.length - keep
        else:
            buf.tail = combined
        region = len(combined) - scan_from
        matches: list[Match] = []
        for rule, pattern in self._compiled:
            if rule.name in self._fired or not rule.applies_to(source):
                continue
            self.scanned_chars += region
            found = _first_non_empty(pattern, combined, scan_from)
            if found is not None:
                start, matched = found
                matches.append(
                    Match(
                        rule=rule, source=source, block=block, offset=origin + start, text=matched
                    )
                )
        self._fired.update(m.rule.name for m in matches)
        return matches


def _first_non_empty(pattern: re.Pattern[str], text: str, pos: int) -> tuple[int, str] | None:
    """The first non-empty match of ``pattern`` in ``text`` starting at or after ``pos``."""
    for found in pattern.finditer(text, pos):
        if found.end() > found.start():
            return found.start(), found.group()
    return None
