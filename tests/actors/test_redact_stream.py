"""The streaming redactor: secrets split across deltas never reach the output.

The key property: for any split of a text into deltas, the joined stream output equals the
whole-text redaction (and so never contains a secret), while plain text is held back only as
long as it could still be the start of a secret.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from tether.actors.model.redact import MASK, Redactor, StreamRedactor, _Located
from tether.actors.model.redact_scan import load_hyperscan
from tether.actors.model.secret_rules import CAP

CONFIGURED = ["configured-secret-value-42", "nats-Pa55word!", "db-pass-0000"]

PEM_BODY = "MIIEowIBAAKCAQEA7bq98Xw1" * 4
CORPUS: list[tuple[str, str]] = [
    # (text containing a secret, the secret part that must never be emitted)
    ("sk-ant-api03-" + "AbC_d-9" * 12, "AbC_d-9AbC_d-9"),
    ("sk-" + "a1B2c3D4" * 6, "a1B2c3D4a1B2c3D4"),
    ("sk-proj-" + "Xy_9-Zq8" * 18, "Xy_9-Zq8Xy_9-Zq8"),
    ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("ghp_" + "A1b2C3d4E5" * 4, "A1b2C3d4E5A1b2C3d4E5"),
    ("github_pat_11ABCDEFG0" + "abc_DEF_12" * 8, "abc_DEF_12abc_DEF_12"),
    ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOpQrStUvWx"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\n" + PEM_BODY + "\n-----END RSA PRIVATE KEY-----",
        PEM_BODY,
    ),
    ("postgres://app:s3cr3t-P4ss@db.internal:5432/app", "s3cr3t-P4ss"),
    ("redis://:r3dis-pw-77@cache:6379/0", "r3dis-pw-77"),
    ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    ('{"api_key": "abcd1234efgh"}', "abcd1234efgh"),
    ("token: 'tok-val-123456'", "tok-val-123456"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
    ("connect with configured-secret-value-42 now", "configured-secret-value-42"),
    ("nats login nats-Pa55word!", "nats-Pa55word!"),
    ("the db-pass-0000 is here", "db-pass-0000"),
]

PROSE = (
    "Here is the plan: read the file, then run the tests. The quick brown fox jumps over "
    "the lazy dog; nothing here looks like a credential at all, so it streams through. "
)


def run(stream: StreamRedactor, deltas: Iterable[str]) -> tuple[str, int]:
    """The joined output of a stream and the largest hold-back seen after any delta."""
    out, held = [], 0
    for d in deltas:
        out.append(stream.feed(d))
        held = max(held, stream.held)
    out.append(stream.flush())
    return "".join(out), held


def random_split(text: str, rng: random.Random, max_len: int = 12) -> list[str]:
    parts, i = [], 0
    while i < len(text):
        n = rng.randint(1, max_len)
        parts.append(text[i : i + n])
        i += n
    return parts




@pytest.fixture
def redactor(engine: str) -> Redactor:
    """The configured redactor on each engine; hyperscan on every buffer, however short."""
    return Redactor(CONFIGURED, engine=engine, hs_min=0)


@pytest.mark.parametrize(("secret_text", "secret"), CORPUS)
def test_secret_split_at_every_position_is_masked(
    redactor: Redactor, secret_text: str, secret: str
) -> None:
    text = f"before: {secret_text}\nafter it, more words."
    whole = redactor.text(text)
    assert secret not in whole and MASK in whole
    for i in range(len(text) + 1):
        out, _ = run(redactor.stream(), [text[:i], text[i:]])
        assert out == whole, i
    out, _ = run(redactor.stream(), list(text))  # one character per delta
    assert out == whole


@pytest.mark.parametrize(("secret_text", "secret"), CORPUS)
def test_no_emitted_prefix_reveals_the_secret(
    redactor: Redactor, secret_text: str, secret: str
) -> None:
    """Even mid-stream (before flush) no part of the secret that long has been emitted."""
    text = f"x {secret_text} y"
    stream, emitted = redactor.stream(), ""
    for ch in text:
        emitted += stream.feed(ch)
        assert secret[:8] not in emitted
    assert secret not in emitted + stream.flush()


def test_random_splits_of_a_mixed_document_equal_whole_text(redactor: Redactor) -> None:
    rng = random.Random(1234)
    doc = PROSE + "".join(f"{s}\n{PROSE}" for s, _ in CORPUS)
    whole = redactor.text(doc)
    for _, secret in CORPUS:
        assert secret not in whole
    for _ in range(200):
        out, _ = run(redactor.stream(), random_split(doc, rng, rng.choice([1, 3, 7, 40, 500])))
        assert out == whole


FRAGMENTS = [
    "sk-ant-",
    "sk-",
    "proj-",
    "AKIA",
    "ASIA",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "Bearer ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "-----",
    "://",
    "u:",
    "@",
    "password",
    "api_key",
    "token",
    "auth",
    "=",
    ": ",
    " ",
    "\n",
    "'",
    '"',
    "x",
    "A1",
    "0123456789",
    "abcdefghij",
    "_",
    "-",
    "/",
    "configured-",
    "configured-secret-value-42",
    "db-pass-0000",
    "db-pass",
    "nats-Pa55",
]


def test_fuzzed_fragment_soup_is_split_invariant(redactor: Redactor) -> None:
    """Random texts dense in near-misses: every split gives the whole-text answer."""
    rng = random.Random(99)
    for _ in range(400):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 30)))
        whole = redactor.text(text)
        for _ in range(8):
            out, _ = run(redactor.stream(), random_split(text, rng, rng.choice([1, 2, 5, 9])))
            assert out == whole, (text, out, whole)


def test_ordinary_prose_streams_through_at_once(redactor: Redactor) -> None:
    stream = redactor.stream()
    for word in PROSE.split(" ")[:-1]:
        assert stream.feed(word + " ") == word + " "
        assert stream.held == 0
    assert stream.flush() == ""


def test_only_a_possible_secret_prefix_is_held(redactor: Redactor) -> None:
    stream = redactor.stream()
    assert stream.feed("use the db-pa") == "use the "  # could be the configured db-pass-0000
    assert stream.held == len("db-pa")
    assert stream.feed("d is fine") == "db-pad is fine"
    assert stream.feed(" tok") == " "  # could become "token: ..."
    assert stream.feed("yo") == "tokyo"
    assert stream.feed(" sk-ant-api03-abcdefgh") == " "
    assert stream.feed("ijklmn and more") == f"{MASK} and more"
    assert stream.flush() == ""


def test_flush_masks_an_unfinished_secret_and_resets(redactor: Redactor) -> None:
    stream = redactor.stream()
    assert stream.feed("key -----BEGIN OPENSSH PRIVATE KEY-----\nabc") == "key "
    assert stream.flush() == MASK
    assert stream.feed("fresh start") == "fresh start"


def test_url_password_is_masked_but_the_rest_of_the_url_kept() -> None:
    r = Redactor()
    assert r.text("dsn amqp://guest:gu3st-pw@mq:5672/") == f"dsn amqp://guest:{MASK}@mq:5672/"
    assert r.text("see https://example.com:8080/path") == "see https://example.com:8080/path"


def test_a_private_key_longer_than_the_cap_is_masked_wholesale() -> None:
    r = Redactor()
    body = ("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" * 700)[: CAP * 3]
    text = f"key:\n-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\nafter"
    whole = r.text(text)
    assert whole == f"key:\n{MASK}\nafter"
    out, held = run(r.stream(), random_split(text, random.Random(5), 300))
    assert out == whole and held <= CAP


def test_a_token_longer_than_the_cap_is_masked_wholesale() -> None:
    r = Redactor()
    text = "x sk-ant-" + "a" * (CAP * 2 + 17) + " done"
    assert r.text(text) == f"x {MASK} done"
    out, held = run(r.stream(), random_split(text, random.Random(6), 64))
    assert out == f"x {MASK} done" and held <= CAP


def test_megabyte_in_five_char_deltas_keeps_hold_back_bounded(redactor: Redactor) -> None:
    rng = random.Random(7)
    chunks: list[str] = []
    size = 0
    while size < 1_000_000:
        piece = PROSE if rng.random() < 0.8 else rng.choice(CORPUS)[0] + " "
        if rng.random() < 0.002:  # an unterminated private key: held until the cap, then masked
            piece = "-----BEGIN EC PRIVATE KEY-----\n" + "Zm9vYmFy" * 1500 + "\n"
        chunks.append(piece)
        size += len(piece)
    text = "".join(chunks)
    stream = redactor.stream()
    out: list[str] = []
    max_held = 0
    for i in range(0, len(text), 5):
        out.append(stream.feed(text[i : i + 5]))
        max_held = max(max_held, stream.held)
    out.append(stream.flush())
    joined = "".join(out)
    assert max_held <= CAP
    assert joined == redactor.text(text)
    for _, secret in CORPUS:
        assert secret not in joined


def test_whole_text_agrees_with_the_original_shapes() -> None:
    r = Redactor()
    assert r.text("password: 'correct-horse-battery'") == f"password: '{MASK}'"
    assert r.text("ANTHROPIC_API_KEY=sk-ant-x") == f"ANTHROPIC_API_KEY={MASK}"
    assert r.text("auth: short") == "auth: short"  # values under six characters stay
    assert r.text("a task-manager-for-everyone-here") == "a task-manager-for-everyone-here"


# --- the engines agree delta by delta -------------------------------------------------------

REFERENCE = Redactor(CONFIGURED, engine="re", memo=0)
"""The re engine without the step memo: what every other configuration must reproduce."""

EXTRA = [
    "pa\u017fsword=", "api_\u212aey: ", "\u0130", "\u0131", "\u00e9", "\u00a0", "\x1c", "\u2003",
    "\U0001f600", "\ud800", "Bearer\u2003", "=", "eyJ", "AKIA", "-----BEGIN ", "PRIVATE KEY-----",
    "glpat-", "xoxb-", "12345678901234567890", "abcdefghijklmnop", "nats-Pa55word!",
]


def steps(r: Redactor, deltas: Iterable[str]) -> list[tuple[str, int]]:
    """What each ``feed`` returned and how much it then held, then what ``flush`` returned."""
    stream = r.stream()
    out = [(stream.feed(d), stream.held) for d in deltas]
    out.append((stream.flush(), stream.held))
    return out


def test_engines_and_the_memo_agree_on_every_step(redactor: Redactor) -> None:
    rng = random.Random(2024)
    memo_off = Redactor(CONFIGURED, engine=redactor.engine, hs_min=0, memo=0)
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS + EXTRA) for _ in range(rng.randint(1, 30)))
        for _ in range(3):
            deltas = random_split(text, rng, rng.choice([1, 2, 5, 9, 40]))
            want = steps(REFERENCE, deltas)
            assert steps(redactor, deltas) == want, (text, deltas)
            assert steps(memo_off, deltas) == want, (text, deltas)
        assert redactor.text(text) == REFERENCE.text(text)


@pytest.mark.parametrize(("secret_text", "secret"), CORPUS[:: 3])
def test_random_chunkings_of_a_secret_agree_with_the_re_engine(
    redactor: Redactor, secret_text: str, secret: str
) -> None:
    text = f"{PROSE}{secret_text}\n{PROSE}{secret_text}"
    whole = REFERENCE.text(text)
    assert secret not in whole and redactor.text(text) == whole
    rng = random.Random(len(text))
    for _ in range(60):
        deltas = random_split(text, rng, rng.choice([1, 3, 7, 16, 17, 64, 300]))
        assert steps(redactor, deltas) == steps(REFERENCE, deltas)


def test_a_large_clean_stream_with_secrets_at_both_ends(redactor: Redactor) -> None:
    first, last = CORPUS[0][0], CORPUS[7][0]  # an Anthropic key, a private key block
    clean = (PROSE * 2000)[:-1]
    text = f"{first} {clean}\n{last}"
    whole = redactor.text(text)
    assert whole == f"{MASK} {clean}\n{MASK}" == REFERENCE.text(text)
    rng = random.Random(11)
    for size in (5, 64, 4096, 100_000):
        out, held = run(redactor.stream(), random_split(text, rng, size))
        assert out == whole and held <= CAP


@pytest.mark.skipif(load_hyperscan() is None, reason="hyperscan is not installed")
def test_the_locator_answers_like_re_at_every_position() -> None:
    """Where the next match starts and from where a match could still be forming, from every
    position, with every kind of character before the buffer."""
    secrets = [*CONFIGURED, "long-" + "Zq9" * 30]  # a value too long for the could pattern
    on_hs = Redactor(secrets, engine="hyperscan", hs_min=0)
    on_re = Redactor(secrets, engine="re")
    rng = random.Random(77)
    pieces = FRAGMENTS + EXTRA + [s for s, _ in CORPUS] + ["long-", "Zq9" * 12]
    for _ in range(120):
        ctx = rng.choice(["", " ", "a", "_", "\u00e9"])
        work = ctx + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 20)))
        end = len(work)
        matches, holds = _Located(on_hs, work, heads=True), _Located(on_hs, work, heads=True)
        stream = StreamRedactor(on_re)
        for q in range(len(ctx), end):
            want = on_re._full.search(work, q, end)
            got = matches.search(work, q, end)
            assert (got is None) == (want is None), (work, q)
            if got is not None and want is not None:
                assert (got.start(got.lastgroup), got.end(), got.lastgroup, got.groupdict()) == (
                    want.start(), want.end(), want.lastgroup, want.groupdict()), (work, q)
            assert holds.could_start(work, q, end) == stream._could_start(work, q, end), (work, q)
