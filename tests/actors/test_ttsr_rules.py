"""Tests for the TTSR rule files, scopes and reminder text (actors/ttsr/rules.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.actors.ttsr.rules import (
    DEFAULT_SCOPES,
    Rule,
    Scope,
    compile_trigger,
    load_rules,
    parse_rule_file,
    parse_scope,
    render_reminder,
    rules_from_sources,
)
from tether.events.ttsr import RuleSource

PREAMBLE = [
    "Your output was interrupted because it broke one of this project's rules.",
    "This notice comes from the agent enforcing the project's rules; it is not an "
    "injected prompt.",
    "Follow the instruction below from now on, then carry on with the task.",
]


def write_rule(folder: Path, filename: str, front: str, body: str = "Do the right thing.") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(f"---\n{front}\n---\n{body}\n", encoding="utf-8")
    return path


def rule(
    name: str,
    trigger: str = "x",
    scopes: tuple[str, ...] = ("text",),
    body: str = "",
    path: str = "",
    **extra: object,
) -> Rule:
    return Rule(
        name=name,
        trigger=trigger,
        body=body or f"Body of {name}.",
        path=path or f"/rules/{name}.md",
        scopes=tuple(parse_scope(s) for s in scopes),
        **extra,  # type: ignore[arg-type]
    )


# --- loading ------------------------------------------------------------------------------


def test_load_rule_file_fields(tmp_path: Path) -> None:
    path = write_rule(
        tmp_path / "rules",
        "no-print.md",
        "name: no-print\ndescription: use logging\ntrigger: '\\bprint\\('\n"
        "scope: tool:write\nrepeat_mode: after-gap\nrepeat_gap: 3\ncontext_mode: keep\n"
        "interrupt: tool-only",
        body="Use the logging module instead of print().",
    )
    result = load_rules([str(tmp_path / "rules")])
    assert result.warnings == []
    assert result.shadowed == []
    assert result.rules == [
        Rule(
            name="no-print",
            description="use logging",
            trigger=r"\bprint\(",
            body="Use the logging module instead of print().",
            path=str(path),
            scopes=(Scope("tool", "write"),),
            repeat_mode="after-gap",
            repeat_gap=3,
            context_mode="keep",
            interrupt="tool-only",
            origin="",
        )
    ]


def test_defaults_name_from_stem_scopes_and_unset_settings(tmp_path: Path) -> None:
    write_rule(tmp_path, "no-todo.md", "trigger: TODO")
    [loaded] = load_rules([str(tmp_path)]).rules
    assert loaded.name == "no-todo"
    assert DEFAULT_SCOPES == ("text", "tool")
    assert loaded.scopes == (Scope("text"), Scope("tool"))
    assert loaded.repeat_mode is None
    assert loaded.repeat_gap is None
    assert loaded.context_mode is None
    assert loaded.interrupt == "always"
    assert loaded.body == "Do the right thing."


def test_blank_name_falls_back_to_stem_and_scope_list(tmp_path: Path) -> None:
    write_rule(tmp_path, "stem.md", "name: '  '\ntrigger: x\nscope: [thinking, 'tool:sh*(*.sh)']")
    [loaded] = load_rules([str(tmp_path)]).rules
    assert loaded.name == "stem"
    assert loaded.scopes == (Scope("thinking"), Scope("tool", "sh*", "*.sh"))


def test_only_md_files_in_name_order_and_not_recursive(tmp_path: Path) -> None:
    write_rule(tmp_path, "b.md", "trigger: b")
    write_rule(tmp_path, "a.md", "trigger: a")
    write_rule(tmp_path, "c.txt", "trigger: c")
    write_rule(tmp_path / "sub", "d.md", "trigger: d")
    (tmp_path / "dir.md").mkdir()
    result = load_rules([str(tmp_path)])
    assert [r.name for r in result.rules] == ["a", "b"]
    assert result.warnings == []


def test_bad_rules_are_skipped_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    bad_regex = write_rule(tmp_path, "a-bad-regex.md", "trigger: 'foo('")
    no_trigger = write_rule(tmp_path, "b-no-trigger.md", "name: lazy")
    bad_yaml = write_rule(tmp_path, "c-bad-yaml.md", "trigger: [unclosed")
    bad_scope = write_rule(tmp_path, "d-bad-scope.md", "trigger: x\nscope: everywhere")
    empty_match = write_rule(tmp_path, "e-empty.md", "trigger: 'a*'")
    no_front = tmp_path / "f-no-front.md"
    no_front.write_text("just a note\n", encoding="utf-8")
    write_rule(tmp_path, "g-good.md", "trigger: good")
    empty_trigger = write_rule(tmp_path, "h-empty-trigger.md", "trigger: ''")
    unclosed = tmp_path / "i-unclosed.md"
    unclosed.write_text("---\ntrigger: x\nno closing line\n", encoding="utf-8")
    not_utf8 = tmp_path / "j-binary.md"
    not_utf8.write_bytes(b"\xff\xfe---\ntrigger: x\n---\n")
    not_mapping = write_rule(tmp_path, "k-list.md", "- a\n- b")
    lookbehind = write_rule(tmp_path, "l-lookbehind.md", "trigger: '(?<=a+)b'")
    write_rule(tmp_path, "m-good.md", "trigger: fine")

    result = load_rules([str(tmp_path)])  # never raises

    assert [r.name for r in result.rules] == ["g-good", "m-good"]
    expected = [
        (bad_regex, "does not compile"),
        (no_trigger, "no trigger"),
        (bad_yaml, "bad front matter"),
        (bad_scope, "bad scope"),
        (empty_match, "empty string"),
        (no_front, "no YAML front matter"),
        (empty_trigger, "no trigger"),
        (unclosed, "no YAML front matter"),
        (not_utf8, "cannot read"),
        (not_mapping, "bad front matter"),
        (lookbehind, "does not compile"),
    ]
    assert len(result.warnings) == len(expected)
    for warning, (path, reason) in zip(result.warnings, expected, strict=True):
        assert warning.startswith(f"{path}: skipped: ")
        assert reason in warning


@pytest.mark.parametrize(
    ("front", "reason"),
    [
        ("trigger: x\nunknown_key: 1", "unknown_key"),
        ("trigger: x\nrepeat_gap: 0", "repeat_gap must be at least 1, got 0"),
        ("trigger: x\nrepeat_gap: -3", "repeat_gap must be at least 1"),
        ("trigger: x\nrepeat_gap: soon", "repeat_gap"),
        ("trigger: x\ninterrupt: sometimes", "interrupt"),
        ("trigger: x\nrepeat_mode: twice", "repeat_mode"),
        ("trigger: x\ncontext_mode: maybe", "context_mode"),
        ("trigger: x\nscope: 'text:foo'", "bad scope"),
        ("trigger: x\nscope: [text, 5]", "bad front matter"),
    ],
)
def test_bad_settings_in_front_matter_are_skipped(tmp_path: Path, front: str, reason: str) -> None:
    bad = write_rule(tmp_path, "a-bad.md", front)
    write_rule(tmp_path, "b-good.md", "trigger: y")
    result = load_rules([str(tmp_path)])
    assert [r.name for r in result.rules] == ["b-good"]
    [warning] = result.warnings
    assert warning.startswith(f"{bad}: skipped: ")
    assert reason in warning
    with pytest.raises(ValueError):
        parse_rule_file(bad)


def test_trigger_whose_compile_overflows_is_skipped_not_raised(tmp_path: Path) -> None:
    huge = write_rule(tmp_path, "a-huge.md", "trigger: 'a{4294967296}'")
    write_rule(tmp_path, "b-good.md", "trigger: y")
    result = load_rules([str(tmp_path)])
    assert [r.name for r in result.rules] == ["b-good"]
    [warning] = result.warnings
    assert str(huge) in warning


def test_earlier_folder_shadows_later_one_by_name(tmp_path: Path) -> None:
    first = write_rule(tmp_path / "project", "style.md", "name: style\ntrigger: first")
    second = write_rule(tmp_path / "user", "other.md", "name: style\ntrigger: second")
    write_rule(tmp_path / "user", "extra.md", "trigger: extra")

    result = load_rules([str(tmp_path / "project"), str(tmp_path / "user")])

    assert [(r.name, r.trigger) for r in result.rules] == [("style", "first"), ("extra", "extra")]
    assert result.rules[0].path == str(first)
    assert result.warnings == []
    [note] = result.shadowed
    assert str(second) in note
    assert str(first) in note
    assert "'style'" in note


def test_duplicates_with_origins(tmp_path: Path) -> None:
    write_rule(tmp_path / "ws", "style.md", "trigger: workspace-version")
    write_rule(tmp_path / "user", "style.md", "trigger: user-version")
    write_rule(tmp_path / "user", "mine.md", "trigger: mine")

    result = load_rules([("workspace", str(tmp_path / "ws")), ("user", str(tmp_path / "user"))])

    assert [(r.name, r.origin, r.trigger) for r in result.rules] == [
        ("style", "workspace", "workspace-version"),
        ("mine", "user", "mine"),
    ]
    assert len(result.shadowed) == 1
    assert str(tmp_path / "user" / "style.md") in result.shadowed[0]


def test_duplicate_names_within_one_folder_keep_the_first_file(tmp_path: Path) -> None:
    write_rule(tmp_path, "a.md", "name: same\ntrigger: one")
    write_rule(tmp_path, "b.md", "name: same\ntrigger: two")
    result = load_rules([str(tmp_path)])
    assert [r.trigger for r in result.rules] == ["one"]
    assert len(result.shadowed) == 1


def test_same_folder_twice_is_loaded_once_and_empty_entries_ignored(tmp_path: Path) -> None:
    write_rule(tmp_path, "r.md", "trigger: r")
    result = load_rules([("a", str(tmp_path)), ("b", ""), ("c", str(tmp_path))])
    assert [(r.name, r.origin) for r in result.rules] == [("r", "a")]
    assert result.shadowed == []
    assert result.warnings == []


def test_missing_folder_gives_no_rules(tmp_path: Path) -> None:
    write_rule(tmp_path / "real", "r.md", "trigger: r")
    (tmp_path / "file-not-folder").write_text("x", encoding="utf-8")
    result = load_rules(
        [str(tmp_path / "absent"), str(tmp_path / "file-not-folder"), str(tmp_path / "real")]
    )
    assert [r.name for r in result.rules] == ["r"]
    assert result.warnings == []
    assert load_rules([]).rules == []


def test_bom_and_crlf_front_matter(tmp_path: Path) -> None:
    path = tmp_path / "crlf.md"
    path.write_bytes("\ufeff---\r\ntrigger: x\r\n---\r\nBody.\r\n".encode())
    [loaded] = load_rules([str(tmp_path)]).rules
    assert loaded.trigger == "x"
    assert loaded.body == "Body."


# --- triggers -----------------------------------------------------------------------------


def test_compile_trigger() -> None:
    assert compile_trigger(r"\bprint\(").search("x = print(1)")
    with pytest.raises(ValueError, match="does not compile"):
        compile_trigger("(")
    with pytest.raises(ValueError, match="empty string"):
        compile_trigger("a?")
    with pytest.raises(ValueError, match="empty string"):
        compile_trigger("^")


# --- scopes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scope"),
    [
        ("text", Scope("text")),
        ("thinking", Scope("thinking")),
        ("tool", Scope("tool")),
        (" tool:shell ", Scope("tool", "shell")),
        ("tool:write_*", Scope("tool", "write_*")),
        ("tool:write_file(*.py)", Scope("tool", "write_file", "*.py")),
        ("tool(src/*)", Scope("tool", "", "src/*")),
    ],
)
def test_parse_scope(text: str, scope: Scope) -> None:
    assert parse_scope(text) == scope


@pytest.mark.parametrize(
    "text", ["everywhere", "text:foo", "thinking(*.py)", "tool:a b", "tool:", "tool:x(", ""]
)
def test_parse_scope_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="bad scope"):
        parse_scope(text)


def test_scopes_per_source() -> None:
    text = rule("t", scopes=("text",))
    thinking = rule("th", scopes=("thinking",))
    any_tool = rule("tool", scopes=("tool",))
    shell = rule("sh", scopes=("tool:shell",))
    writes = rule("w", scopes=("tool:write_*",))
    both = rule("both", scopes=("text", "thinking"))
    sources = ["text", "thinking", "tool:shell", "tool:write_file", "tool:read_file"]
    watched = {
        r.name: [s for s in sources if r.watches(s)]
        for r in (text, thinking, any_tool, shell, writes, both)
    }
    assert watched == {
        "t": ["text"],
        "th": ["thinking"],
        "tool": ["tool:shell", "tool:write_file", "tool:read_file"],
        "sh": ["tool:shell"],
        "w": ["tool:write_file"],
        "both": ["text", "thinking"],
    }
    assert not any_tool.watches("tool")  # a tool source always names its tool
    assert not text.watches("tool:text")


def test_path_fits_with_glob() -> None:
    py = rule("py", scopes=("tool:write_file(*.py)",))
    assert py.path_fits("tool:write_file", None) is None
    assert py.path_fits("tool:write_file", "src/app/main.py") is True
    assert py.path_fits("tool:write_file", "README.md") is False
    assert py.path_fits("tool:shell", "main.py") is False  # no scope fits the source
    assert Scope("tool", "write_file", "*.py").path_fits(None) is None
    assert Scope("tool", "write_file").path_fits(None) is True


def test_path_fits_with_several_scopes() -> None:
    two_globs = rule("g", scopes=("tool:write_file(*.py)", "tool:write_file(*.md)"))
    assert two_globs.path_fits("tool:write_file", None) is None
    assert two_globs.path_fits("tool:write_file", "a.md") is True
    assert two_globs.path_fits("tool:write_file", "a.py") is True
    assert two_globs.path_fits("tool:write_file", "a.txt") is False

    glob_or_any = rule("a", scopes=("tool:write_file(*.py)", "tool"))
    assert glob_or_any.path_fits("tool:write_file", None) is True
    assert glob_or_any.path_fits("tool:write_file", "a.txt") is True

    text_and_glob = rule("tg", scopes=("text", "tool:edit(*.py)"))
    assert text_and_glob.path_fits("text", None) is True
    assert text_and_glob.path_fits("tool:edit", None) is None
    assert text_and_glob.path_fits("tool:edit", "x.rs") is False


@pytest.mark.parametrize(
    ("interrupt", "expected"),
    [
        ("always", {"text": True, "thinking": True, "tool:shell": True}),
        ("prose-only", {"text": True, "thinking": True, "tool:shell": False}),
        ("tool-only", {"text": False, "thinking": False, "tool:shell": True}),
        ("never", {"text": False, "thinking": False, "tool:shell": False}),
    ],
)
def test_aborts_on(interrupt: str, expected: dict[str, bool]) -> None:
    r = rule("r", interrupt=interrupt)
    assert {source: r.aborts_on(source) for source in expected} == expected


# --- reminder -----------------------------------------------------------------------------


def test_reminder_exact_envelope() -> None:
    one = rule("no-print", "print", body="Use logging.\nReally.")
    assert render_reminder([one]).split("\n") == [
        '<system-interrupt reason="rule_violation" rule="no-print" path="/rules/no-print.md">',
        *PREAMBLE,
        "",
        "Use logging.",
        "Really.",
        "</system-interrupt>",
    ]


def test_reminder_blank_line_join_in_given_order() -> None:
    one = rule("no-print", "print", body="Use logging.")
    two = rule("no-todo", "TODO", body="Finish the work.")
    text = render_reminder([two, one])
    assert text == render_reminder([two]) + "\n\n" + render_reminder([one])
    assert text.index('rule="no-todo"') < text.index('rule="no-print"')
    assert text.count("<system-interrupt ") == 2
    assert text.count("</system-interrupt>") == 2


def test_reminder_escapes_attributes_not_body_and_needs_rules() -> None:
    r = rule('a"b<c>&\'d', "x", body="<b>keep & as is</b>", path='/r/"x" & <y>.md')
    lines = render_reminder([r]).split("\n")
    assert lines[0] == (
        '<system-interrupt reason="rule_violation" rule="a&quot;b&lt;c&gt;&amp;&#x27;d" '
        'path="/r/&quot;x&quot; &amp; &lt;y&gt;.md">'
    )
    assert lines[-2] == "<b>keep & as is</b>"
    with pytest.raises(ValueError):
        render_reminder([])


def test_the_sources_loaded_give_the_same_rules_again(tmp_path: Path) -> None:
    ws, user = tmp_path / "ws", tmp_path / "user"
    write_rule(ws, "a.md", "name: a\ntrigger: AAA\nscope: text", body="Body a.")
    write_rule(user, "a.md", "name: a\ntrigger: shadowed")  # shadowed: not in force
    write_rule(user, "b.md", "name: b\ntrigger: '\\bBBB'\ninterrupt: never")
    write_rule(user, "bad.md", "name: bad\ntrigger: '('")  # skipped: not in force
    loaded = load_rules([("workspace", str(ws)), ("user", str(user))])
    assert [(s.path, s.origin) for s in loaded.sources] == [
        (str(ws / "a.md"), "workspace"), (str(user / "b.md"), "user")]
    assert loaded.sources[0].text == (ws / "a.md").read_text()
    for path in (ws / "a.md", user / "b.md"):
        path.unlink()  # what was recorded no longer needs the files
    again = rules_from_sources(loaded.sources)
    assert again.rules == loaded.rules and again.warnings == []
    assert again.sources == loaded.sources


def test_a_recorded_source_that_no_longer_parses_is_skipped_with_a_warning() -> None:
    broken = RuleSource(path="/gone/x.md", origin="user", text="no front matter")
    result = rules_from_sources([broken])
    assert result.rules == [] and result.warnings and "/gone/x.md" in result.warnings[0]


def test_a_huge_file_and_a_link_out_of_the_folder_are_not_read(tmp_path: Path) -> None:
    rules, outside = tmp_path / "rules", tmp_path / "outside"
    write_rule(rules, "ok.md", "name: ok\ntrigger: OK")
    write_rule(rules, "huge.md", "name: huge\ntrigger: HUGE", body="x" * (64 * 1024))
    write_rule(outside, "elsewhere.md", "name: elsewhere\ntrigger: ELSEWHERE")
    (rules / "out.md").symlink_to(outside / "elsewhere.md")
    (rules / "alias.md").symlink_to(rules / "ok.md")  # a link inside the folder is fine
    loaded = load_rules([str(rules)])
    assert [r.name for r in loaded.rules] == ["ok"]  # alias.md is a second "ok": shadowed
    assert any("huge.md: skipped" in w and "at most 65,536" in w for w in loaded.warnings)
    assert any("out.md: skipped: a symlink leading out" in w for w in loaded.warnings)
    assert loaded.shadowed and "alias.md" in loaded.shadowed[0]


def test_hard_links_a_workspace_folder_led_out_and_too_many_files_are_not_read(
        tmp_path: Path) -> None:
    from tether.actors.ttsr.rules import MAX_RULE_FILES

    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    write_rule(elsewhere / "rules", "far.md", "name: far\ntrigger: FAR")
    (ws / ".tether").mkdir(parents=True)
    (ws / ".tether" / "rules").symlink_to(elsewhere / "rules")  # came with a clone
    led_out = load_rules([("workspace", str(ws / ".tether" / "rules"))])
    assert led_out.rules == [] and "leads it out of its workspace" in led_out.warnings[0]

    rules = tmp_path / "rules"
    write_rule(rules, "a.md", "name: a\ntrigger: AAA")
    os.link(rules / "a.md", tmp_path / "other-name.md")
    linked = load_rules([str(rules)])
    assert linked.rules == [] and "a hard link" in linked.warnings[0]

    many = tmp_path / "many"
    for i in range(MAX_RULE_FILES + 3):
        write_rule(many, f"r{i:03d}.md", f"name: r{i:03d}\ntrigger: R{i:03d}X")
    capped = load_rules([str(many)])
    assert len(capped.rules) == MAX_RULE_FILES and len(capped.warnings) == 3
    assert "the most a session takes" in capped.warnings[0]
