"""Path globs for policies and protected-file lists.

``*`` matches within one path segment, ``?`` one character of a segment, ``[...]`` a
character class, and ``**`` any number of whole segments (``a/**`` matches ``a`` itself and
everything below it; ``**/x`` matches ``x`` at any depth). Matching is on ``/``-separated
workspace-relative paths; the caller chooses case sensitivity.
"""

from __future__ import annotations

import functools
import re

GLOB_CHARS = frozenset("*?[")


def has_glob(text: str) -> bool:
    """True when ``text`` contains a glob metacharacter (``*``, ``?`` or ``[``)."""
    return any(ch in GLOB_CHARS for ch in text)


@functools.lru_cache(maxsize=4096)
def glob_regex(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """Compile ``pattern`` (syntax in the module docstring) to an anchored regex."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            # a "]" right after "[" (or "[!") is a member of the class, not its end
            first = i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1
            end = pattern.find("]", first + 1)
            if end < 0:
                out.append(re.escape(ch))
                i += 1
                continue
            body = pattern[first:end]
            members = re.sub(r"([\\\[\]^])", r"\\\1", body)
            out.append(("[^" if first == i + 2 else "[") + members + "]")
            i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    flags = re.IGNORECASE if ignore_case else 0
    try:
        return re.compile("".join(out), flags | re.DOTALL)
    except re.error:  # never raise on what a command wrote: match it literally
        return re.compile(re.escape(pattern), flags | re.DOTALL)


def glob_match(pattern: str, path: str, ignore_case: bool = False) -> bool:
    """True when the whole ``path`` matches ``pattern``."""
    return glob_regex(pattern, ignore_case).fullmatch(path) is not None


def literal_prefix(pattern: str) -> str:
    """The directory part of ``pattern`` before its first glob character ("" if none)."""
    cut = len(pattern)
    for idx, ch in enumerate(pattern):
        if ch in GLOB_CHARS:
            cut = idx
            break
    if cut == len(pattern):
        return pattern
    head = pattern[:cut]
    return head[: head.rfind("/") + 1] if "/" in head else ""


def expand_braces(word: str, limit: int = 256) -> list[str]:
    """Bash-style brace expansion of ``word`` (``a{b,c}`` -> ``ab``, ``ac``), nested braces
    included; at most ``limit`` results (the rest are dropped). Words without a comma group
    come back unchanged."""
    depth = 0
    start = -1
    for idx, ch in enumerate(word):
        if ch == "{":
            if depth == 0:
                start = idx
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                body = word[start + 1 : idx]
                parts = _split_top(body)
                if len(parts) < 2:
                    continue
                results: list[str] = []
                for part in parts:
                    for tail in expand_braces(part + word[idx + 1 :], limit):
                        results.append(word[:start] + tail)
                        if len(results) >= limit:
                            return results
                return results
    return [word]


def _split_top(body: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts
