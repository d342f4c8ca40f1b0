"""The redactor masks what must never be stored or sent."""

from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tether.actors.model import redact, redact_scan, secret_rules
from tether.actors.model.redact import MASK, Redactor
from tether.actors.model.redact_scan import load_hyperscan


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
    "huggingface": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "sendgrid": "SG." + "aBcDeFgHiJkLmNoPqRsTuV" + "."
                + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-abcde",
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
    text = ("skill_test_ok, AIza short, eyJust text, npm_run, glass-house, hf_short, "
            "SG.abc, chef_hat")
    assert Redactor().text(text) == text


# --- the two engines: hyperscan (locator) and re (fallback) give the same answers ----------



def on(engine: str, secrets: list[str] | None = None) -> Redactor:
    return Redactor(secrets or [], engine=engine, hs_min=0)


SHAPES = {
    **GITLEAKS_SHAPES,
    "anthropic": "sk-ant-api03-" + "x" * 40,
    "openai": "sk-" + "a1B2c3D4" * 6,
    "openai project": "sk-proj-" + "Xy_9-Zq8" * 4,
    "aws": "AKIAABCDEFGHIJKLMNOP",
    "github": "ghp_" + "A1b2C3d4E5" * 4,
    "github pat": "github_pat_11ABCDEFG0" + "abc_DEF_12" * 3,
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "openssh key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n"
                   "-----END OPENSSH PRIVATE KEY-----",
}
"""Every credential shape, masked whole (the URL, assignment and bearer shapes keep a part:
see ``KEPT``)."""

KEPT = {
    "dsn amqp://guest:gu3st-pw@mq:5672/": f"dsn amqp://guest:{MASK}@mq:5672/",
    "password: 'correct-horse-battery'": f"password: '{MASK}'",
    "DB_PASSWORD=hunter2hunter2; next": f"DB_PASSWORD={MASK} next",
    "Authorization: Bearer abcdefghijklmnop1234==": f"Authorization: Bearer {MASK}",
    "see https://example.com:8080/path": "see https://example.com:8080/path",
    "auth: short": "auth: short",
    "token: bearer-is-not-a-value": "token: bearer-is-not-a-value",
    "db password is hunter2-db-pass!": f"db password is {MASK}!",
    "hunter2-db-pas": "hunter2-db-pas",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_engine_masks_every_shape_whole(engine: str, name: str) -> None:
    text = f"before {SHAPES[name]} after"
    assert on(engine).text(text) == f"before {MASK} after"


@pytest.mark.parametrize("text", sorted(KEPT))
def test_each_engine_keeps_what_the_shapes_keep(engine: str, text: str) -> None:
    assert on(engine, ["hunter2-db-pass"]).text(text) == KEPT[text]


UNICODE = [
    # Python's caseless matching equates these with ASCII letters: so must the locator.
    ("pa\u017fsword=abcdefgh", f"pa\u017fsword={MASK}"),  # long s
    ("api_\u212aey: 'zzzzzzzz'", f"api_\u212aey: '{MASK}'"),  # Kelvin sign
    ("ap\u0130_key=\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9", f"ap\u0130_key={MASK}"),  # dotted I
    ("ap\u0131-key=abcdefgh", f"ap\u0131-key={MASK}"),  # dotless i
    # A match never starts on a character outside the rules' first characters.
    ("\u017fecret=abcdefgh", "\u017fecret=abcdefgh"),
    ("\u212apassword=abcdefgh", f"\u212apassword={MASK}"),  # K is not [A-Za-z0-9]
    ("password:\u00a0hunter22", f"password:\u00a0{MASK}"),  # NBSP is \s in Python
    ("password:\u3000hunter22", f"password:\u3000{MASK}"),  # so is the ideographic space
    ("token\x1c=\x1chunter22", f"token\x1c=\x1c{MASK}"),  # and the ASCII separators
    ("bearer\u2003abcdefghijklmnopqrst", f"bearer\u2003{MASK}"),
    ("\u00e9sk-" + "a1B2c3D4" * 3, "\u00e9sk-" + "a1B2c3D4" * 3),  # no \b after a letter
    ("\u00e9 sk-" + "a1B2c3D4" * 3, f"\u00e9 {MASK}"),
    ("😀sk-ant-" + "b" * 12 + "😀", f"😀{MASK}😀"),
    ("\ud800ghp_" + "A1b2C3d4E5" * 3 + "\udfff", f"\ud800{MASK}\udfff"),  # lone surrogates
    ("über-geheim-wert-42 ist es", f"{MASK} ist es"),  # a non-ASCII configured value
]


@pytest.mark.parametrize(("text", "want"), UNICODE)
def test_each_engine_reads_unicode_like_python(engine: str, text: str, want: str) -> None:
    assert on(engine, ["über-geheim-wert-42"]).text(text) == want


def prose(size: int) -> str:
    words = ("the build runs the unit tests first and then the integration suite against a "
             "local server; configure it in the environment, never in the file. ").split(" ")
    rng = random.Random(size)
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def test_each_engine_masks_secrets_at_both_ends_of_a_large_clean_text(engine: str) -> None:
    clean = prose(2_000_000)
    r = on(engine, ["hunter2-db-pass"])
    assert r.text(clean) == clean
    first, last = SHAPES["anthropic"], "hunter2-db-pass"
    text = first + " " + clean + " " + last
    assert r.text(text) == f"{MASK} {clean} {MASK}"
    text = SHAPES["openssh key"] + "\n" + clean + "\n" + SHAPES["jwt"]
    assert r.text(text) == f"{MASK}\n{clean}\n{MASK}"


def test_the_default_redactor_uses_hyperscan_when_installed() -> None:
    r = Redactor()
    assert r.engine == ("re" if load_hyperscan() is None else "hyperscan")
    assert Redactor(engine="re").engine == "re"
    with pytest.raises(ValueError, match="engine"):
        Redactor(engine="pcre")  # type: ignore[arg-type]


def test_without_hyperscan_the_re_engine_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact_scan, "load_hyperscan", lambda: None)
    monkeypatch.setattr(redact, "_SCANNERS", {})
    r = Redactor(["hunter2-db-pass"])
    assert r.engine == "re"
    assert r.text("x hunter2-db-pass y") == f"x {MASK} y"
    with pytest.raises(RuntimeError, match="hyperscan"):
        Redactor(engine="hyperscan")


