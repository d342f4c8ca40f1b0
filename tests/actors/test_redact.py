"""The redactor masks what must never be stored or sent."""

from __future__ import annotations

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
