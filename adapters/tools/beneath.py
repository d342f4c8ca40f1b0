"""Opening paths beneath a directory without following links out of it.

The file tools never turn a path into a string, check it and then open the string (a
check-then-use race: another process can swap a folder for a symlink in between). They
open the workspace once as a directory descriptor (:func:`open_root`) and resolve every
path *from that descriptor*, so each step is taken and checked by the same system call:

* where the kernel has ``openat2(2)`` (Linux 5.6+), with ``RESOLVE_BENEATH |
  RESOLVE_NO_MAGICLINKS``: the kernel refuses (``EXDEV``) any ``..``, absolute path or
  symlink that leads above the root, atomically;
* elsewhere (or when :data:`FORCE_WALK` is set), a walk that opens one component at a time
  with ``O_NOFOLLOW`` relative to the folder opened before it. A symlink met on the way is
  read (``readlinkat``) and its target resolved the same way, from the folder it sits in;
  ``..`` goes back to the folder the walk came from and is refused at the root; at most
  :data:`MAX_LINKS` links are followed (then ``ELOOP``).

Symlinks that stay beneath the root keep working. An absolute symlink target is followed
only when it names a place beneath the root's real path (or the workspace path as given);
``openat2`` refuses those (``EXDEV``), so an ``EXDEV`` answer is re-decided by the walk,
which is just as safe. A path leading out raises :class:`EscapeError`.

Writes (:func:`write_beneath`) never write through an existing file: the new content goes
to a fresh temporary file in the same folder, which is renamed over the target. A hard link
to a file elsewhere is thereby replaced, not written through, and a symlink swapped in at
the last moment is replaced too, never followed.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import posixpath
import secrets
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from tether.adapters.tools.base import ToolError

#: ``struct open_how.resolve`` bits (linux/openat2.h).
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
#: The ``openat2`` system call number (the same on every architecture using the generic
#: table: x86_64, i386, arm, aarch64, riscv, powerpc, s390).
SYS_OPENAT2 = 437
#: Most symlinks one resolution follows (the kernel's own bound).
MAX_LINKS = 40
#: Set to True to use the portable walk even where ``openat2`` exists (tests run both).
FORCE_WALK = False

_O_PATH: int = getattr(os, "O_PATH", 0)
#: How the walk opens a folder it only passes through (search permission suffices).
_DIR_FLAGS = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: How a file is opened to be looked at: never blocks on a FIFO, never takes a terminal.
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
_GENERIC_TABLE = {
    "x86_64",
    "amd64",
    "i386",
    "i686",
    "aarch64",
    "arm64",
    "armv7l",
    "armv6l",
    "riscv64",
    "ppc64le",
    "ppc64",
    "s390x",
    "loongarch64",
}


class EscapeError(OSError):
    """A path that leads outside the root (by ``..``, an absolute path or a symlink)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EXDEV, "path leads outside the workspace", path)


class NotRegularError(OSError):
    """The path names something other than a regular file (a FIFO, a socket, a device)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)


class ChangedError(OSError):
    """The file to replace is no longer the one that was read (see :func:`write_beneath`)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.ESTALE, "the file changed while it was edited", path)


@dataclass(frozen=True)
class Root:
    """An open workspace: ``fd`` (a directory descriptor), its real path and the path it
    was opened by (both used only to accept absolute paths that name a place inside)."""

    fd: int
    path: str
    given: str

    def close(self) -> None:
        """Close the descriptor (once; later calls do nothing harmful)."""
        with suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def relative(self, path: str) -> str:
        """``path`` relative to the root: a relative path is returned as is; an absolute
        one must lie (lexically) under the root's real or given path, else
        :class:`EscapeError`. A NUL byte is refused too."""
        if "\0" in path:
            raise EscapeError(path)
        if not path.startswith("/"):
            return path
        for prefix in (self.path, self.given):
            base = prefix.rstrip("/")
            if path.rstrip("/") == base:
                return "."
            if path.startswith(base + "/"):
                return path[len(base) + 1 :].lstrip("/") or "."
        raise EscapeError(path)


