"""The HTTP connector's bearer token: one per state directory, owner-only.

:func:`load_token` makes it on first use (``<state_dir>/http-token``, mode 0600, 32 random
bytes in URL-safe base64) and reads it after; :func:`rotate_token` replaces it (the old one
stops working at the next start of ``tether serve``). ``tether token`` shows it.
"""

from __future__ import annotations

import os
import secrets

from tether.adapters.private_file import ExposedFile, read_private, write_private

TOKEN_FILE = "http-token"


class TokenError(Exception):
    """The token file cannot be used (unreadable, or readable by others)."""


def token_path(state_dir: str) -> str:
    """Where the state directory keeps the token."""
    return os.path.join(state_dir, TOKEN_FILE)


def load_token(state_dir: str) -> str:
    """The token, made now if there is none. Raises :class:`TokenError` when the file is
    readable by anyone but its owner, or empty."""
    path = token_path(state_dir)
    try:
        text = read_private(path, "`tether token --rotate` to make a new one")
    except ExposedFile as exc:
        raise TokenError(str(exc)) from None
    if text is None:
        try:
            return _write(path, exclusive=True)
        except FileExistsError:  # another process made it meanwhile
            return load_token(state_dir)
    token = text.strip()
    if not token:
        raise TokenError(f"{path} is empty: run `tether token --rotate`")
    return token


def rotate_token(state_dir: str) -> str:
    """A new token in place of the old one."""
    return _write(token_path(state_dir), exclusive=False)


def _write(path: str, *, exclusive: bool) -> str:
    token = secrets.token_urlsafe(32)
    write_private(path, token + "\n", exclusive=exclusive)
    return token
