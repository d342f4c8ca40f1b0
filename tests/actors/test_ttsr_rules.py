"""Tests for the TTSR pure logic: rule files, the reminder text and the stream matcher."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from actors.ttsr_rules import (
    Match,
    Rule,
    StreamMatcher,
    load_rules,
    render_reminder,
)


def write_rule(folder: Path, filename: str, front: str, body: str = "Do the right thing.") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(f"---\n{front}\n---\n{body}\n", encoding="utf-8")
    return path


def rule(name: str, trigger: str, scope: str = "text", body: str = "") -> Rule:
    return Rule(
        name=name,
        description="",
        trigger=trigger,
        body=body or f"Body of {name}.",
        path=f"/rules/{name}.md",
        scope=scope,
    )


def names(matches: list[Match]) -> list[str]:
    return [m.rule.name for m in matches]


# --- loading ------------------------------------------------------------------------------


def test_load_rule_file_fields(tmp_path: Path) -> None:
    path = write_rule(
        tmp_path / "rules",
        "no-print.md",
        "name: no-print\ndescription: use logging\ntrigger: '\\bprint\\('\nscope: tool:write",
        body="Use the logging module instead of print().",
    )
    result = load_rules([str(tmp_path / "rules")])
    assert result.warnings == []
    assert result.rules == [
        Rule(
            name="no-print",
            description="use logging",
            trigger=r"\bprint\(",
            body="Use the logging module instead of print().",
            path=str(path),
            scope="tool:write",
        )
    ]


def test_name_defaults_to_file_stem_and_scope_to_text(tmp_path: Path) -> None:
    write_rule(tmp_path, "no-todo.md", "trigger: TODO")
    [loaded] = load_rules([str(tmp_path)]).rules
    assert loaded.name == "no-todo"
    assert loaded.scope == "text"


def test_bad_rules_are_skipped_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    bad_regex = write_rule(tmp_path, "a-bad-regex.md", "trigger: 'foo('")
    no_trigger = write_rule(tmp_path, "b-no-trigger.md", "name: lazy")
    bad_yaml = write_rule(tmp_path, "c-bad-yaml.md", "trigger: [unclosed")
    bad_scope = write_rule(tmp_path, "d-bad-scope.md", "trigger: x\nscope: everywhere")
    empty_match = write_rule(tmp_path, "e-empty.md", "trigger: 'a*'")
    no_front = tmp_path / "f-no-front.md"
    no_front.write_text("just a note\n", encoding="utf-8")
    write_rule(tmp_path, "g-good.md", "trigger: good")

    result = load_rules([str(tmp_path)])

    assert [r.name for r in result.rules] == ["g-good"]
    assert len(result.warnings) == 6
    expected = [
        (bad_regex, "does not compile"),
        (no_trigger, "no trigger"),
        (bad_yaml, "bad front matter"),
        (bad_scope, "bad scope"),
        (empty_match, "empty string"),
        (no_front, "no YAML front matter"),
    ]
    for warning, (path, reason) in zip(result.warnings, expected, strict=True):
        assert str(path) in warning
        assert reason in warning


def test_earlier_folder_shadows_later_one_by_name(tmp_path: Path) -> None:
    first = write_rule(tmp_path / "project", "style.md", "name: style\ntrigger: first")
    second = write_rule(tmp_path / "user", "other.md", "name: style\ntrigger: second")
    write_rule(tmp_path / "user", "extra.md", "trigger: extra")

    result = load_rules([str(tmp_path / "project"), str(tmp_path / "user")])

    assert [(r.name, r.trigger) for r in result.rules] == [("style", "first"), ("extra", "extra")]
    assert result.rules[0].path == str(first)
    assert result.warnings == []
    assert len(result.shadowed) == 1
    assert str(second) in result.shadowed[0]


def test_missing_folder_gives_no_rules(tmp_path: Path) -> None:
    write_rule(tmp_path / "real", "r.md", "trigger: r")
    result = load_rules([str(tmp_path / "absent"), str(tmp_path / "real")])
    assert [r.name for r in result.rules] == ["r"]
    assert result.warnings == []


# --- reminder -----------------------------------------------------------------------------


def test_reminder_envelope_and_blank_line_join() -> None:
    one = rule("no-print", "print", body="Use logging.")
    two = rule("no-todo", "TODO", body="Finish the work.")
    text = render_reminder([one, two])

    blocks = text.split("\n\n<system-interrupt")
    assert len(blocks) == 2
    first_lines = text.split("\n")
    assert first_lines[0] == (
        '<system-interrupt reason="rule_violation" rule="no-print" path="/rules/no-print.md">'
    )
    single = render_reminder([one])
    assert text == single + "\n\n" + render_reminder([two])
    lines = single.split("\n")
    assert lines[-1] == "</system-interrupt>"
    assert lines[-2] == "Use logging."
    assert lines[-3] == ""
    preamble = lines[1:-3]
    assert 2 <= len(preamble) <= 3
    assert "interrupted" in preamble[0]
    assert "not an injected prompt" in " ".join(preamble)


def test_reminder_escapes_attributes_and_needs_rules() -> None:
    text = render_reminder([rule('a"b', "x")])
    assert text.startswith('<system-interrupt reason="rule_violation" rule="a&quot;b" ')
    with pytest.raises(ValueError):
        render_reminder([])


# --- matching -----------------------------------------------------------------------------


def test_match_split_across_three_deltas() -> None:
    matcher = StreamMatcher([rule("danger", r"rm -rf /")])
    assert matcher.feed("text", "now I will rm") == []
    assert matcher.feed("text", " -r") == []
    [found] = matcher.feed("text", "f / and more")
    assert found.rule.name == "danger"
    assert found.source == "text"
    assert found.offset == len("now I will ")
    assert found.text == "rm -rf /"


def test_match_is_not_reported_twice() -> None:
    matcher = StreamMatcher([rule("todo", "TODO")])
    assert names(matcher.feed("text", "x TODO")) == ["todo"]
    assert matcher.feed("text", " y") == []
    assert matcher.feed("text", " TODO again") == []
    assert matcher.fired == frozenset({"todo"})


def test_mark_fired_excludes_rule() -> None:
    matcher = StreamMatcher([rule("todo", "TODO"), rule("fixme", "FIXME")])
    matcher.mark_fired(["todo"])
    assert names(matcher.feed("text", "TODO FIXME")) == ["fixme"]


def test_reset_clears_buffers() -> None:
    matcher = StreamMatcher([rule("pair", "abcdef")])
    assert matcher.feed("text", "abc") == []
    matcher.reset()
    assert matcher.feed("text", "def") == []
    assert names(matcher.feed("text", " abcdef")) == ["pair"]


def test_two_rules_matching_in_same_delta_come_back_together() -> None:
    matcher = StreamMatcher([rule("one", "alpha"), rule("two", "beta"), rule("three", "gamma")])
    assert matcher.feed("text", "alp") == []
    found = matcher.feed("text", "ha beta")
    assert names(found) == ["one", "two"]
    assert [m.offset for m in found] == [0, 6]


def test_tool_buffers_are_separate_per_tool_call() -> None:
    matcher = StreamMatcher([rule("secret", "password", scope="tool")])
    assert matcher.feed("tool:shell", '{"cmd": "pass', block=1) == []
    assert matcher.feed("tool:shell", "word", block=2) == []
    assert matcher.feed("tool:write", "word", block=3) == []
    [found] = matcher.feed("tool:shell", 'word"}', block=1)
    assert (found.source, found.block, found.offset) == ("tool:shell", 1, len('{"cmd": "'))


def test_scope_filters_text_and_tool_sources() -> None:
    matcher = StreamMatcher(
        [
            rule("text-only", "DROP TABLE"),
            rule("any-tool", "DROP TABLE", scope="tool"),
            rule("shell-only", "DROP TABLE", scope="tool:shell"),
        ]
    )
    assert names(matcher.feed("tool:sql", "DROP TABLE users")) == ["any-tool"]
    assert names(matcher.feed("tool:shell", "DROP TABLE users", block=1)) == ["shell-only"]
    assert names(matcher.feed("text", "DROP TABLE users")) == ["text-only"]


def test_bad_source_and_bad_rules_are_refused() -> None:
    matcher = StreamMatcher([rule("x", "x")])
    with pytest.raises(ValueError):
        matcher.feed("tool:", "x")
    with pytest.raises(ValueError):
        matcher.feed("thinking", "x")
    with pytest.raises(ValueError):
        StreamMatcher([rule("x", "x"), rule("x", "y")])
    with pytest.raises(ValueError):
        StreamMatcher([rule("bad", "(")])
    with pytest.raises(ValueError):
        StreamMatcher([rule("x", "x")], window=0)


def test_offset_and_anchor_are_right_after_the_buffer_is_trimmed() -> None:
    window = 64
    rules = [
        rule("line-start", r"(?m)^import os"),
        rule("word", r"\bneedle"),
        rule("string-start", r"^y"),
    ]
    matcher = StreamMatcher(rules, window)
    text = "x" * 1000 + "import os" + "y" * 500
    for i in range(0, len(text), 7):
        # neither '^' nor '\b' may match where the retained tail was cut off
        assert matcher.feed("text", text[i : i + 7]) == []
    found = matcher.feed("text", "\nimport os needle")
    assert names(found) == ["line-start", "word"]
    assert found[0].offset == len(text) + 1
    assert found[1].offset == len(text) + len("\nimport os ")


def test_agrees_with_full_search_for_matches_within_the_window() -> None:
    rng = random.Random(4)
    triggers = [r"ab+c", r"c[ab]{3}a", r"(?<=b)aa", r"a.{0,20}cc"]
    for trial in range(200):
        reply = "".join(rng.choice("abc ") for _ in range(rng.randrange(0, 120)))
        matcher = StreamMatcher([rule(f"r{i}", t) for i, t in enumerate(triggers)], window=32)
        reported: dict[str, int] = {}
        pos = 0
        while pos < len(reply):
            step = rng.randrange(1, 9)
            for m in matcher.feed("text", reply[pos : pos + step]):
                reported[m.rule.name] = m.offset
            pos += step
        for i, trigger in enumerate(triggers):
            first = re.search(trigger, reply)
            assert (f"r{i}" in reported) == (first is not None), (trial, reply, trigger)
            if first is not None:
                found = reported[f"r{i}"]
                assert re.compile(trigger).match(reply, found), (trial, reply, trigger)


def test_match_longer_than_window_is_not_guaranteed() -> None:
    matcher = StreamMatcher([rule("long", r"BEGIN.*END")], window=16)
    matcher.feed("text", "BEGIN")
    for _ in range(10):
        matcher.feed("text", "." * 10)
    assert matcher.feed("text", "END") == []  # documented limit: 108 chars > window


def test_long_reply_in_small_deltas_does_bounded_work() -> None:
    window, delta, size = 4096, 10, 200_000
    rules = [rule("never", "NEVER-MATCHES"), rule("also-never", r"\bZZZ\b")]
    matcher = StreamMatcher(rules, window=window)
    chunk = "lorem ipsum dolor sit amet " * 10
    reply = (chunk * (size // len(chunk) + 1))[:size]
    deltas = 0
    for i in range(0, size, delta):
        assert matcher.feed("text", reply[i : i + delta]) == []
        deltas += 1
    assert deltas == size // delta
    # each rule searches at most the window before the delta plus the delta itself
    assert matcher.scanned_chars <= len(rules) * (window + delta) * deltas
    # a full rescan on every delta would have cost about n^2 / (2 * delta) per rule
    assert matcher.scanned_chars < len(rules) * size * size // (2 * delta) // 20
    # and a match at the very end is still found, at the right offset
    [found] = matcher.feed("text", " NEVER-MATCHES")
    assert found.offset == size + 1