def open_root(workspace: str) -> Root:
    """Open folder ``workspace`` as the root every path is resolved beneath (the caller
    closes it, or uses the result as a context manager)."""
    fd = os.open(workspace, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        real = os.path.realpath(workspace)
    except (OSError, ValueError):
        real = workspace
    return Root(fd, real, os.path.normpath(workspace))


@contextmanager
def confined(workspace: str, path: str) -> Iterator[tuple[Root, str]]:
    """The opened workspace and ``path`` relative to it, for the body of a ``with``; an
    :class:`EscapeError` raised in the body becomes the tools' usual refusal
    (``refused: path X is outside the workspace W``) and the root is closed."""
    try:
        root = open_root(workspace)
    except OSError as err:
        raise ToolError(f"workspace {workspace} cannot be opened: {err.strerror}") from err
    try:
        yield root, root.relative(path)
    except EscapeError as err:
        raise ToolError(f"refused: path {path} is outside the workspace {workspace}") from err
    finally:
        root.close()


@contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """``fd`` for the body of a ``with``, closed at its end."""
    try:
        yield fd
    finally:
        os.close(fd)


# --- openat2 ------------------------------------------------------------------------------


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_openat2_ok: bool | None = None


@functools.cache
def _libc_syscall() -> Any:
    """libc's ``syscall(2)`` wrapper, loaded once (errno kept per thread)."""
    function = ctypes.CDLL(None, use_errno=True).syscall
    function.restype = ctypes.c_long
    return function


def _syscall_openat2(dir_fd: int, path: bytes, how: _OpenHow) -> tuple[int, int]:
    """One raw ``openat2`` call: (result, errno)."""
    result = _libc_syscall()(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(path),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    return int(result), ctypes.get_errno()


def openat2_available() -> bool:
    """Does this kernel answer ``openat2`` with ``RESOLVE_BENEATH``? Probed once; any
    refusal (``ENOSYS`` on old kernels, ``EPERM`` under some seccomp filters) means no."""
    global _openat2_ok
    if _openat2_ok is None:
        _openat2_ok = False
        if sys.platform.startswith("linux") and platform.machine() in _GENERIC_TABLE:
            how = _OpenHow(
                _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
            )
            try:
                fd, _ = _syscall_openat2(-100, b".", how)  # AT_FDCWD
            except (OSError, AttributeError):
                fd = -1
            if fd >= 0:
                os.close(fd)
                _openat2_ok = True
    return _openat2_ok


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """``openat2(dir_fd, path)`` confined beneath ``dir_fd``; raises ``OSError`` (``EXDEV``
    for a path leading out). ``EAGAIN`` (a rename raced the lookup) is retried a few times."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    creates = flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile)
    how = _OpenHow(
        flags | os.O_CLOEXEC,
        mode & 0o7777 if creates else 0,
        RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    )
    raw = os.fsencode(path)
    code = errno.EAGAIN
    for _ in range(16):
        fd, code = _syscall_openat2(dir_fd, raw, how)
        if fd >= 0:
            return fd
        if code not in (errno.EAGAIN, errno.EINTR):
            break
    raise OSError(code, os.strerror(code), path)


# --- the portable walk -------------------------------------------------------------------


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _readlink(name: str, dir_fd: int) -> str | None:
    """The target of symlink ``name`` in ``dir_fd``, or None when it is not a symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _walk(root: Root, path: str, flags: int, mode: int, follow: bool) -> tuple[int, list[str]]:
    """Open ``path`` beneath ``root`` one component at a time (module docstring): the
    descriptor and the names of the folders and file it went through from the root."""
    stack: list[int] = [root.fd]  # stack[0] is the caller's; the rest are ours
    names: list[str] = []
    pending = list(reversed(_parts(path)))
    links = 0
    retried = False
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                if len(stack) == 1:
                    raise EscapeError(path)
                os.close(stack.pop())
                names.pop()
                continue
            last = not pending
            want = (flags | os.O_NOFOLLOW | os.O_CLOEXEC) if last else _DIR_FLAGS
            target: str | None = None
            try:
                fd = os.open(name, want, mode, dir_fd=stack[-1])
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                if last and not follow:
                    raise
                target = _readlink(name, stack[-1])
                if target is None:
                    if retried:
                        raise
                    retried = True  # swapped back from a link meanwhile? look once more
                    pending.append(name)
                    continue
            else:
                if last and follow and flags & _O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
                    os.close(fd)
                    target = _readlink(name, stack[-1])
                    if target is None:
                        if retried:
                            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                        retried = True
                        pending.append(name)
                        continue
                elif last:
                    names.append(name)
                    return fd, names
                else:
                    stack.append(fd)
                    names.append(name)
                    retried = False
                    continue
            retried = False
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            if target.startswith("/"):
                target = root.relative(target)  # EscapeError unless it names a place beneath
                while len(stack) > 1:
                    os.close(stack.pop())
                names.clear()
            pending.extend(reversed(_parts(target)))
        # the path named a folder already on the stack (empty, ".", or ending in "..")
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=stack[-1]), names
    finally:
        for fd in stack[1:]:
            os.close(fd)


# --- the API ------------------------------------------------------------------------------


def open_beneath(
    root: Root, path: str, flags: int, mode: int = 0o666, *, follow: bool = True
) -> int:
    """A descriptor for ``path`` (relative) opened with ``flags`` beneath ``root``:
    nothing on the way, links included, leads above the root (else :class:`EscapeError`).
    ``follow=False`` does not follow a final symlink (``ELOOP``, or the link itself with
    ``O_PATH``). ``mode`` is for ``O_CREAT`` (the umask applies)."""
    if "\0" in path:
        raise EscapeError(path)
    if path.startswith("/"):
        raise EscapeError(path)
    if not follow:
        flags |= os.O_NOFOLLOW
    if not FORCE_WALK and openat2_available():
        try:
            return _openat2(root.fd, path or ".", flags, mode)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.EAGAIN):
                raise
            # EXDEV: an escape, or an absolute symlink naming a place beneath: the walk decides
    return _walk(root, path, flags, mode, follow)[0]


