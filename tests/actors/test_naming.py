"""Session names from the first prompt."""

from __future__ import annotations

import pytest

from tether.actors.naming import name_from_prompt


@pytest.mark.parametrize(
    ("prompt", "name"),
    [
        ("Fix the login bug", "fix-login-bug"),
        ("Please, can you refactor the PAYMENT module & add tests?", "refactor-payment-module"),
        ("What is in README.md", "readme-md"),
        ("deploy v2 to prod now", "deploy-v2-prod"),
        ("", "session"),
        ("the and of to", "session"),
        ("¿¡!!", "session"),
        ("Résumé parser", "sum-parser"),  # ASCII only; "r" is too short
        ("a b c x y refactor parser module", "refactor-parser-module"),  # seed 002: >= 2
        ("x 1 go", "go"),
    ],
)
def test_name_is_first_three_meaningful_words(prompt: str, name: str) -> None:
    assert name_from_prompt(prompt, set()) == name


def test_taken_names_get_numbered_suffixes() -> None:
    taken: set[str] = set()
    names = []
    for _ in range(4):
        name = name_from_prompt("fix the login bug", taken)
        taken.add(name)
        names.append(name)
    assert names == ["fix-login-bug", "fix-login-bug-2", "fix-login-bug-3", "fix-login-bug-4"]


def test_gap_in_suffixes_is_reused_in_order() -> None:
    assert name_from_prompt("fix login bug", {"fix-login-bug", "fix-login-bug-3"}) == (
        "fix-login-bug-2"
    )


def test_default_name_is_deduplicated_too() -> None:
    assert name_from_prompt("?", {"session"}) == "session-2"


def test_names_are_valid_subject_tokens() -> None:
    from tether.events.subjects import check_token

    for prompt in ("Fix: the *login* bug > now", "a.b.c d e", "tabs\tand\nnewlines"):
        check_token(name_from_prompt(prompt, set()), "name")
