"""Session names made from the first prompt: the first three meaningful words (not stop
words, at least two characters long: seed 002)."""

from __future__ import annotations

import re
from collections.abc import Container

STOP_WORDS = frozenset(
    """a an and are as at be by can could do for from have how i in is it me my of on or
    please show tell that the this to us we what with would you your""".split()
)


def name_from_prompt(prompt: str, taken: Container[str]) -> str:
    """A short slug such as ``fix-login-bug``, suffixed ``-2``, ``-3``... if taken."""
    words = [w for w in re.findall(r"[a-z0-9]+", prompt.lower())
             if len(w) >= 2 and w not in STOP_WORDS]
    base = "-".join(words[:3]) or "session"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name