def test_a_rule_without_locators_or_a_locator_that_fails_means_re(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert redact_scan.build([redact_scan.Locator("(unclosed", 1)]) is None
    monkeypatch.setattr(redact, "_SCANNERS", {})
    rules = tuple(replace(r, locate=()) if r.name == "jwt" else r for r in redact.RULES)
    monkeypatch.setattr(redact, "RULES", rules)
    assert Redactor().engine == "re"


def test_every_rule_has_locators_and_an_opening() -> None:
    for rule in secret_rules.RULES:
        assert rule.opening and rule.locate, rule.name
        assert [loc.head for loc in rule.locate] == [False, True], rule.name


def test_the_image_folds_exactly_what_python_folds() -> None:
    """The non-ASCII characters Python's caseless ``re`` matches with an ASCII letter are
    the ones the image folds (so the hyperscan side sees every caseless keyword)."""
    caseless_letter = re.compile("(?i)[a-z]")
    found = {chr(c) for c in range(0x80, 0x110000) if caseless_letter.fullmatch(chr(c))}
    assert found == set(redact_scan.FOLDS)
    for ch, byte in redact_scan.FOLDS.items():
        assert redact_scan.image_char(ch) == bytes([byte])
        (letter,) = [x for x in "abcdefghijklmnopqrstuvwxyz" if re.fullmatch(f"(?i){x}", ch)]
        assert re.fullmatch(redact_scan.caseless(letter).encode(), bytes([byte]))


def test_the_image_has_one_byte_per_character_and_its_space_class_covers_python() -> None:
    text = "a\u00e9\u0100\u017f\u212a\u0130\u0131😀\ud800\n"
    assert len(redact_scan.image(text)) == len(text) + 1
    space = re.compile(redact_scan.SPACE.encode())
    for c in range(0x110000):
        ch = chr(c)
        if re.fullmatch(r"\s", ch):
            assert space.fullmatch(redact_scan.image_char(ch)), hex(c)


def test_threads_share_a_redactor() -> None:
    r = Redactor(["hunter2-db-pass"])
    text = prose(300_000) + " hunter2-db-pass " + SHAPES["aws"] + " " + prose(300_000)
    want = r.text(text)
    assert want.count(MASK) == 2
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda _: r.text(text), range(16))) == [want] * 16
