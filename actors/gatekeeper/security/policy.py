"""Tier 0: an ordered YAML policy, first match wins.

A policy file::

    version: 1
    default: escalate      # verdict when no rule matches: allow, deny or escalate
    default_tier: 1        # tier an unmatched action escalates to (1: the heuristics decide)
    rules:
      - name: no-sudo                  # optional, shown in reasons
        tool: run_shell                # glob on the tool name (fnmatch, case-sensitive)
        path: "src/**"                 # glob on workspace-relative resolved paths
        command: '^git (status|diff)'  # regex, re.search on each simple command
        action: [read, execute]        # one class or a list: read write delete execute network
        verdict: allow                 # allow | deny | escalate
        tier: 2                        # escalate only: the tier that must decide (1-3, default 2)
        reason: text                   # optional, shown in the verdict

Every field a rule gives must match (they are ANDed; a rule with none matches everything).
Because one action can touch several paths and run several commands, matching is asymmetric
so that a rule never allows more than it names:

* ``allow`` rules must cover the whole action: **every** path matches ``path``, **every**
  simple command matches ``command``, **every** class of the action is in ``action``;
* ``deny`` and ``escalate`` rules fire when **any** path / simple command / class matches
  (paths compared without regard to case; a path that cannot be resolved counts as a match;
  the command regex is also tried on the whole command line).

Paths inside the workspace are matched as workspace-relative ``/`` paths (``.`` is the
workspace itself); paths outside as absolute paths. A rule with ``path`` or ``command``
does not match an action that has no path or no command.

A tool the enrichment does not model (``tool_known`` false: an MCP tool of a server not
declared read-only) that no rule matches escalates to :data:`UNMODELLED_TOOL_TIER` (a
person) instead of ``default_tier`` when the default is ``escalate``: the heuristics
cannot see what such a tool does, so "tier 1 found nothing wrong" would mean nothing. A
rule naming it (``tool: "docs__*"``) decides as usual, and so does a ``default`` of
``allow`` or ``deny``.

Why the default is ``escalate`` to tier 1: the seed's tier 0 passes unmatched actions on to
tier 1 ("ESCALATE or no match -> continue"), so an unmatched action is allowed only when the
heuristics find nothing, and denied or escalated further when they do.

:func:`load_policy` turns any malformed file into a :class:`PolicyError` naming the file
and line; there is no fallback that allows everything.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import msgspec.yaml
import yaml

from tether.actors.gatekeeper.security.action import ACTION_CLASSES, EnrichedAction, PathRef
from tether.actors.gatekeeper.security.globs import glob_match

Verdict = Literal["allow", "deny", "escalate"]

__all__ = [
    "DEFAULT_POLICY_YAML",
    "UNMODELLED_TOOL_TIER",
    "Policy",
    "PolicyDecision",
    "PolicyError",
    "PolicyRule",
    "Verdict",
    "default_policy",
    "load_policy",
    "parse_policy",
]

#: The tier an unmatched tool that is not modelled escalates to: a person.
UNMODELLED_TOOL_TIER = 3

#: The policy used when none is configured.
DEFAULT_POLICY_YAML = """\
# Tether's default tier-0 policy. First match wins; no match escalates to tier 1 (the
# heuristics), which allows what it finds nothing wrong with.
version: 1
default: escalate
default_tier: 1
rules:
  - name: no-disk-destruction
    tool: run_shell
    command: '\\bmkfs(\\.\\w+)?\\b|\\bdd\\b.*\\bof=/dev/(sd|nvme|hd|vd|xvd|mmcblk)|:\\(\\)\\s*\\{'
    verdict: deny
    reason: formatting disks, raw device writes and fork bombs are never run
  - name: no-privilege-escalation
    tool: run_shell
    command: '^(sudo|su|doas|pkexec)\\b|(^|\\s)(sudo|doas|pkexec)\\s'
    verdict: deny
    reason: commands are not run with raised privileges
  - name: pushing-needs-review
    tool: run_shell
    command: '\\b(git|docker)\\s+push\\b'
    verdict: escalate
    tier: 3
    reason: pushing leaves the machine; a person decides
  - name: publishing-needs-review
    tool: run_shell
    command: '\\b(npm|yarn|pnpm|cargo|gem)\\s+publish\\b|\\btwine\\s+upload\\b'
    verdict: escalate
    tier: 3
    reason: publishing leaves the machine; a person decides
  - name: network-needs-review
    action: network
    verdict: escalate
    tier: 2
    reason: network access is reviewed beyond the automatic rules
  - name: browse-workspace
    tool: list_dir
    verdict: allow
    reason: listing folders of the workspace is harmless
  - name: read-only-shell
    tool: run_shell
    command: '^(ls|pwd|wc|git (status|diff|log|show|branch|blame))(\\s|$)'
    action: [read, execute]
    verdict: allow
    reason: read-only inspection commands
