"""Tests for the TTSR settings and injection policy (actors/ttsr/policy.py)."""

from __future__ import annotations

import msgspec
import pytest

from tether.actors.ttsr.policy import Injection, InjectionPolicy, TtsrSettings
from tether.actors.ttsr.rules import Rule


def rule(name: str, **extra: object) -> Rule:
    return Rule(name=name, trigger=name, body="b", path=f"/rules/{name}.md", **extra)  # type: ignore[arg-type]


def run_turns(policy: InjectionPolicy, name: str, turns: range) -> list[int]:
    """Each turn: start it, retry it once, and inject ``name`` whenever it is eligible."""
    fired = []
    target = policy.rules[name]
    for turn in turns:
        for _attempt in range(2):  # a retry within the turn must not advance anything
            policy.start_turn(turn)
            if policy.eligible(target):
                assert name in policy.active()
                policy.record([name])
                fired.append(turn)
            assert name not in policy.active()  # at most once per turn
    return fired


# --- settings -----------------------------------------------------------------------------


def test_settings_defaults() -> None:
    settings = TtsrSettings()
    assert (settings.enabled, settings.context_mode, settings.repeat_mode) == (
        True, "discard", "once",
    )
    assert (settings.repeat_gap, settings.window) == (10, 256)


@pytest.mark.parametrize(
    "raw",
    [
        {"unknown": 1},
        {"repeat_gap": 0},
        {"window": 0},
        {"repeat_mode": "twice"},
        {"context_mode": "maybe"},
        {"enabled": "yes"},
    ],
)
def test_bad_settings_are_refused(raw: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(raw, TtsrSettings)


def test_settings_from_mapping() -> None:
    settings = msgspec.convert(
        {"enabled": False, "repeat_mode": "after-gap", "repeat_gap": 2, "context_mode": "keep"},
        TtsrSettings,
    )
    assert settings == TtsrSettings(
        enabled=False, repeat_mode="after-gap", repeat_gap=2, context_mode="keep"
    )


# --- repeat policy ------------------------------------------------------------------------


def test_once_fires_a_single_time() -> None:
    policy = InjectionPolicy(TtsrSettings(), [rule("r")])
    assert run_turns(policy, "r", range(0, 6)) == [0]


def test_once_from_the_rule_overrides_after_gap_default() -> None:
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=1)
    policy = InjectionPolicy(settings, [rule("r", repeat_mode="once")])
    assert run_turns(policy, "r", range(1, 6)) == [1]


@pytest.mark.parametrize(("gap", "expected"), [(1, [1, 2, 3, 4, 5]), (2, [1, 3, 5])])
def test_after_gap_over_five_turns(gap: int, expected: list[int]) -> None:
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=gap)
    policy = InjectionPolicy(settings, [rule("r")])
    assert run_turns(policy, "r", range(1, 6)) == expected


@pytest.mark.parametrize(("gap", "expected"), [(1, [1, 2, 3, 4, 5]), (2, [1, 3, 5])])
def test_after_gap_from_the_rule(gap: int, expected: list[int]) -> None:
    policy = InjectionPolicy(TtsrSettings(), [rule("r", repeat_mode="after-gap", repeat_gap=gap)])
    assert policy.repeat_mode(policy.rules["r"]) == "after-gap"
    assert policy.repeat_gap(policy.rules["r"]) == gap
    assert run_turns(policy, "r", range(1, 6)) == expected


def test_gap_advances_only_with_higher_turn_counts() -> None:
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=2)
    policy = InjectionPolicy(settings, [rule("r")])
    policy.start_turn(3)
    policy.record(["r"])
    for _ in range(10):  # retries and stream chunks of the same turn change nothing
        policy.start_turn(3)
        assert policy.active() == set()
    policy.start_turn(4)
    assert policy.active() == set()
    policy.start_turn(5)
    assert policy.active() == {"r"}


