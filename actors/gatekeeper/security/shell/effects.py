"""Models of the commands that create, change, link or delete files: ``rm``, ``cp``, ``mv``,
``ln``, ``install``, ``tee``, ``truncate``, ``dd``, ``chmod`` and friends, ``touch``,
``split``, ``sponge``, ``patch`` ...

Each model reads its command's options the way the command does (:func:`getopt`: bundles,
abbreviated long options) and reports the files it writes, reads or deletes. Links are
never taken on trust: ``ln`` anywhere, ``cp -s``/``-l``, and copying or moving a symbolic
link (or a tree holding one) with links preserved are reported as unreadable, because the
link's destination decides what a later write changes.
"""

from __future__ import annotations

import glob as globmod
import os
from collections.abc import Callable

from tether.actors.gatekeeper.security.shell.model import (
    Ctx,
    Effects,
    Opts,
    Target,
    getopt,
    is_dynamic,
)

_WALK_LIMIT = 2000


def _xargs_tail(eff: Effects, ctx: Ctx, access: str = "write") -> None:
    if ctx.from_stdin:
        eff.targets.append(Target("", "delete" if access == "delete" else "write",
                                  f"xargs {ctx.name}", dynamic=True))


def remove(ctx: Ctx) -> Effects:
    eff = Effects()
    o = getopt(ctx.args, "n:s:", ("recursive", "force", "dir", "interactive", "verbose",
                                  "one-file-system", "no-preserve-root", "preserve-root",
                                  "iterations=", "size=", "random-source=", "remove", "zero",
                                  "exact"))
    recursive = o.has("-r", "-R", "--recursive")
    for op in o.operands:
        eff.delete(op, ctx.name, dynamic=ctx.from_stdin, recursive=recursive)
    for source in o.values("--random-source"):
        eff.read(source, ctx.name)
    _xargs_tail(eff, ctx, "delete")
    return eff


def _expand_sources(sources: list[str], cwds: list[str]) -> list[str]:
    out: list[str] = []
    for src in sources:
        for cwd in cwds:
            if is_dynamic(src):
                continue
            full = os.path.join(cwd, src)
            if any(ch in src for ch in "*?["):
                out.extend(sorted(globmod.glob(full))[:200])
            else:
                out.append(full)
    return out


def link_risk(sources: list[str], cwds: list[str], *, deep: bool) -> str | None:
    """Why copying or moving ``sources`` (from any of ``cwds``) with links kept could plant
    a link: a source that is a symbolic link, or (``deep``) a folder holding one. None when
    there is none."""
    for full in _expand_sources(sources, cwds):
        if os.path.islink(full):
            return f"{full} is a symbolic link"
        if not deep or not os.path.isdir(full):
            continue
        seen = 0
        for root, dirs, files in os.walk(full):
            for entry in dirs + files:
                seen += 1
                if os.path.islink(os.path.join(root, entry)):
                    return f"{os.path.join(root, entry)} is a symbolic link"
            if seen > _WALK_LIMIT:
                return f"{full} holds too many files to check them for links"
    return None


