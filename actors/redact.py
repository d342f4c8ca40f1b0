"""The redactor: secrets never reach the event log or a channel (DESIGN rule 7).

Pure. It replaces known secret values (the API key, database and NATS passwords handed in
from the settings) and text that looks like a credential (API keys, private-key blocks,
``password=...`` assignments) with ``[REDACTED]``. The session applies it to tool output
before storing it and to the model's text before publishing or storing it. A secret split
across two stream deltas is caught when the message is stored, not in the live stream.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"

PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{10,}"),
    re.compile(r"\bsk-[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
        re.DOTALL,
    ),
    re.compile(
        r"(?i)\b((?:api[_-]?key|secret|token|passw(?:or)?d|auth)[A-Za-z_]*\s*[:=]\s*)"
        r"(['\"]?)[^\s'\"]{6,}\2"
    ),
)
"""Text that looks like a credential whatever its value."""

MIN_SECRET = 6
"""Known secrets shorter than this are not masked (they would mask ordinary words)."""


class Redactor:
    """Masks known secrets and credential-looking text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self._known = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def text(self, value: str) -> str:
        """``value`` with every secret masked."""
        if self._known is not None:
            value = self._known.sub(MASK, value)
        for pattern in PATTERNS:
            if pattern.groups >= 2:
                value = pattern.sub(lambda m: m.group(1) + m.group(2) + MASK + m.group(2), value)
            else:
                value = pattern.sub(MASK, value)
        return value

    def value(self, data: Any) -> Any:
        """A JSON-like value (dicts, lists, strings) with every string masked."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {k: self.value(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.value(v) for v in data]
        return data