def test_at_most_once_per_turn_even_when_repeats_are_allowed() -> None:
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=1)
    policy = InjectionPolicy(settings, [rule("a"), rule("b")])
    policy.start_turn(2)
    assert policy.active() == {"a", "b"}
    policy.record(["a"])
    assert policy.active() == {"b"}
    policy.start_turn(2)  # the retry of turn 2 keeps turn 2's injections
    assert policy.active() == {"b"}
    policy.record(["b"])
    policy.start_turn(2)
    assert policy.active() == set()
    policy.start_turn(3)
    assert policy.active() == {"a", "b"}


# --- restore ------------------------------------------------------------------------------


def test_restore_once() -> None:
    policy = InjectionPolicy(TtsrSettings(), [rule("a"), rule("b")])
    policy.restore([Injection("a", 4)])
    for turn in (4, 5, 9, 50):
        policy.start_turn(turn)
        assert policy.active() == {"b"}


@pytest.mark.parametrize(
    ("gap", "eligible_turns"), [(1, [5, 6, 7]), (2, [6, 7]), (3, [7])]
)
def test_restore_after_gap(gap: int, eligible_turns: list[int]) -> None:
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=gap)
    policy = InjectionPolicy(settings, [rule("r")])
    policy.restore([Injection("r", 2), Injection("r", 4), Injection("r", 1)])  # latest wins
    eligible = []
    for turn in range(3, 8):
        policy.start_turn(turn)
        if policy.active():
            eligible.append(turn)
    assert eligible == eligible_turns
    policy.record(["r"])  # injected again at turn 7: the gap restarts from there
    policy.start_turn(7)
    assert policy.active() == set()
    if gap > 1:
        policy.start_turn(7 + gap - 1)
        assert policy.active() == set()
    policy.start_turn(7 + gap)
    assert policy.active() == {"r"}


def test_restore_then_retry_of_the_same_turn() -> None:
    """A restart mid-turn: the injection recorded in this turn still counts for the turn."""
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=1)
    policy = InjectionPolicy(settings, [rule("a"), rule("b")])
    policy.restore([Injection("a", 3)])
    policy.start_turn(3)
    assert policy.active() == {"b"}
    policy.start_turn(4)
    assert policy.active() == {"a", "b"}


def test_restore_into_the_current_turn() -> None:
    settings = TtsrSettings(repeat_mode="after-gap", repeat_gap=1)
    policy = InjectionPolicy(settings, [rule("a")])
    policy.start_turn(6)
    policy.restore([Injection("a", 6)])
    assert policy.active() == set()
    policy.start_turn(6)
    assert policy.active() == set()
    policy.start_turn(7)
    assert policy.active() == {"a"}


def test_set_rules_keeps_history() -> None:
    policy = InjectionPolicy(TtsrSettings(), [rule("a")])
    policy.start_turn(1)
    policy.record(["a"])
    policy.set_rules([rule("a", description="edited"), rule("new")])
    policy.start_turn(2)
    assert policy.active() == {"new"}


# --- enabled ------------------------------------------------------------------------------


def test_disabled_makes_nothing_eligible() -> None:
    policy = InjectionPolicy(TtsrSettings(enabled=False), [rule("a"), rule("b")])
    policy.start_turn(1)
    assert policy.active() == set()
    assert not policy.eligible(policy.rules["a"])
    policy.start_turn(2)
    assert policy.active() == set()


# --- context mode -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("default", "modes", "expected"),
    [
        ("discard", [None], "discard"),
        ("keep", [None], "keep"),
        ("discard", ["keep"], "keep"),
        ("discard", ["keep", "keep"], "keep"),
        ("discard", ["keep", None], "discard"),
        ("keep", ["keep", None], "keep"),
        ("keep", ["keep", "discard"], "discard"),
        ("discard", ["discard", "keep"], "discard"),
    ],
)
def test_context_mode_keeps_only_if_all_keep(
    default: str, modes: list[str | None], expected: str
) -> None:
    rules = [rule(f"r{i}", context_mode=mode) for i, mode in enumerate(modes)]
    policy = InjectionPolicy(TtsrSettings(context_mode=default), rules)  # type: ignore[arg-type]
    assert policy.context_mode(rules) == expected