"""


class PolicyError(ValueError):
    """A malformed policy: ``file`` and ``line`` (1-based; 0 when unknown) say where."""

    def __init__(self, file: str, line: int, message: str) -> None:
        self.file = file
        self.line = line
        self.message = message
        super().__init__(f"{file}:{line}: {message}")


class PolicyRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One rule as written (see the module docstring for matching)."""

    verdict: Verdict
    name: str | None = None
    tool: str | None = None
    path: str | None = None
    command: str | None = None
    action: str | list[str] | None = None
    tier: int | None = None
    reason: str | None = None


class _PolicyFile(msgspec.Struct, forbid_unknown_fields=True):
    rules: list[PolicyRule] = []
    default: Verdict = "escalate"
    default_tier: int = 1
    version: int = 1


class PolicyDecision(msgspec.Struct, frozen=True):
    """Tier 0's answer: ``verdict``, the ``tier`` an escalation needs (0 otherwise), the
    index, name and source line of the rule that matched (None for the default)."""

    verdict: Verdict
    tier: int
    reason: str
    rule: int | None = None
    rule_name: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class _Compiled:
    rule: PolicyRule
    index: int
    line: int
    command: re.Pattern[str] | None
    actions: frozenset[str] | None


@dataclass(frozen=True)
class Policy:
    """A validated policy. Build it with :func:`load_policy`, :func:`parse_policy` or
    :func:`default_policy`; :meth:`evaluate` is tier 0."""

    rules: tuple[PolicyRule, ...]
    default: Verdict = "escalate"
    default_tier: int = 1
    source: str = "<default>"
    lines: tuple[int, ...] = ()
    _compiled: tuple[_Compiled, ...] = field(default=(), repr=False, compare=False)

    def evaluate(self, action: EnrichedAction) -> PolicyDecision:
        """The first matching rule's verdict, else the default (module docstring)."""
        for item in self._compiled:
            if _rule_matches(item, action):
                rule = item.rule
                label = rule.name or f"rule {item.index + 1}"
                tier = 0
                if rule.verdict == "escalate":
                    tier = rule.tier if rule.tier is not None else 2
                reason = f"{label} ({self.source}:{item.line}): {rule.reason or rule.verdict}"
                return PolicyDecision(rule.verdict, tier, reason, item.index, rule.name, item.line)
        if self.default == "escalate" and not action.tool_known:
            return PolicyDecision("escalate", UNMODELLED_TOOL_TIER, (
                f"no rule matched, and {action.request.type} is a tool Tether does not model "
                "(an MCP server's), so the heuristics cannot judge it"))
        tier = self.default_tier if self.default == "escalate" else 0
        return PolicyDecision(self.default, tier, f"no rule matched; the default is {self.default}")


def _rule_matches(item: _Compiled, action: EnrichedAction) -> bool:
    rule = item.rule
    allow = rule.verdict == "allow"
    if rule.tool is not None and not fnmatch.fnmatchcase(action.request.type, rule.tool):
        return False
    if item.actions is not None:
        classes = set(action.classes)
        if allow:
            if not classes or not classes <= item.actions:
                return False
        elif not classes & item.actions:
            return False
    if rule.path is not None:
        if not action.paths:
            return False
        hits = [_path_matches(rule.path, p, ignore_case=not allow) for p in action.paths]
        if not (all(hits) if allow else any(hits)):
            return False
    if item.command is not None:
        if action.command is None:
            return False
        texts = [c.text for c in action.commands if c.argv]
        if allow:
            if not texts or not all(item.command.search(t) for t in texts):
                return False
        elif not (
            item.command.search(action.command) or any(item.command.search(t) for t in texts)
        ):
            return False
    return True


def _path_matches(pattern: str, ref: PathRef, *, ignore_case: bool) -> bool:
    if ref.dynamic or ref.resolved is None:
        return ignore_case  # unknown: a deny/escalate rule fires, an allow rule does not
    subject = ref.relative if ref.relative is not None else ref.resolved
    return glob_match(pattern, subject, ignore_case)


# --- loading ----------------------------------------------------------------------------