def copy_like(ctx: Ctx) -> Effects:
    """``cp``, ``mv``, ``ln``, ``install`` and local ``rsync``."""
    name = ctx.name
    eff = Effects()
    if name in ("ln", "link"):
        o = getopt(ctx.args, "t:S:", ("target-directory=", "suffix=", "backup", "symbolic",
                                     "force", "no-dereference", "relative", "no-target-directory",
                                     "logical", "physical", "interactive", "verbose"))
        eff.cannot_read("ln makes a link; what later writes through it change is not known")
    elif name == "install":
        o = getopt(ctx.args, "t:S:m:o:g:", ("target-directory=", "suffix=", "mode=", "owner=",
                                         "group=", "strip-program=", "context", "compare",
                                         "directory", "no-target-directory", "strip"))
        if o.has("--strip-program"):
            eff.cannot_read("install --strip-program runs a program")
    elif name == "rsync":
        o = getopt(ctx.args, "e:B:f:T:M:", ("rsh=", "rsync-path=", "exclude=", "include=",
                                        "filter=", "backup-dir=", "suffix=", "temp-dir=",
                                        "log-file=", "write-batch=", "only-write-batch=",
                                        "read-batch=", "files-from=", "exclude-from=",
                                        "include-from=", "compare-dest=", "copy-dest=",
                                        "link-dest=", "partial-dir=", "chmod=", "chown=",
                                        "port=", "links", "archive", "recursive",
                                        "remove-source-files", "no-target-directory"))
    else:
        o = getopt(ctx.args, "t:S:", ("target-directory=", "suffix=", "no-preserve=", "sparse=",
                                     "backup", "preserve", "recursive", "archive",
                                     "no-dereference", "dereference", "symbolic-link", "link",
                                     "parents", "no-target-directory", "exchange"))
    ops = o.operands
    recursive = o.has("-r", "-R", "-a", "--recursive", "--archive") or name == "mv"
    if name == "cp":
        if o.has("-s", "-l", "--symbolic-link", "--link"):
            eff.cannot_read("cp -s/-l makes links instead of copies")
        keeps_links = o.has("-P", "-d", "-a", "-r", "-R", "--no-dereference", "--archive",
                            "--recursive") or any("link" in v or "all" in v
                                                  for v in o.values("--preserve"))
        if keeps_links and not o.has("-L", "--dereference"):
            risk = link_risk(ops[:-1] or ops, ctx.cwds, deep=recursive)
            if risk:
                eff.cannot_read(f"cp keeps links, and {risk}")
        if o.has("--parents"):
            eff.cannot_read("cp --parents writes beneath the destination by the sources' paths")
    if name == "mv":
        risk = link_risk(ops[:-1], ctx.cwds, deep=True)
        if risk:
            eff.cannot_read(f"mv moves a link, and {risk}")
        if o.has("--exchange"):
            eff.cannot_read("mv --exchange swaps the two files")
    if name == "rsync":
        if o.has("-e", "--rsh", "--rsync-path"):
            eff.cannot_read("rsync -e/--rsync-path runs a command")
        if o.has("-l", "-a", "--links", "--archive"):
            risk = link_risk(ops[:-1], ctx.cwds, deep=True)
            if risk:
                eff.cannot_read(f"rsync keeps links, and {risk}")
        for opt in ("--log-file", "--write-batch", "--only-write-batch"):
            for value in o.values(opt):
                eff.write(value, f"rsync {opt}")
        if o.has("--remove-source-files"):
            for src in ops[:-1]:
                eff.delete(src, "rsync --remove-source-files", recursive=True)
    _copy_targets(eff, ctx, o, ops, recursive)
    return eff


def _copy_targets(eff: Effects, ctx: Ctx, o: Opts, ops: list[str], recursive: bool) -> None:
    name, from_stdin = ctx.name, ctx.from_stdin
    target_dir = o.values("-t", "--target-directory")
    if name == "install" and o.has("-d", "--directory"):
        for op in ops:
            eff.write(op, name, dynamic=from_stdin)
        return
    no_target_dir = o.has("-T", "--no-target-directory")
    if target_dir:
        dest, sources, into = target_dir[0], ops, True
    elif len(ops) >= 2:
        dest, sources = ops[-1], ops[:-1]
        folders = [not is_dynamic(dest) and os.path.isdir(os.path.join(base, dest))
                   for base in ctx.cwds]
        into = len(sources) > 1 or dest.endswith("/") or (not no_target_dir and any(folders))
        if into and not no_target_dir and not all(folders) and len(sources) == 1 and (
                not dest.endswith("/")):
            eff.write(dest, name, dynamic=from_stdin, recursive=recursive)  # a file elsewhere
    else:
        # one operand: with xargs the rest come from stdin; otherwise the command fails
        for op in ops:
            if name == "mv":
                eff.delete(op, name, dynamic=from_stdin)
            else:
                eff.targets.append(Target(op, "read", name, dynamic=from_stdin or is_dynamic(op)))
        _xargs_tail(eff, ctx)
        return
    for src in sources:
        if name == "mv":
            eff.delete(src, name, dynamic=from_stdin, recursive=recursive)
            eff.targets.append(Target(src, "read", name, dynamic=from_stdin or is_dynamic(src)))
        elif name in ("ln", "link"):
            eff.write(src, name, dynamic=from_stdin)
        else:
            eff.targets.append(Target(src, "read", name, dynamic=from_stdin or is_dynamic(src)))
        if into:
            contents = src.endswith(("/.", "/")) and name not in ("ln", "link") and (
                src.rstrip("/") != "")
            leaf = os.path.basename(os.path.normpath(src)) if not contents else ""
            written = dest if not leaf or leaf in (".", "..") else os.path.join(dest, leaf)
            eff.write(written, name, dynamic=from_stdin or is_dynamic(src), recursive=recursive)
    if not into:
        eff.write(dest, name, dynamic=from_stdin, recursive=recursive)
    _xargs_tail(eff, ctx)


def tee(ctx: Ctx) -> Effects:
    eff = Effects()
    o = getopt(ctx.args, "", ("append", "ignore-interrupts", "output-error"))
    for op in o.operands:
        if op not in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"):
            eff.write(op, "tee", dynamic=ctx.from_stdin)
    return eff


def truncate(ctx: Ctx) -> Effects:
    eff = Effects()
    o = getopt(ctx.args, "s:r:", ("size=", "reference=", "no-create", "io-blocks"))
    for op in o.operands:
        eff.write(op, "truncate", dynamic=ctx.from_stdin)
    for ref in o.values("-r", "--reference"):
        eff.read(ref, "truncate")
    _xargs_tail(eff, ctx)
    return eff


def dd(ctx: Ctx) -> Effects:
    eff = Effects()
    for arg in ctx.args:
        if arg.startswith("of="):
            eff.write(arg[3:], "dd of=")
        elif arg.startswith("if="):
            eff.read(arg[3:], "dd if=")
    _xargs_tail(eff, ctx)
    return eff


def permissions(ctx: Ctx) -> Effects:
    """``chmod``, ``chown``, ``chgrp``, ``chattr``, ``setfacl``."""
    name = ctx.name
    eff = Effects()
    if name == "chattr":
        rest = [a for a in ctx.args if not (a[:1] in "+-=" and len(a) > 1 and a[1:].isalpha())]
        o = getopt(rest, "v:p:")
        ops = o.operands
    elif name == "setfacl":
        o = getopt(ctx.args, "m:x:M:X:", ("modify=", "remove=", "modify-file=", "remove-file=",
                                       "set=", "set-file=", "recursive"))
        ops = o.operands
        for value in o.values("-M", "-X", "--modify-file", "--remove-file", "--set-file"):
            eff.read(value, name)
    else:
        args = ctx.args
        if name == "chmod":  # a mode such as -w or -x is not an option
            args = [a if not (a[:1] == "-" and set(a[1:]) <= set("rwxXstugo")) else "+" + a[1:]
                    for a in args]
        o = getopt(args, "", ("reference=", "from=", "recursive", "changes", "silent", "quiet",
                              "verbose", "dereference", "no-dereference", "preserve-root"))
        ops = o.operands
        if not o.has("--reference") and ops:
            ops = ops[1:]
        for ref in o.values("--reference"):
            eff.read(ref, name)
    recursive = o.has("-R", "--recursive")
    for op in ops:
        eff.write(op, name, dynamic=ctx.from_stdin, recursive=recursive)
    _xargs_tail(eff, ctx)
    return eff


