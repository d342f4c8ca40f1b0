"""Which paths of a workspace the sandbox must hold: the protected files as they stand on
disk now, and the ones that do not exist yet.

Contract of :func:`protected_targets`: given the real workspace and the protection
patterns (workspace-relative globs, matched without regard to case), it returns every
existing path that matches (each case variant), and, for each literal pattern with no
path on disk, the canonical path a placeholder must hold so that nothing can create it.
A protected path reached through a symlink inside the workspace cannot be held by a mount
(the link itself could be removed and replaced): it raises :class:`UnholdablePath`, and the
caller refuses to run.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
from collections.abc import Iterable
from typing import NamedTuple

from tether.actors.gatekeeper.security.globs import has_glob
from tether.adapters.sandbox.newrepos import git_folders, remove_path

#: Held read-only by the sandbox in every repository besides the protection settings, present
#: or not: git reads configuration and hooks from all of them (``commondir`` points git at
#: another folder's), so each would run code outside the sandbox the next time a person
#: runs git. ``(path, is_dir)``.
GIT_PROTECTED: tuple[tuple[str, bool], ...] = (
    (".git/config", False), (".git/config.worktree", False), (".git/commondir", False),
    (".git/hooks", True), (".git/worktrees", True), (".git/modules", True),
)
#: git files no placeholder can stand in for (git reads an empty ``commondir`` and fails):
#: an absent one is watched instead, and removed after the call if the call made it.
GIT_WATCHED: frozenset[str] = frozenset({".git/commondir"})

#: Most paths a protection glob holds in one call.
_WALK_LIMIT = 10_000


class UnholdablePath(Exception):
    """A protected path the sandbox cannot hold (a symlink on the way); the call is
    refused rather than run with the file exposed."""


class Target(NamedTuple):
    """One protected path: ``path`` absolute; ``exists`` on disk now (else a placeholder
    stands in for it); ``is_dir`` a folder (``**`` patterns) or a file."""

    path: str
    exists: bool
    is_dir: bool


def _literal_part(pattern: str) -> tuple[str, bool]:
    """``(path, is_dir)`` for a pattern naming one file or one folder's whole tree
    (``.tether/rules/**``), or ``("", False)`` for a true glob."""
    pattern = pattern.strip("/")
    is_dir = False
    for suffix in ("/**", "/*"):
        if pattern.endswith(suffix):
            pattern, is_dir = pattern[: -len(suffix)], True
            break
    if not pattern or has_glob(pattern) or ".." in pattern.split("/"):
        return "", False
    return pattern, is_dir


def _variants(root: str, rel: str) -> list[str]:
    """The existing paths below ``root`` that spell ``rel`` without regard to case.
    Raises UnholdablePath when a match, or a folder on the way to one, is a symlink."""
    current = [root]
    parts = rel.split("/")
    for depth, part in enumerate(parts):
        found: list[str] = []
        for folder in current:
            try:
                names = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                if name.casefold() != part.casefold():
                    continue
                full = os.path.join(folder, name)
                mode = os.lstat(full).st_mode
                if stat.S_ISLNK(mode):
                    raise UnholdablePath(
                        f"{os.path.relpath(full, root)} is a symlink; the sandbox cannot "
                        f"hold a protected path reached through a link"
                    )
                if depth < len(parts) - 1 and not stat.S_ISDIR(mode):
                    continue
                found.append(full)
        current = found
    return current


def protected_targets(root: str, patterns: Iterable[str],
                      git_dirs: Iterable[str] | None = None) -> list[Target]:
    """Every protected path of workspace ``root`` (real, absolute) for ``patterns``,
    existing ones first, each once; see the module's contract."""
    targets: dict[str, Target] = {}
    globs: list[str] = []
    for repository in repositories_of(root):
        for target in _git_targets(repository, top=repository == root):
            targets[target.path] = target
    held_git = os.path.join(root, ".git") + os.sep  # held whole where it is one folder
    for git_dir in git_folders(root) if git_dirs is None else git_dirs:
        if os.path.basename(git_dir) != ".git" and not git_dir.startswith(held_git):
            for target in _git_dir_targets(git_dir):  # bare ones, where .git files point
                targets.setdefault(target.path, target)
    for pattern in patterns:
        rel, is_dir = _literal_part(pattern)
        if not rel:
            globs.append(pattern)
            continue
        existing = _variants(root, rel)
        for path in existing:
            targets.setdefault(path, Target(path, True, os.path.isdir(path)))
        if os.path.lexists(os.path.join(root, rel)) or rel.startswith(".git/"):
            continue  # held above (a case variant does not stand in for it); git's: above
        # A folder that would hold it and does not exist yet is held whole (one
        # placeholder for .tether/ instead of one for each protected file in it).
        top = _topmost_missing(root, rel)
        targets.setdefault(top, Target(top, False, is_dir or top != os.path.join(root, rel)))
    if globs:
        for path in _glob_matches(root, globs):
            targets.setdefault(path, Target(path, True, os.path.isdir(path)))
    return sorted(targets.values(), key=lambda t: (not t.exists, t.path))


def _topmost_missing(root: str, rel: str) -> str:
    """The outermost path on the way from ``root`` to ``rel`` that does not exist."""
    current = root
    for part in rel.split("/"):
        current = os.path.join(current, part)
        if not os.path.lexists(current):
            return current
    return current


def repositories_of(root: str) -> list[str]:
    """``root`` and the repositories one folder below it (``vendor/.git``)."""
    found = [root]
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            git = os.path.join(entry.path, ".git")
            if entry.is_dir(follow_symlinks=False) and os.path.lexists(git):
                found.append(entry.path)
    return found


def _git_targets(root: str, *, top: bool = True) -> list[Target]:
    """What the sandbox holds of git in ``root``: in a repository, each of
    :data:`GIT_PROTECTED`; where there is none, ``.git`` itself (a command could otherwise
    make a repository whose configuration runs code: ``git init`` is for a person); a
    ``.git`` file (a worktree's pointer) read-only. A ``.git`` link cannot be held."""
    git = os.path.join(root, ".git")
    if os.path.islink(git):
        raise UnholdablePath(".git is a symlink; the sandbox cannot hold git's configuration "
                             "reached through a link")
    if not os.path.lexists(git):
        return [Target(git, False, True)] if top else []
    if not os.path.isdir(git):
        return [Target(git, True, False)]
    return _git_dir_targets(git)


def _git_dir_targets(git_dir: str) -> list[Target]:
    """:data:`GIT_PROTECTED` in the git folder ``git_dir`` (a ``.git`` or a bare one)."""
    out = []
    for rel, is_dir in GIT_PROTECTED:
        path = os.path.join(git_dir, rel.removeprefix(".git/"))
        if os.path.islink(path):
            raise UnholdablePath(f"{path} is a symlink; the sandbox cannot hold it")
        exists = os.path.lexists(path)
        if exists or rel not in GIT_WATCHED:
            out.append(Target(path, exists, is_dir))
    return out


def watched_paths(root: str, git_dirs: Iterable[str] | None = None) -> list[str]:
    """The absent :data:`GIT_WATCHED` files of the git folders of workspace ``root``
    (``git_dirs``, where the caller has found them already)."""
    return [path
            for git_dir in sorted(git_folders(root) if git_dirs is None else git_dirs)
            for rel in sorted(GIT_WATCHED)
            if not os.path.lexists(path := os.path.join(git_dir, rel.removeprefix(".git/")))]


def remove_created(paths: list[str]) -> list[str]:
    """Remove each of ``paths`` that exists now (made by the call that just ended)."""
    removed = []
    for path in paths:
        if not os.path.lexists(path):
            continue
        remove_path(path)
        if not os.path.lexists(path):
            removed.append(path)
    return removed


def _glob_matches(root: str, patterns: list[str]) -> list[str]:
    """Existing paths below ``root`` matching a glob of ``patterns`` (as written: case is
    not folded for globs), at most ``_WALK_LIMIT`` of them."""
    found: list[str] = []
    for pattern in patterns:
        for rel in glob.iglob(pattern, root_dir=root, recursive=True, include_hidden=True):
            full = os.path.join(root, rel)
            if os.path.islink(full):
                raise UnholdablePath(
                    f"{rel} is a symlink; the sandbox cannot hold a protected path reached "
                    f"through a link"
                )
            found.append(full)
            if len(found) >= _WALK_LIMIT:
                return found
    return found


def ancestors(root: str, path: str) -> list[str]:
    """The folders strictly between ``root`` and ``path``, outermost first."""
    rel = os.path.relpath(os.path.dirname(path), root)
    if rel == ".":
        return []
    out: list[str] = []
    current = root
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        out.append(current)
    return out
