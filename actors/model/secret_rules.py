"""The credential shapes the redactor masks whatever their value, in priority order.

Each :class:`Rule` gives its match pattern, what could still be forming at a buffer's end,
the continuation of a match stopped at :data:`CAP`, and its opening and locators (built
with :mod:`actors.model.secret_patterns`). :data:`RULES` is the table :mod:`actors.model.redact`
scans with. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tether.actors.model.redact_scan import Locator
from tether.actors.model.secret_patterns import (
    Piece,
    alt,
    charset,
    full,
    lit,
    prefix_seq,
    shape,
)

CAP = 8192
"""The most characters a stream holds back (unless a configured secret is longer: then that
length). No rule reads further than this from where its match starts; a longer credential is
masked wholesale as soon as the cap is reached and the remainder is masked as it arrives."""

_RUN = CAP - 320
"""The longest run of body characters a rule matches in one piece (the rest of CAP covers the
rule's head and tail, e.g. ``://user:`` or the private key's END line)."""


@dataclass(frozen=True)
class Rule:
    """One credential shape.

    ``pattern`` is the match (it may define ``<name>_pre`` and ``<name>_post`` groups, kept
    around the mask, and ``<name>_cap``, set when the match stopped at the cap). ``could``
    matches every text (from the match start to the end of the buffer) on which matching might
    still read past the buffer's end. ``cont``/``cont_could`` are the same for the remainder of
    a capped match, which is swallowed. ``opening`` and ``locate`` come from :func:`shape`
    (a rule without locators makes the redactor use ``re`` alone).
    """

    name: str
    first: str  # every character a match can start with
    pattern: str
    could: str
    cont: str | None = None
    cont_could: str | None = None
    lead: str = ""  # what every match starts with, more precisely than ``first`` (a regex)
    opening: str = ""  # a necessary condition where ``could`` matches (a regex)
    locate: tuple[Locator, ...] = ()


def _shaped(
    rule: Rule, start: str, could: Sequence[Piece], locate: Sequence[Piece]
) -> Rule:
    """``rule`` with the opening and locators :func:`shape` gives."""
    opening, locators = shape(start, could, locate)
    return replace(rule, opening=opening, locate=locators)


def _token(
    name: str, start: str, head: Sequence[Piece], cls: str, lo: int, end: str = ""
) -> Rule:
    """A literal-ish head then a run of ``cls`` (at least ``lo``), optionally ``end``."""
    head_re = "".join(full(p) for p in head)
    lead = re.escape(head[0][1]) if head[0][0] == "lit" and not head[0][2] else ""
    return Rule(
        name,
        head[0][1][0],
        f"{start}{head_re}(?:{cls}{{{_RUN}}}(?P<{name}_cap>)|{cls}{{{lo},{_RUN - 1}}}{end})",
        start + prefix_seq([*head, charset(cls, 0, _RUN)]),
        f"(?:{cls}{{{_RUN}}}(?P<{name}_cap>)|{cls}{{0,{_RUN - 1}}})",
        f"{cls}{{0,{_RUN}}}",
        lead,
        *shape(start, [*head, charset(cls, 0, _RUN)], [*head, charset(cls, lo, lo)]),
    )


_KEY = "[A-Za-z0-9_\\-]"
_ALNUM = "[A-Za-z0-9]"
# PEM blocks (RSA, EC, OPENSSH, ENCRYPTED...) and PGP's "PRIVATE KEY BLOCK".
_PK_BEGIN = [lit("-----BEGIN "), charset("[A-Z ]", 0, 40), lit("PRIVATE KEY"),
             charset("[A-Z ]", 0, 8), lit("-----")]
_PK_END = "-----END [A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,8}-----"
_PK_BODY = (
    f"(?:(?s:.){{0,{_RUN}}}?{_PK_END}|(?s:.){{0,{_RUN}}}\\Z|(?s:.){{{_RUN}}}(?P<private_key_cap>))"
)
_PK_BODY_COULD = f"(?:(?!{_PK_END})(?s:.)){{0,{_RUN + 80}}}"
_PW_KEYWORDS = [
    [lit("api", True), charset("[_\\-]", 0, 1), lit("key", True)],
    [lit("secret", True)],
    [lit("token", True)],
    [lit("passw", True), charset("(?i:[or])", 0, 2), lit("d", True)],
    [lit("pwd", True)],
    [lit("auth", True)],
]
_PW_HEAD = [
    alt(*_PW_KEYWORDS),
    charset("[A-Za-z_]", 0, 40),
    charset("['\"]", 0, 1),
    charset("\\s", 0, 8),
    charset("[:=]", 1, 1),
    charset("\\s", 0, 8),
    charset("['\"]", 0, 1),
]
_PW_VALUE = "[^\\s'\"]"
_B64URL = "[A-Za-z0-9_\\-]"
_JWT = [lit("eyJ"), charset(_B64URL, 10, 1000), lit(".eyJ"), charset(_B64URL, 10, 1000), lit("."),
        charset(_B64URL, 10, 2000)]
"""A JSON web token: header, claims and signature, base64url (both JSON parts open with
``eyJ``, the encoding of ``{"``)."""
_URL_HEAD = [lit("://"), charset("[^\\s:/@]", 0, 256), lit(":")]
_BEARER_CLS = "[A-Za-z0-9._~+/\\-]"
_BEARER = [lit("bearer", True), charset("\\s", 1, 8), charset(_BEARER_CLS, 0, _RUN),
           charset("=", 0, 2)]
_AWS = [alt([lit("AKIA")], [lit("ASIA")]), charset("[0-9A-Z]", 16, 16)]

RULES: tuple[Rule, ...] = (
    _token("anthropic", "", [lit("sk-ant-")], _KEY, 10),
    _token(
        "openai_project",
        "\\b",
        [lit("sk-"), alt([lit("proj")], [lit("svcacct")], [lit("admin")]), lit("-")],
        _KEY,
        20,
    ),
    _token("openai", "\\b", [lit("sk-")], _ALNUM, 20, "\\b"),
    _shaped(
        Rule("aws", "A", "\\b(?:AKIA|ASIA)[0-9A-Z]{16}\\b", "\\b" + prefix_seq(_AWS)),
        "\\b", _AWS, _AWS,
    ),
    _token("github", "\\b", [lit("gh"), charset("[pousr]", 1, 1), lit("_")], _ALNUM, 30, "\\b"),
    _token("github_pat", "\\b", [lit("github_pat_")], "[A-Za-z0-9_]", 20),
    _token(
        "slack",
        "\\b",
        [lit("xox"), charset("[abeoprs]", 1, 1), lit("-")],
        "[A-Za-z0-9\\-]",
        10,
        "\\b",
    ),
    # Shapes from gitleaks' published rules (stripe, gcp-api-key, gitlab-pat, npm-access-
    # token, slack-app-token, jwt).
    _token("stripe", "\\b",
           [lit("sk_"), alt([lit("live")], [lit("test")]), lit("_")], _ALNUM, 10, "\\b"),
    _token("stripe_restricted", "\\b",
           [lit("rk_"), alt([lit("live")], [lit("test")]), lit("_")], _ALNUM, 10, "\\b"),
    _token("google_api", "\\b", [lit("AIza")], _KEY, 35),
    _token("gitlab", "\\b", [lit("gl"), charset("[a-z]", 2, 4), lit("-")], _KEY, 20),
    _token("npm", "\\b", [lit("npm_")], _ALNUM, 36, "\\b"),
    _token("huggingface", "\\b", [lit("hf_")], "[A-Za-z]", 34, "\\b"),
    _token("sendgrid", "\\b", [lit("SG.")], "[A-Za-z0-9=_\\-.]", 66),
    _token("slack_app", "\\b", [lit("xapp-")], "[A-Za-z0-9\\-]", 10, "\\b"),
    _shaped(
        Rule("jwt", "e", "\\b" + "".join(full(p) for p in _JWT), "\\b" + prefix_seq(_JWT),
              lead="eyJ"),
        "\\b", _JWT, [_JWT[0], charset(_B64URL, 10, 10)],
    ),
    _shaped(
        Rule(
            "private_key",
            "-",
            "".join(full(p) for p in _PK_BEGIN) + _PK_BODY,
            f"(?:{prefix_seq(_PK_BEGIN)}|{''.join(full(p) for p in _PK_BEGIN)}"
            f"{_PK_BODY_COULD})",
            _PK_BODY,
            _PK_BODY_COULD,
        ),
        "", _PK_BEGIN, _PK_BEGIN,
    ),
    _shaped(
        Rule(
            "url_password",
            ":",
            f"(?P<url_password_pre>{''.join(full(p) for p in _URL_HEAD)})"
            f"[^\\s/@]{{1,{_RUN}}}(?P<url_password_post>@)",
            prefix_seq([*_URL_HEAD, charset("[^\\s/@]", 0, _RUN), lit("@")]),
        ),
        # Located by "://" alone: a window spanning the host would make every URL with a
        # port cost a walk over the text before it.
        "", [*_URL_HEAD, charset("[^\\s/@]", 0, _RUN), lit("@")], [lit("://")],
    ),
    _shaped(
        Rule(
            "assignment",
            "aAsStTpP",
            "(?<![A-Za-z0-9])(?P<assignment_pre>"
            + "".join(full(p) for p in _PW_HEAD[:-1])
            + "(?P<assignment_q>['\"]?))(?!(?i:bearer|basic)\\b)"
            + f"(?:{_PW_VALUE}{{{_RUN}}}(?P<assignment_cap>)"
            + f"|{_PW_VALUE}{{6,{_RUN - 1}}}(?P<assignment_post>(?P=assignment_q)))",
            "(?<![A-Za-z0-9])"
            + prefix_seq([*_PW_HEAD, charset(_PW_VALUE, 0, _RUN), charset("['\"]", 0, 1)]),
            f"(?:{_PW_VALUE}{{{_RUN}}}(?P<assignment_cap>)|{_PW_VALUE}{{0,{_RUN - 1}}})",
            f"{_PW_VALUE}{{0,{_RUN}}}",
        ),
        "(?<![A-Za-z0-9])",
        [*_PW_HEAD, charset(_PW_VALUE, 0, _RUN), charset("['\"]", 0, 1)],
        [*_PW_HEAD, charset(_PW_VALUE, 6, 6)],
    ),
    _shaped(
        Rule(
            "bearer",
            "bB",
            f"(?P<bearer_pre>\\b(?i:bearer)\\s{{1,8}})"
            f"(?:{_BEARER_CLS}{{{_RUN}}}(?P<bearer_cap>)|{_BEARER_CLS}{{16,{_RUN - 1}}}={{0,2}})",
            "\\b" + prefix_seq(_BEARER),
            f"(?:{_BEARER_CLS}{{{_RUN}}}(?P<bearer_cap>)|{_BEARER_CLS}{{0,{_RUN - 1}}})",
            f"{_BEARER_CLS}{{0,{_RUN}}}",
        ),
        "\\b", _BEARER, [*_BEARER[:2], charset(_BEARER_CLS, 16, 16)],
    ),
)
"""Text that looks like a credential whatever its value, in priority order."""

PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(r.pattern) for r in RULES)
"""Each rule's pattern on its own (for inspection; the scanner uses them combined)."""
