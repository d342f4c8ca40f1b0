"""Tier 0: first-match order, asymmetric matching, malformed policies name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.actors.security.conftest import T0, Env
from tether.actors.gatekeeper.security import (
    ActionRequest,
    PolicyError,
    enrich,
    load_policy,
    parse_policy,
)
from tether.actors.gatekeeper.security.policy import DEFAULT_POLICY_YAML, default_policy


def _action(env: Env, tool: str, payload: dict[str, object]):  # type: ignore[no-untyped-def]
    return enrich(ActionRequest("r", tool, dict(payload), T0), str(env.ws), str(env.home))


ORDERED = """\
rules:
  - name: first
    tool: run_shell
    command: '^git '
    verdict: allow
  - name: second
    tool: run_shell
    command: '^git push'
    verdict: deny
  - name: third
    tool: "*"
    verdict: escalate
    tier: 3
"""


def test_first_match_wins(env: Env) -> None:
    policy = parse_policy(ORDERED, "ordered.yaml")
    push = policy.evaluate(_action(env, "run_shell", {"command": "git push"}))
    assert (push.verdict, push.rule_name, push.line) == ("allow", "first", 2)
    other = policy.evaluate(_action(env, "read_file", {"path": "README.md"}))
    assert (other.verdict, other.rule_name, other.tier) == ("escalate", "third", 3)


def test_reordering_changes_the_winner(env: Env) -> None:
    swapped = ORDERED.replace("name: first", "name: tmp").replace("name: second", "name: first")
    policy = parse_policy(swapped.replace("verdict: allow", "verdict: deny", 1))
    assert policy.evaluate(_action(env, "run_shell", {"command": "git push"})).verdict == "deny"


def test_no_match_uses_the_default(env: Env) -> None:
    policy = parse_policy("rules: []\n")
    decision = policy.evaluate(_action(env, "read_file", {"path": "README.md"}))
    assert (decision.verdict, decision.tier, decision.rule) == ("escalate", 1, None)
    strict = parse_policy("default: deny\nrules: []\n")
    assert strict.evaluate(_action(env, "read_file", {"path": "README.md"})).verdict == "deny"


def test_allow_rules_must_cover_every_simple_command(env: Env) -> None:
    policy = parse_policy("rules:\n  - command: '^git status'\n    verdict: allow\n")
    ok = policy.evaluate(_action(env, "run_shell", {"command": "git status"}))
    sneaky = policy.evaluate(_action(env, "run_shell", {"command": "git status; rm -r src"}))
    assert ok.verdict == "allow"
    assert sneaky.verdict == "escalate"


def test_deny_rules_fire_on_any_command_path_or_class(env: Env) -> None:
    policy = parse_policy(
        "rules:\n"
        "  - command: '^rm\\b'\n    verdict: deny\n"
        "  - path: 'secret/**'\n    verdict: deny\n"
        "  - action: network\n    verdict: deny\n"
    )
    assert policy.evaluate(_action(env, "run_shell", {"command": "ls && rm x"})).verdict == "deny"
    cat = _action(env, "run_shell", {"command": "cat README.md Secret/key.txt"})
    assert policy.evaluate(cat).rule == 1  # paths compared without regard to case for deny
    curl = _action(env, "run_shell", {"command": "echo hi | curl -d @- https://x.example"})
    assert policy.evaluate(curl).rule == 2


def test_allow_path_rules_need_every_path_inside_the_glob(env: Env) -> None:
    policy = parse_policy("rules:\n  - tool: run_shell\n    path: 'src/**'\n    verdict: allow\n")
    inside = _action(env, "run_shell", {"command": "cat src/main.py"})
    mixed = _action(env, "run_shell", {"command": "cat src/main.py README.md"})
    assert policy.evaluate(inside).verdict == "allow"
    assert policy.evaluate(mixed).verdict == "escalate"


def test_action_class_lists(env: Env) -> None:
    policy = parse_policy("rules:\n  - action: [read, execute]\n    verdict: allow\n")
    assert policy.evaluate(_action(env, "run_shell", {"command": "cat x"})).verdict == "allow"
    writes = _action(env, "run_shell", {"command": "cat x > y"})
    assert policy.evaluate(writes).verdict == "escalate"


def test_the_default_policy_parses_and_reads_well(env: Env) -> None:
    policy = default_policy()
    assert policy.default == "escalate" and policy.default_tier == 1
    assert "rules:" in DEFAULT_POLICY_YAML
    assert policy.evaluate(_action(env, "run_shell", {"command": "sudo ls"})).verdict == "deny"
    push = policy.evaluate(_action(env, "run_shell", {"command": "git push origin main"}))
    assert (push.verdict, push.tier) == ("escalate", 3)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("rules: [\n", 2, "YAML syntax"),
        ("rules:\n  - verdict: allow\n    tool: [a\n", 4, "YAML syntax"),
        ("rules:\n  - verdict: allow\n  - verdict: maybe\n", 3, "maybe"),
        ("rules:\n  - verdict: allow\n  - tool: x\n", 3, "verdict"),
        ("rules:\n  - verdict: allow\n\n  - verdict: deny\n    bogus: 1\n", 5, "bogus"),
        ("rules:\n  - verdict: deny\n    command: '('\n", 3, "regex"),
        ("rules:\n  - verdict: deny\n    verdict: allow\n", 3, "duplicate"),
        ("rules:\n  - verdict: allow\n    action: [read, fly]\n", 3, "fly"),
        ("rules:\n  - verdict: allow\n    tier: 2\n", 3, "tier"),
        ("rules:\n  - verdict: escalate\n    tier: 9\n", 3, "tier"),
        ("rules:\n  - verdict: allow\n    tool: 3\n", 3, "tool"),
        ("default: maybe\nrules: []\n", 1, "maybe"),
        ("version: 2\nrules: []\n", 1, "version"),
        ("default: allow\n", 1, "rules"),
        ("", 1, "empty"),
        ("- verdict: allow\n", 1, "mapping"),
        ("rules: yes\n", 1, "rules"),
    ],
)
def test_malformed_policies_name_file_and_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert info.value.file == str(path)
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"{path}:{line}:")
    assert fragment.lower() in str(info.value).lower()


def test_a_missing_file_is_an_error_not_a_permissive_policy(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "nope.yaml")


def test_a_good_file_loads(tmp_path: Path, env: Env) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(ORDERED)
    policy = load_policy(path)
    assert policy.source == str(path) and policy.lines == (2, 6, 10)
    decision = policy.evaluate(_action(env, "run_shell", {"command": "git log"}))
    assert decision.reason.startswith(f"first ({path}:2)")
