"""Files only their owner may read: secrets kept in the state directory.

The HTTP token (:mod:`adapters.http_token`) and the NATS credentials
(:mod:`adapters.nats_auth`) are kept this way:

* :func:`read_private` never follows a link in the file's place and refuses a file that
  its group or others may read (:class:`ExposedFile`, naming what to do);
* :func:`write_private` makes the file with mode 0600 from the start (never readable by
  others, not even for a moment), either exclusively (fails when it exists) or by
  replacing the old one atomically.
"""

from __future__ import annotations

import contextlib
import os
import stat


class ExposedFile(Exception):
    """A private file that its group or others can read, or that is empty."""


def read_private(path: str, remedy: str) -> str | None:
    """The text of ``path``, or None when there is no such file.

    Raises :class:`ExposedFile` (``remedy`` appended to the message) when the file's
    mode lets its group or others read or write it, and ``OSError`` when it cannot be
    read, or is a symbolic link (never followed).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        if stat.S_IMODE(os.fstat(handle.fileno()).st_mode) & 0o077:
            raise ExposedFile(f"{path} can be read by others: run `chmod 600 {path}`"
                              + (f", or {remedy}" if remedy else ""))
        return handle.read()


def write_private(path: str, text: str, *, exclusive: bool) -> None:
    """Write ``text`` to ``path`` with mode 0600 (its folder made 0700 if missing).

    ``exclusive``: make the file, raising ``FileExistsError`` when it exists (two
    processes racing: one wins, the other reads the winner's). Otherwise the text goes to
    ``<path>.new`` first, which then replaces ``path`` atomically.
    """
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    target = path if exclusive else f"{path}.new"
    if not exclusive:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    if not exclusive:
        os.replace(target, path)