def load_policy(path: str | Path) -> Policy:
    """Read and validate the policy file at ``path``.

    Raises :class:`PolicyError` naming the file and line for unreadable files, YAML syntax
    errors, duplicate keys, unknown fields, wrong types, bad verdicts, classes, tiers or
    regular expressions. Never returns a permissive fallback.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeError) as err:
        raise PolicyError(name, 0, f"cannot read the policy: {err}") from err
    return parse_policy(text, name)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Validate policy ``text``; ``source`` names it in errors (see :func:`load_policy`)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise PolicyError(source, line, f"YAML syntax error: {err.problem or err}") from err
    except yaml.YAMLError as err:
        raise PolicyError(source, 0, f"YAML error: {err}") from err
    if root is None:
        raise PolicyError(source, 1, "the policy is empty (it needs at least a 'rules' list)")
    if not isinstance(root, yaml.MappingNode):
        raise PolicyError(source, _line(root), "the policy must be a mapping with a 'rules' list")
    _check_duplicates(root, source)
    try:
        data = msgspec.yaml.decode(text.encode("utf-8"), type=_PolicyFile)
    except msgspec.ValidationError as err:
        raise PolicyError(source, _error_line(root, str(err)), f"invalid policy: {err}") from err
    except msgspec.DecodeError as err:  # pragma: no cover - compose caught syntax already
        raise PolicyError(source, 0, f"invalid YAML: {err}") from err
    if "rules" not in _keys(root):
        raise PolicyError(source, _line(root), "the policy has no 'rules' list")
    if data.version != 1:
        raise PolicyError(source, _key_line(root, "version"), f"unknown version {data.version}")
    if data.default_tier not in (1, 2, 3):
        raise PolicyError(source, _key_line(root, "default_tier"), "default_tier must be 1, 2 or 3")
    rules_node = _child(root, "rules")
    compiled: list[_Compiled] = []
    lines: list[int] = []
    for index, rule in enumerate(data.rules):
        node = (
            rules_node.value[index]
            if isinstance(rules_node, yaml.SequenceNode) and index < len(rules_node.value)
            else None
        )
        line = _line(node) if node is not None else 0
        compiled.append(_compile_rule(rule, index, line, node, source))
        lines.append(line)
    return Policy(
        rules=tuple(data.rules),
        default=data.default,
        default_tier=data.default_tier,
        source=source,
        lines=tuple(lines),
        _compiled=tuple(compiled),
    )


def default_policy() -> Policy:
    """The shipped :data:`DEFAULT_POLICY_YAML`, parsed."""
    return parse_policy(DEFAULT_POLICY_YAML, "<default policy>")


def _compile_rule(
    rule: PolicyRule, index: int, line: int, node: yaml.Node | None, source: str
) -> _Compiled:
    def fail(key: str, message: str) -> PolicyError:
        where = _key_line(node, key) if isinstance(node, yaml.MappingNode) else line
        label = f"rule {index + 1}" + (f" ({rule.name})" if rule.name else "")
        return PolicyError(source, where or line, f"{label}: {message}")

    command = None
    if rule.command is not None:
        try:
            command = re.compile(rule.command)
        except re.error as err:
            raise fail("command", f"command {rule.command!r} is not a valid regex: {err}") from err
    actions = None
    if rule.action is not None:
        values = [rule.action] if isinstance(rule.action, str) else list(rule.action)
        bad = [v for v in values if v not in ACTION_CLASSES]
        if bad or not values:
            raise fail(
                "action",
                f"action must be among {', '.join(ACTION_CLASSES)}; got "
                f"{bad[0] if bad else 'an empty list'!r}",
            )
        actions = frozenset(values)
    if rule.tier is not None:
        if rule.verdict != "escalate":
            raise fail("tier", "tier is only meaningful with verdict: escalate")
        if rule.tier not in (1, 2, 3):
            raise fail("tier", f"tier must be 1, 2 or 3, got {rule.tier}")
    for key in ("tool", "path"):
        value = getattr(rule, key)
        if value is not None and not value:
            raise fail(key, f"{key} must not be empty")
    return _Compiled(rule, index, line, command, actions)


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 0


def _keys(node: yaml.MappingNode) -> list[str]:
    return [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]


def _child(node: Any, key: str | int) -> Any:
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        return node.value[key]
    return None


def _key_line(node: Any, key: str) -> int:
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return _line(k)
    return _line(node) if isinstance(node, yaml.Node) else 0


def _error_line(root: yaml.Node, message: str) -> int:
    """The line of the node a msgspec error path (``$.rules[2].tool``) points at."""
    match = re.search(r"at `\$((?:\.[A-Za-z_]\w*|\[\d+\])*)`", message)
    node: Any = root
    if match:
        for part in re.findall(r"\.([A-Za-z_]\w*)|\[(\d+)\]", match.group(1)):
            nxt = _child(node, part[0]) if part[0] else _child(node, int(part[1]))
            if nxt is None:
                break
            node = nxt
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        return _key_line(node, unknown.group(1))
    return _line(node)


def _check_duplicates(node: yaml.Node, source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                if k.value in seen:
                    raise PolicyError(source, _line(k), f"duplicate key {k.value!r}")
                seen.add(k.value)
            _check_duplicates(v, source)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, source)
