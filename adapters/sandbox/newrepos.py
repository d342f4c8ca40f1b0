"""Repositories a sandboxed call created: made harmless before anyone runs git in them.

The sandbox holds git's configuration and hooks of every repository that exists when a
call starts (:mod:`adapters.sandbox.protected`). One the call *creates* (``git init sub``,
a ``.git`` copied in, a bare repository) could carry configuration that runs code the next
time a person, or their shell prompt, runs git there (``core.fsmonitor``, hooks,
``core.sshCommand``, filters, aliases...). So after each writable call the repositories
of the workspace (its top and one folder down, as the sandbox holds them) are compared
with those before it, and each new one is made harmless: its configuration keeps only the
keys in :data:`KEPT_KEYS` (no key that names a program or another file), its hooks other
than git's ``*.sample`` files, ``config.worktree``, ``commondir`` and ``worktrees/`` are
removed, and the repositories under ``modules/`` get the same.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import subprocess

#: Configuration a new repository keeps (lower case; ``*`` one name): where it fetches
#: from and who commits, nothing that runs a program, points at a file or changes how a
#: remote is reached.
KEPT_KEYS: tuple[str, ...] = (
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
    "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf",
    "extensions.objectformat", "extensions.refstorage",
    "remote.*.url", "remote.*.fetch", "branch.*.remote", "branch.*.merge",
    "user.name", "user.email", "init.defaultbranch",
)


def git_folders(root: str) -> set[str]:
    """The git folders of workspace ``root`` the sandbox watches: ``.git`` folders and
    bare repositories at the top and one folder down, and where a ``.git`` file points
    inside the workspace."""
    found: set[str] = set()
    folders = [root]
    with contextlib.suppress(OSError):
        folders += [e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    for folder in folders:
        git = os.path.join(folder, ".git")
        if os.path.isdir(git) and not os.path.islink(git):
            if _is_git_dir(git):
                found.add(git)
        elif os.path.isfile(git) and not os.path.islink(git):
            target = _gitfile_target(git)
            if target and target.startswith(root + os.sep) and _is_git_dir(target):
                found.add(target)
        if os.path.basename(folder) != ".git" and _is_git_dir(folder):
            found.add(folder)  # a bare repository: git uses it from inside
    return found


def _is_git_dir(path: str) -> bool:
    """Whether git would take ``path`` for a repository's git folder (its ``HEAD`` a ref
    or an object name, ``objects/`` or ``commondir``, and ``refs/``)."""
    if not (os.path.isdir(os.path.join(path, "refs"))
            and (os.path.isdir(os.path.join(path, "objects"))
                 or os.path.isfile(os.path.join(path, "commondir")))):
        return False
    try:
        with open(os.path.join(path, "HEAD"), "rb") as handle:
            head = handle.read(256).strip()
    except OSError:
        return False
    return head.startswith(b"ref: ") or (len(head) in (40, 64) and all(
        c in b"0123456789abcdef" for c in head))


def _gitfile_target(path: str) -> str:
    """The real path a ``.git`` file (``gitdir: ...``) points at, or ""."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            line = handle.readline(4096).strip()
    except OSError:
        return ""
    if not line.startswith("gitdir:"):
        return ""
    target = line[len("gitdir:"):].strip()
    return os.path.realpath(os.path.join(os.path.dirname(path), target))


def make_harmless(git_dir: str) -> list[str]:
    """Make the new repository whose git folder is ``git_dir`` harmless (see the module's
    contract); returns what was removed or dropped, for the log."""
    changes: list[str] = []
    config = os.path.join(git_dir, "config")
    if os.path.isfile(config) and not os.path.islink(config):
        dropped = _keep_only_safe_keys(config)
        changes += [f"{config}: dropped {key}" for key in dropped]
    elif os.path.islink(config):
        _remove(config)
        changes.append(f"{config} (a link)")
    hooks = os.path.join(git_dir, "hooks")
    if os.path.islink(hooks) or (os.path.lexists(hooks) and not os.path.isdir(hooks)):
        _remove(hooks)
        changes.append(hooks)
    elif os.path.isdir(hooks):
        for entry in os.scandir(hooks):
            if not (entry.name.endswith(".sample") and entry.is_file(follow_symlinks=False)):
                _remove(entry.path)
                changes.append(entry.path)
    for name in ("config.worktree", "commondir", "worktrees"):
        path = os.path.join(git_dir, name)
        if os.path.lexists(path):
            _remove(path)
            changes.append(path)
    modules = os.path.join(git_dir, "modules")
    if os.path.islink(modules):
        _remove(modules)
        changes.append(modules)
    elif os.path.isdir(modules):
        for folder, names, _ in os.walk(modules):
            if _is_git_dir(folder):
                changes += make_harmless(folder)
                names.clear()
    return changes


def _keep_only_safe_keys(config: str) -> list[str]:
    """Rewrite ``config`` with only its :data:`KEPT_KEYS`; returns the keys dropped."""
    entries = _read_config(config)
    kept = [(key, value) for key, value in entries if _kept(key)]
    dropped = sorted({key for key, _ in entries if not _kept(key)})
    if dropped or not kept:
        _write_config(config, kept)
    return dropped


def _kept(key: str) -> bool:
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    pattern_key = f"{section}.*.{name}" if subsection else key
    return any(fnmatch.fnmatchcase(pattern_key.lower(), p) or key.lower() == p
               for p in KEPT_KEYS)


def _read_config(config: str) -> list[tuple[str, str]]:
    """The entries of a git configuration file (no includes followed), or none where git
    cannot read it."""
    try:
        done = subprocess.run(
            ["git", "config", "--no-includes", "--file", config, "--list", "-z"],
            capture_output=True, timeout=10, check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
                 "HOME": "/nonexistent"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    entries = []
    for item in done.stdout.decode("utf-8", errors="replace").split("\0"):
        if item:
            key, _, value = item.partition("\n")
            entries.append((key, value))
    return entries


def _write_config(config: str, entries: list[tuple[str, str]]) -> None:
    """Write ``entries`` as a git configuration file (by rename: a link is not followed)."""
    sections: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, value in entries:
        section, _, rest = key.partition(".")
        subsection, _, name = rest.rpartition(".")
        sections.setdefault((section, subsection), []).append((name, value))
    if not any(s == "core" for s, _ in sections):
        sections[("core", "")] = [("repositoryformatversion", "0")]
    lines = []
    for (section, subsection), items in sections.items():
        head = f'[{section} "{_quote(subsection)}"]' if subsection else f"[{section}]"
        lines.append(head)
        lines += [f'\t{name} = "{_quote(value)}"' for name, value in items]
    tmp = f"{config}.tether-tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(tmp, config)


def _quote(text: str) -> str:
    return (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            .replace("\t", "\\t"))


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
