"""The HTTP connector's bearer token: one per state directory, owner-only.

:func:`load_token` makes it on first use (``<state_dir>/http-token``, mode 0600, 32 random
bytes in URL-safe base64) and reads it after; :func:`rotate_token` replaces it (the old one
stops working at the next start of ``tether serve``). ``tether token`` shows it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

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
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return _write(path, exclusive=True)
        except FileExistsError:  # another process made it meanwhile
            return load_token(state_dir)
    with os.fdopen(fd, encoding="ascii") as handle:
        if stat.S_IMODE(os.fstat(handle.fileno()).st_mode) & 0o077:
            raise TokenError(f"{path} can be read by others: run `chmod 600 {path}`, or "
                             f"`tether token --rotate` to make a new one")
        token = handle.read().strip()
    if not token:
        raise TokenError(f"{path} is empty: run `tether token --rotate`")
    return token


def rotate_token(state_dir: str) -> str:
    """A new token in place of the old one."""
    return _write(token_path(state_dir), exclusive=False)


def _write(path: str, *, exclusive: bool) -> str:
    token = secrets.token_urlsafe(32)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    target = path if exclusive else f"{path}.new"
    if not exclusive:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    if not exclusive:
        os.replace(target, path)
    return token

