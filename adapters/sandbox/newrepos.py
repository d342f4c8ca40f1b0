"""Repositories a sandboxed call created: made harmless before anyone runs git in them.

The sandbox holds git's configuration and hooks of every repository that exists when a
call starts (:mod:`adapters.sandbox.protected`, from :func:`git_folders`). One the call
*creates* (``git init sub``, a ``.git`` copied in, a bare repository) could carry
configuration that runs code the next time a person, or their shell prompt, runs git
there (``core.fsmonitor``, hooks, ``core.sshCommand``, filters, aliases...). So after each
writable call the git folders of the workspace (its top and one folder down) are compared
with those before it, and so are, when the call changed an index, the repositories its
gitlinks point at (a person's ``git status`` recurses into them, at any depth); each
new one whose configuration the sandbox did not hold is made harmless: its configuration
keeps only the keys in :data:`KEPT_KEYS` (no key that names a program or another file),
its hooks other than git's ``*.sample`` files, ``config.worktree``, ``commondir`` and
``worktrees/`` are removed, and the repositories under ``modules/`` get the same.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
import subprocess
import tempfile

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


#: git run by the engine on a repository a call made: no system or global configuration.
_GIT_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent"}


def git_folders(root: str) -> set[str]:
    """The git folders of workspace ``root``, at the top and one folder down: every
    ``.git`` folder (whatever it holds now), every folder that looks like a bare
    repository, and where a ``.git`` file points inside the workspace. Nothing is opened
    but ``.git`` files (without blocking), so no file the workspace holds can stall it."""
    found: set[str] = set()
    folders = [root]
    with contextlib.suppress(OSError):
        folders += [e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    for folder in folders:
        git = os.path.join(folder, ".git")
        mode = _mode(git)
        if stat.S_ISDIR(mode):
            found.add(git)
        elif stat.S_ISREG(mode):
            target = gitfile_target(git)
            if target.startswith(root + os.sep) and stat.S_ISDIR(_mode(target)):
                found.add(target)
        if os.path.basename(folder) != ".git" and looks_like_git_dir(folder):
            found.add(folder)  # a bare repository: git uses it from inside
    return found


def _mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def looks_like_git_dir(path: str) -> bool:
    """Whether git could take ``path`` for a git folder: a ``HEAD`` (of any content or
    kind: git's own test accepts more forms than are worth copying) beside ``objects/``
    or a ``commondir``."""
    return bool(_mode(os.path.join(path, "HEAD"))) and (
        stat.S_ISDIR(_mode(os.path.join(path, "objects")))
        or bool(_mode(os.path.join(path, "commondir"))))


def gitfile_target(path: str) -> str:
    """The real path a ``.git`` file points at (``gitdir: <path>``, read as git reads it),
    or ""."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        head = os.read(fd, 4096).split(b"\n", 1)[0].rstrip(b"\r")
    except OSError:
        return ""
    finally:
        os.close(fd)
    if not head.startswith(b"gitdir: "):
        return ""
    target = os.fsdecode(head[len(b"gitdir: "):])
    return os.path.realpath(os.path.join(os.path.dirname(path), target))


def gitlinked(worktree: str) -> list[str]:
    """The git folders of the repositories ``worktree``'s index records as gitlinks
    (submodules, at any depth), where they have one: a person's ``git status`` there
    runs git in each."""
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", worktree, "ls-files", "--stage", "-z"],
            capture_output=True, timeout=30, check=False, env=_GIT_ENV)
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for entry in done.stdout.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        if not meta.startswith(b"160000 "):
            continue
        git = os.path.join(worktree, os.fsdecode(name), ".git")
        mode = _mode(git)
        if stat.S_ISDIR(mode):
            found.append(git)
        elif stat.S_ISREG(mode) and (target := gitfile_target(git)):
            found.append(target)
    return found


def make_harmless(git_dir: str) -> list[str]:
    """Make the new repository whose git folder is ``git_dir`` harmless (see the module's
    contract); returns what was removed or dropped, for the log."""
    changes: list[str] = []
    config = os.path.join(git_dir, "config")
    mode = _mode(config)
    if stat.S_ISREG(mode):
        dropped = _keep_only_safe_keys(config)
        changes += [f"{config}: dropped {key}" for key in dropped]
    elif mode and not stat.S_ISDIR(mode):  # a link, a FIFO...: git would read through it
        remove_path(config)
        changes.append(f"{config} (not a plain file)")
    hooks = os.path.join(git_dir, "hooks")
    if os.path.islink(hooks) or (os.path.lexists(hooks) and not os.path.isdir(hooks)):
        remove_path(hooks)
        changes.append(hooks)
    elif os.path.isdir(hooks):
        for entry in os.scandir(hooks):
            if not (entry.name.endswith(".sample") and entry.is_file(follow_symlinks=False)):
                remove_path(entry.path)
                changes.append(entry.path)
    for name in ("config.worktree", "commondir", "worktrees"):
        path = os.path.join(git_dir, name)
        if os.path.lexists(path):
            remove_path(path)
            changes.append(path)
    modules = os.path.join(git_dir, "modules")
    if os.path.islink(modules):
        remove_path(modules)
        changes.append(modules)
    elif os.path.isdir(modules):
        for folder, names, _ in os.walk(modules):
            if looks_like_git_dir(folder):
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
            env=_GIT_ENV,
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
    # A new, exclusive temporary file: a name the call left there (a link to anywhere)
    # is never opened.
    fd, tmp = tempfile.mkstemp(prefix=".tether-config-", dir=os.path.dirname(config))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(tmp, config)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _quote(text: str) -> str:
    return (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            .replace("\t", "\\t"))


def remove_path(path: str) -> None:
    """Remove ``path``: a folder with all it holds (links in it not followed), else the
    file or link itself."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
