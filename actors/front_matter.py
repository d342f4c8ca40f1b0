"""Markdown files with YAML front matter (TTSR rules, skills). Pure.

``---``, the YAML, ``---``, then the body. :func:`read_front_matter` decodes the YAML into
a msgspec Struct and raises ValueError naming what is wrong.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

T = TypeVar("T")


def split_front_matter(text: str) -> tuple[str, str] | None:
    """Return (yaml, body) for ``---\\nyaml\\n---\\nbody``, or None without front matter."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None


def read_front_matter(text: str, kind: type[T]) -> tuple[T, str]:
    """The front matter decoded as ``kind`` (its defaults when empty) and the body; raise
    ValueError when there is none or it does not decode."""
    parts = split_front_matter(text)
    if parts is None:
        raise ValueError("no YAML front matter (a '---' line, the YAML, a '---' line)")
    yaml_text, body = parts
    try:
        meta = msgspec.yaml.decode(yaml_text.encode(), type=kind) if yaml_text.strip() \
            else kind()
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"bad front matter: {exc}") from exc
    return meta, body
