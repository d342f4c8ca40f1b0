"""The redactor masks what must never be stored or sent."""

from __future__ import annotations

import pytest

from actors.redact import MASK, Redactor


def test_known_secret_values_are_masked_everywhere() -> None:
    r = Redactor(["hunter2-db-pass", "abc"])
    out = r.text("connect with hunter2-db-pass, then hunter2-db-pass again; abc stays")
    assert "hunter2" not in out and out.count(MASK) == 2
    assert "abc stays" in out  # too short to be a secret worth masking


def test_credential_shapes_are_masked() -> None:
    r = Redactor()
    key = "sk-ant-api03-" + "x" * 40
    text = (
        f"ANTHROPIC_API_KEY={key}\n"
        "aws AKIAABCDEFGHIJKLMNOP here\n"
        "password: 'correct-horse-battery'\n"
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\n"
        "plain words are left alone"
    )
    out = r.text(text)
    assert key not in out and "AKIAABCDEFGHIJKLMNOP" not in out
    assert "correct-horse-battery" not in out and "password: '" in out
    assert "b3BlbnNzaC1rZXk" not in out
    assert out.endswith("plain words are left alone")


def test_nested_values_are_masked() -> None:
    r = Redactor(["s3cr3t-value"])
    data = {"path": "a.txt", "content": ["x s3cr3t-value y", 3], "n": None}
    assert r.value(data) == {"path": "a.txt", "content": [f"x {MASK} y", 3], "n": None}


GITLEAKS_SHAPES = {
    "pgp private key block": "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGX0aBcBCADk\n"
                             "=Ab1c\n-----END PGP PRIVATE KEY BLOCK-----",
    "stripe": "sk_live_" + "51HabcDEF1234567890xyz",
    "stripe restricted": "rk_test_" + "abcdefghijklmnop1234",
    "google api key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "gitlab": "glpat-" + "abcdefghij1234567890",
    "npm": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
    "slack app": "xapp-" + "1-A0123-456-abcdef",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
           "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}


@pytest.mark.parametrize("name", sorted(GITLEAKS_SHAPES))
def test_more_secret_shapes_are_masked_whole_and_alike_in_a_stream(name: str) -> None:
    secret = GITLEAKS_SHAPES[name]
    text = f"before {secret} after"
    r = Redactor()
    assert r.text(text) == f"before {MASK} after"
    for size in (1, 3, 7):  # arriving in deltas of any size: the same, nothing early
        stream = r.stream()
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        assert "".join(stream.feed(p) for p in pieces) + stream.flush() == r.text(text)


def test_look_alikes_of_the_new_shapes_are_left_alone() -> None:
    text = "skill_test_ok, AIza short, eyJust text, npm_run, glass-house"
    assert Redactor().text(text) == text
