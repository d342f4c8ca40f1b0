"""Placeholders kept out of git's sight inside the sandbox.

A placeholder for an absent protected file (an empty, read-only ``IDENTITY.md``) stands in
the workspace while a call runs, so ``git status`` in the sandbox would list it as
untracked and ``git add -A`` would stage it. :class:`Excludes` writes, outside the
workspace, a copy of a repository's ``.git/info/exclude`` with the placeholders added; the
sandbox binds it read-only over the real one for the call, so git ignores them there and
the repository itself is never written. A repository with no ``info/exclude`` gets none
(nothing to bind onto).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable


class Excludes:
    """Generated exclude files, one per distinct content, in ``folder`` (made on first use,
    owner-only; a temporary folder when "") and removed by :meth:`close`."""

    def __init__(self, folder: str = "") -> None:
        self._where = folder
        self._folder = ""
        self._lock = threading.Lock()

    def overlays(self, repositories: Iterable[str],
                 placeholders: Iterable[str]) -> list[tuple[str, str]]:
        """``(generated file, info/exclude)`` for each of ``repositories`` (worktree
        folders) with a placeholder in its worktree: the binds that hide them from git."""
        made = list(placeholders)
        out = []
        for repository in repositories:
            target = os.path.join(repository, ".git", "info", "exclude")
            names = sorted("/" + os.path.relpath(p, repository) for p in made
                           if os.path.dirname(p) == repository)
            # Through no link at all: a linked .git/info would show the sandbox a file from
            # anywhere (the hidden state directory), or make bwrap fail on every call.
            if not names or os.path.realpath(target) != target or not os.path.isfile(target):
                continue
            try:
                with open(target, "rb") as handle:
                    original = handle.read(1 << 20)
            except OSError:
                continue
            added = "\n# tether sandbox: placeholders of absent protected files\n"
            content = original + (b"" if original.endswith(b"\n") or not original
                                  else b"\n") + (added + "\n".join(names) + "\n").encode()
            out.append((self._file(content), target))
        return out

    def _file(self, content: bytes) -> str:
        name = hashlib.sha256(content).hexdigest()[:24]
        with self._lock:
            if not self._folder:
                if self._where:
                    os.makedirs(self._where, mode=0o700, exist_ok=True)
                self._folder = tempfile.mkdtemp(prefix="excludes-", dir=self._where or None)
            path = os.path.join(self._folder, name)
            if not os.path.exists(path):
                tmp = f"{path}.tmp"
                with open(tmp, "wb") as handle:
                    handle.write(content)
                os.replace(tmp, path)
        return path

    def close(self) -> None:
        """Remove the generated files."""
        with self._lock:
            folder, self._folder = self._folder, ""
        if folder:
            with contextlib.suppress(OSError):
                shutil.rmtree(folder)