def realpath_beneath(root: Root, path: str) -> str:
    """``path`` with every symlink and ``..`` resolved, relative to the root (``.`` for the
    root); :class:`EscapeError` when it leads out. For naming only: the answer can be stale."""
    fd, names = _walk(root, path, _O_PATH or (os.O_RDONLY | os.O_NONBLOCK), 0, True)
    os.close(fd)
    return "/".join(names) or "."


def stat_beneath(root: Root, path: str, *, follow: bool = True) -> os.stat_result:
    """``stat`` (or ``lstat`` with ``follow=False``) of ``path`` reached beneath the root."""
    flags = _O_PATH or (os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with closing_fd(open_beneath(root, path, flags, follow=follow)) as fd:
        return os.fstat(fd)


def kind_of(entry: os.DirEntry[str]) -> str:
    """``dir``, ``file``, ``link`` or ``other``: what a directory entry is, links not
    followed."""
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


def listdir_fd(fd: int) -> list[tuple[str, str]]:
    """The entries of the folder open as ``fd`` (readable), as (name, :func:`kind_of`),
    sorted by name; ``fd`` stays open."""
    with os.scandir(fd) as entries:
        return sorted((e.name, kind_of(e)) for e in entries)


def listdir_beneath(root: Root, path: str) -> list[tuple[str, str]]:
    """The entries of folder ``path`` beneath the root, as :func:`listdir_fd` gives them."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK
    with closing_fd(open_beneath(root, path, flags)) as fd:
        return listdir_fd(fd)


def mkdirs_beneath(root: Root, path: str) -> int:
    """A descriptor (``O_PATH`` where there is one) of folder ``path`` beneath the root,
    creating the missing folders one at a time (``mkdirat``), each reopened beneath the
    root so a folder swapped for a symlink is resolved, and refused if it leads out."""
    flags = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY
    parent, name = posixpath.split(path.rstrip("/"))
    try:
        return open_beneath(root, path, flags)
    except FileNotFoundError:
        if not name:
            raise
    with closing_fd(mkdirs_beneath(root, parent or ".")) as parent_fd, suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=parent_fd)
    return open_beneath(root, path, flags)


def split_beneath(path: str) -> tuple[str, str]:
    """``path`` as (folder, final name); raises ``IsADirectoryError`` when its last part
    is not a name (empty, ``.`` or ``..``)."""
    parent, name = posixpath.split(path)
    if name in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return parent or ".", name


def _link_path(root: Root, parent: str, target: str) -> str:
    """Where a symlink in folder ``parent`` with ``target`` points, relative to the root."""
    if target.startswith("/"):
        return root.relative(target)
    return f"{parent}/{target}"


def write_beneath(
    root: Root,
    path: str,
    data: bytes,
    *,
    make_parents: bool = True,
    expect: os.stat_result | None = None,
    only: str | None = None,
) -> str:
    """Replace the file ``path`` beneath the root by ``data``; the root-relative path
    actually written is returned.

    With ``only`` (a root-relative path: the one the gatekeeper judged), the write lands
    there or nowhere: a final symlink swapped in since the judgement, leading elsewhere
    (a protected file), raises :class:`ChangedError` instead of being followed.

    The content is written to a new file in the same folder (``O_CREAT|O_EXCL|O_NOFOLLOW``)
    and renamed over the target, so an existing hard link is replaced, never written
    through. A final symlink is followed to its target beneath the root (the link stays);
    one leading out raises :class:`EscapeError`. An existing file keeps its permission bits
    (setuid, setgid and sticky dropped) and, where allowed, its owner; a file we may not
    write is refused (``PermissionError``); a folder (``IsADirectoryError``) or FIFO,
    socket or device (:class:`NotRegularError`) is refused. Missing folders are created
    with ``make_parents``. With ``expect`` (an earlier ``fstat``), the file replaced must still be
    that one (same device and inode), else :class:`ChangedError`: an edit never lands on a
    file other than the one it read.
    """
    current = path
    for _ in range(MAX_LINKS + 1):
        parent, name = split_beneath(current)
        if make_parents:
            dir_fd = mkdirs_beneath(root, parent)
        else:
            dir_fd = open_beneath(root, parent, (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY)
        with closing_fd(dir_fd):
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                current = _link_path(root, parent, os.readlink(name, dir_fd=dir_fd))
                continue
            if st is not None:
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                if not stat.S_ISREG(st.st_mode):
                    raise NotRegularError(path)
                _check_writable(name, dir_fd, path)
            if expect is not None and (
                st is None or (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino)
            ):
                raise ChangedError(path)
            if only is not None and posixpath.normpath(current) != posixpath.normpath(only):
                raise ChangedError(path)
            _replace(dir_fd, name, data, st)
            return posixpath.normpath(current)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def _check_writable(name: str, dir_fd: int, path: str) -> None:
    """Refuse, as ``open(path, 'w')`` would have, a file we have no right to write."""
    try:
        ok = os.access(name, os.W_OK, dir_fd=dir_fd, effective_ids=True, follow_symlinks=False)
    except (NotImplementedError, OSError):
        return
    if not ok:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


def _replace(dir_fd: int, name: str, data: bytes, old: os.stat_result | None) -> None:
    """Write ``data`` to a fresh temporary file in ``dir_fd`` and rename it to ``name``."""
    stem = name[:180]
    for _ in range(100):
        temp = f".{stem}.{secrets.token_hex(6)}.tether-tmp"
        try:
            fd = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600 if old is not None else 0o666,
                dir_fd=dir_fd,
            )
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if old is not None:
                with suppress(OSError):
                    os.fchown(fd, old.st_uid, old.st_gid)
                os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