def touch(ctx: Ctx) -> Effects:
    eff = Effects()
    if ctx.name == "touch":
        o = getopt(ctx.args, "d:t:r:", ("date=", "reference=", "time=", "no-create",
                                      "no-dereference"))
        for ref in o.values("-r", "--reference"):
            eff.read(ref, "touch")
    else:  # mkfifo, mknod
        o = getopt(ctx.args, "m:", ("mode=", "context"))
    ops = o.operands[:1] if ctx.name == "mknod" else o.operands
    for op in ops:
        eff.write(op, ctx.name, dynamic=ctx.from_stdin)
    _xargs_tail(eff, ctx)
    return eff


def split(ctx: Ctx) -> Effects:
    """``split [INPUT [PREFIX]]`` and ``csplit FILE PATTERN...`` write ``PREFIX*``."""
    eff = Effects()
    if ctx.name == "split":
        o = getopt(ctx.args, "a:b:C:l:n:t:", ("suffix-length=", "bytes=", "line-bytes=", "lines=",
                                         "number=", "separator=", "additional-suffix=",
                                         "filter=", "numeric-suffixes", "hex-suffixes"))
        if o.has("--filter"):
            eff.cannot_read("split --filter runs a command on every piece")
        inputs, prefix = o.operands[:1], (o.operands[1:2] or ["x"])[0]
    else:
        o = getopt(ctx.args, "f:b:n:", ("prefix=", "suffix-format=", "digits="))
        inputs, prefix = o.operands[:1], (o.values("-f", "--prefix") or ["xx"])[0]
    for path in inputs:
        if path != "-":
            eff.read(path, ctx.name)
    eff.write(prefix + "*", ctx.name)
    return eff


def sponge(ctx: Ctx) -> Effects:
    eff = Effects()
    for op in getopt(ctx.args, "").operands:
        eff.write(op, "sponge")
    return eff


def in_place(ctx: Ctx) -> Effects:
    """``dos2unix``/``unix2dos`` (every file operand is rewritten) and ``yq -i``."""
    eff = Effects()
    if ctx.name == "yq":
        o = getopt(ctx.args, "io:np:I:", ("inplace", "output-format=", "input-format=",
                                        "indent=", "expression=", "from-file="))
        ops = o.operands[1:] if not o.has("--expression", "--from-file") else o.operands
        for op in ops:
            if o.has("-i", "--inplace"):
                eff.write(op, "yq -i")
            else:
                eff.read(op, "yq")
        return eff
    o = getopt(ctx.args, "c:", ("convmode=", "newfile", "oldfile"))
    for op in o.operands:
        eff.write(op, ctx.name, dynamic=ctx.from_stdin)
    return eff


def patch(ctx: Ctx) -> Effects:
    eff = Effects(opaque=True)
    eff.cannot_read(f"{ctx.name} changes the files named inside the patch")
    o = getopt(ctx.args, "p:d:i:o:r:B:D:F:V:Y:z:x:",
               ("directory=", "input=", "output=", "reject-file=", "strip="))
    for value in o.values("-o", "--output", "-r", "--reject-file"):
        eff.write(value, ctx.name)
    for value in o.values("-i", "--input"):
        eff.read(value, ctx.name)
    return eff


MODELS: dict[str, Callable[[Ctx], Effects]] = {
    **dict.fromkeys(("rm", "unlink", "rmdir", "shred", "srm"), remove),
    **dict.fromkeys(("cp", "mv", "ln", "link", "install"), copy_like),
    "tee": tee,
    "truncate": truncate,
    "dd": dd,
    **dict.fromkeys(("chmod", "chown", "chgrp", "chattr", "setfacl"), permissions),
    **dict.fromkeys(("touch", "mkfifo", "mknod"), touch),
    **dict.fromkeys(("split", "csplit"), split),
    "sponge": sponge,
    **dict.fromkeys(("dos2unix", "unix2dos", "yq"), in_place),
    **dict.fromkeys(("patch", "git-apply"), patch),
}
