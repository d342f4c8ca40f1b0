"""Models of common tools: readers (and the options that make some of them write: ``sort
-o``, ``tree -o``, ``uniq IN OUT`` ...), archivers and compressors, network clients and a
few others that write files (``ssh-keygen -f``, ``openssl -out``, ``script FILE``).

What cannot be told from the command line is reported as unreadable: archives extracted
(``tar -x``, ``unzip``: the names are inside the archive), downloads named by the server
(``curl -J``, ``wget -r``), options that run a command (``sort --compress-program``,
``rg --pre``, ``tar --to-command``, ``ssh -o ProxyCommand``).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable

from tether.actors.gatekeeper.security.shell.effects import copy_like
from tether.actors.gatekeeper.security.shell.model import (
    REMOTE,
    SAFE_SINKS,
    Ctx,
    Effects,
    Opts,
    getopt,
    hosts_in,
    url_leaf,
)

#: Commands whose arguments are text, never files or code.
PURE: frozenset[str] = frozenset(
    {"echo", "printf", "true", "false", ":", "test", "[", "[[", "sleep", "basename", "dirname",
     "pwd", "whoami", "id", "uname", "date", "seq", "expr", "yes", "exit", "return", "shift",
     "wait", "nproc", "tty", "arch", "groups", "logname", "printenv", "locale", "uptime",
     "hostname", "type", "which", "help", "jobs", "times", "umask", "ulimit", "getconf",
     "tput", "clear", "cal", "factor", "kill", "disown", "caller", "dirs", "tr", "bc",
     "numfmt", "mktemp", "ps", "pgrep", "free", "df", "stty", "sync", "lscpu", "lsblk",
     "mkdir", "break", "continue", "history", "users", "who", "w", "env", "set", "unset",
     "export", "declare", "typeset", "local", "readonly", "read", "getopts", "shopt",
     "cd", "unalias"}
)

# name -> (short options with values, long options; "=" marks those taking a value)
_READERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cat": ("", ()), "tac": ("s:", ("separator=",)), "rev": ("", ()),
    "head": ("n:c:", ("lines=", "bytes=")),
    "tail": ("n:c:s:", ("lines=", "bytes=", "pid=", "sleep-interval=", "max-unchanged-stats=")),
    "more": ("n:", ()), "nl": ("b:d:f:h:i:l:n:s:v:w:", ()),
    "base64": ("w:", ("wrap=",)), "base32": ("w:", ("wrap=",)), "basenc": ("w:", ("wrap=",)),
    "strings": ("n:t:e:T:", ("bytes=", "radix=", "encoding=", "target=")),
    "od": ("A:j:N:t:S:", ("address-radix=", "skip-bytes=", "read-bytes=", "format=")),
    "hexdump": ("e:f:n:s:", ()), "hd": ("e:f:n:s:", ()),
    "md5sum": ("", ()), "sha1sum": ("", ()), "sha224sum": ("", ()), "sha256sum": ("", ()),
    "sha384sum": ("", ()), "sha512sum": ("", ()), "b2sum": ("l:", ()), "cksum": ("a:l:", ()),
    "sum": ("", ()), "wc": ("", ("files0-from=",)), "cmp": ("i:n:", ()),
    "diff": ("C:U:I:F:x:X:S:W:", ("label=", "to-file=", "from-file=", "tabsize=", "width=",
                                   "exclude=", "exclude-from=", "starting-file=",
                                   "ignore-matching-lines=", "show-function-line=",
                                   "line-format=", "horizon-lines=", "unified", "context")),
    "file": ("m:F:e:P:f:", ("magic-file=", "separator=", "exclude=", "files-from=",
                             "parameter=")),
    "stat": ("c:", ("format=", "printf=")), "readlink": ("", ()),
    "realpath": ("", ("relative-to=", "relative-base=")),
    "du": ("B:d:t:X:", ("block-size=", "max-depth=", "threshold=", "exclude-from=",
                         "exclude=", "time-style=", "time=", "files0-from=")),
    "ls": ("I:T:w:", ("ignore=", "hide=", "block-size=", "format=", "indicator-style=",
                       "quoting-style=", "sort=", "time=", "time-style=", "tabsize=",
                       "width=")),
    "dir": ("I:T:w:", ()), "vdir": ("I:T:w:", ()),
    "cut": ("b:c:d:f:", ("bytes=", "characters=", "delimiter=", "fields=",
                          "output-delimiter=")),
    "column": ("c:s:o:t:N:R:H:W:E:d:r:l:", ("output-separator=", "separator=")),
    "fmt": ("w:p:g:", ("width=", "prefix=", "goal=")), "fold": ("w:", ("width=",)),
    "paste": ("d:", ("delimiters=",)), "join": ("a:e:j:o:t:v:1:2:", ()),
    "comm": ("", ("output-delimiter=",)), "expand": ("t:", ("tabs=",)),
    "unexpand": ("t:", ("tabs=",)), "look": ("t:", ()),
    "zcat": ("", ()), "bzcat": ("", ()), "xzcat": ("", ()), "zstdcat": ("", ()),
    "lzcat": ("", ()), "getfacl": ("", ()), "lsattr": ("", ()), "namei": ("", ()),
    "xmllint": ("", ("xpath=", "output=")), "envsubst": ("", ()),
    "pv": ("L:s:N:i:", ()), "ts": ("", ()),
}
_GREPS = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "ack-grep"})
_ARCHIVERS = frozenset({"7z", "7za", "7zr", "unrar", "rar", "cpio", "pax", "ar", "arj",
                        "lha", "cabextract", "dpkg-deb", "rpm2cpio", "bsdcpio", "unar"})
_COMPRESSORS: dict[str, str] = {
    "gzip": ".gz", "gunzip": ".gz", "pigz": ".gz", "unpigz": ".gz", "bzip2": ".bz2",
    "bunzip2": ".bz2", "pbzip2": ".bz2", "xz": ".xz", "unxz": ".xz", "lzma": ".lzma",
    "unlzma": ".lzma", "zstd": ".zst", "unzstd": ".zst", "lz4": ".lz4", "unlz4": ".lz4",
    "compress": ".Z", "uncompress": ".Z", "brotli": ".br", "lzip": ".lz", "lzop": ".lzo",
}
_STEMS = {".tgz": ".tar", ".taz": ".tar", ".tbz": ".tar", ".tbz2": ".tar", ".txz": ".tar"}
_KEEPS_SOURCE = frozenset({"zstd", "unzstd", "lz4", "unlz4", "brotli"})
_SSH_CODE_OPTION = re.compile(
    r"^\s*(ProxyCommand|LocalCommand|KnownHostsCommand|PermitLocalCommand|Include|Match"
    r"|RemoteCommand)\b", re.IGNORECASE)
#: Database shells, container runtimes and schedulers: they run what the judge does not see.
_UNSEEN = {
    **dict.fromkeys(("sqlite3", "psql", "mysql", "mariadb", "mongo", "mongosh", "redis-cli",
                     "sqlcmd", "cqlsh", "duckdb", "clickhouse-client"),
                    "a database shell runs the commands given to it"),
    **dict.fromkeys(("systemd-run", "at", "batch", "crontab", "nsenter", "machinectl",
                     "lxc-attach", "lxc", "incus", "vagrant", "schroot", "runc", "ctr",
                     "crictl", "chroot"), "it runs commands outside what the judge reads"),
    **dict.fromkeys(("rename", "prename", "file-rename", "perl-rename"),
                    "it renames files by a Perl expression"),
    **dict.fromkeys(("parallel", "rush", "xjobs"), "it runs commands built from its input"),
    **dict.fromkeys(("sysctl", "mount", "umount", "unshare", "insmod", "rmmod", "modprobe",
                     "swapon", "swapoff", "iptables", "ip6tables", "nft"),
                    "it changes kernel or system settings"),
}
_DOCKER_READS = frozenset({"ps", "images", "version", "info", "inspect", "logs", "stats",
                           "top", "history", "search", "events", "port", "diff"})
#: Builders and package managers: they run the project's or a package's own code.
OPAQUE_TOOLS: frozenset[str] = frozenset(
    {"make", "gmake", "bmake", "cmake", "ninja", "meson", "scons", "bazel", "bazelisk",
     "just", "task", "npm", "pnpm", "yarn", "pip", "pip3", "uv", "uvx", "poetry", "pipx",
     "gem", "cargo", "go", "bundle", "composer", "npx", "pnpx", "bunx", "apt", "apt-get",
     "brew", "conda", "mamba", "dnf", "yum", "apk", "pacman", "pytest", "tox", "nox",
     "mvn", "gradle", "rustc", "gcc", "g++", "cc", "clang", "javac", "java", "dotnet",
     "kubectl", "helm", "terraform", "ansible", "ansible-playbook", "nano", "pico", "micro",
     "joe", "mcedit", "ne", "kak", "hx", "code", "mypy", "ruff", "black", "flake8",
     "pylint", "eslint", "prettier", "tsc", "jest", "vitest", "coverage"}
)


def reader(ctx: Ctx) -> Effects:
    short, longs = _READERS[ctx.name]
    o = getopt(ctx.args, short, longs)
    eff = Effects()
    for op in o.operands:
        if op != "-":
            eff.read(op, ctx.name)
    for value in o.values("--files0-from", "--exclude-from", "-X", "--files-from"):
        eff.read(value, ctx.name)
    if ctx.name == "xmllint":
        for value in o.values("--output"):
            eff.write(value, "xmllint --output")
    return eff


def grep(ctx: Ctx) -> Effects:
    name = ctx.name
    eff = Effects()
    if name in ("grep", "egrep", "fgrep", "zgrep"):
        o = getopt(ctx.args, "e:f:m:A:B:C:d:D:", (
            "regexp=", "file=", "max-count=", "after-context=", "before-context=", "context=",
            "directories=", "devices=", "include=", "exclude=", "exclude-from=", "exclude-dir=",
            "label=", "binary-files=", "group-separator=", "recursive",
            "dereference-recursive"))
        recursive = o.has("-r", "-R", "--recursive", "--dereference-recursive")
    else:
        o = getopt(ctx.args, "e:f:g:t:T:m:A:B:C:j:M:r:E:", (
            "regexp=", "file=", "glob=", "iglob=", "type=", "type-not=", "max-count=",
            "after-context=", "before-context=", "context=", "threads=", "max-columns=",
            "replace=", "encoding=", "pre=", "pre-glob=", "type-add=", "ignore-file=",
            "max-depth=", "max-filesize=", "sort=", "sortr=", "pager=", "ignore-dir=",
            "files"))
        recursive = True
        if o.has("--pre", "--pager"):
            eff.cannot_read(f"{name} --pre/--pager runs a command on the files it reads")
    ops = o.operands
    if not o.values("-e", "--regexp", "-f", "--file") and not o.has("--files"):
        ops = ops[1:]
    for op in ops:
        eff.read(op, name, recursive=recursive)
    for value in o.values("-f", "--file", "--exclude-from", "--ignore-file"):
        eff.read(value, name)
    return eff


def text_tool(ctx: Ctx) -> Effects:
    """``sort``, ``shuf``, ``uniq``, ``tree``, ``xxd``, ``iconv``, ``less``, ``bat``, ``jq``:
    readers with options or operands that write."""
    name, args = ctx.name, ctx.args
    eff = Effects()
    outputs: list[str] = []
    if name == "sort":
        o = getopt(args, "o:k:t:S:T:", ("output=", "key=", "field-separator=", "buffer-size=",
                                        "temporary-directory=", "compress-program=",
                                        "files0-from=", "parallel=", "batch-size=",
                                        "random-source=", "sort="))
        outputs = o.values("-o", "--output")
        if o.has("--compress-program"):
            eff.cannot_read("sort --compress-program runs a program")
        inputs = o.operands + o.values("--files0-from", "--random-source")
    elif name == "shuf":
        o = getopt(args, "o:n:i:", ("output=", "head-count=", "input-range=", "random-source=",
                                    "echo"))
        outputs = o.values("-o", "--output")
        inputs = [] if o.has("-e", "--echo") else o.operands
    elif name == "uniq":
        o = getopt(args, "f:s:w:", ("skip-fields=", "skip-chars=", "check-chars=", "group",
                                    "all-repeated"))
        inputs, outputs = o.operands[:1], o.operands[1:2]
    elif name == "tree":
        o = getopt(args, "o:L:P:I:H:T:", ("charset=", "filelimit=", "timefmt=", "sort=",
                                          "fromfile", "output="))
        outputs = o.values("-o", "--output")
        inputs = o.operands
        if o.has("-R"):
            eff.cannot_read("tree -R writes a listing into every folder")
    elif name == "xxd":
        o = getopt(args, "c:g:l:s:o:n:", ())
        inputs, outputs = o.operands[:1], o.operands[1:2]
    elif name == "iconv":
        o = getopt(args, "f:t:o:", ("from-code=", "to-code=", "output="))
        inputs, outputs = o.operands, o.values("-o", "--output")
    elif name == "less":
        plus = [a for a in args if a.startswith("+")]
        o = getopt([a for a in args if not a.startswith("+")], "b:h:j:k:o:O:p:P:t:T:x:y:z:#:D:",
                   ("log-file=", "LOG-FILE=", "lesskey-file=", "pattern=", "prompt=", "tag=",
                    "tag-file=", "shift=", "tabs=", "window=", "buffers="))
        outputs = o.values("-o", "-O", "--log-file", "--LOG-FILE")
        inputs = o.operands
        if plus:
            eff.cannot_read("less runs the commands given with +")
    elif name in ("bat", "batcat"):
        o = getopt(args, "l:H:r:m:", ("language=", "highlight-line=", "line-range=",
                                      "map-syntax=", "style=", "theme=", "pager=", "tabs=",
                                      "wrap=", "terminal-width=", "color=", "paging=",
                                      "decorations=", "file-name="))
        if o.has("--pager"):
            eff.cannot_read("bat --pager runs a command")
        inputs = o.operands
    else:  # jq: --arg NAME VALUE, --rawfile NAME FILE ...; after --args no files
        rest: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("--arg", "--argjson", "--rawfile", "--slurpfile"):
                if arg in ("--rawfile", "--slurpfile") and i + 2 < len(args):
                    eff.read(args[i + 2], "jq")
                i += 3
                continue
            if arg in ("--args", "--jsonargs"):
                break
            rest.append(arg)
            i += 1
        o = getopt(rest, "f:L:", ("from-file=", "indent="))
        files = o.values("-f", "--from-file")
        inputs = (o.operands if files else o.operands[1:]) + files
    for path in inputs:
        if path != "-":
            eff.read(path, name)
    for path in outputs:
        if path not in SAFE_SINKS:
            eff.write(path, f"{name} output")
    return eff


def tar(ctx: Ctx) -> Effects:
    args = list(ctx.args)
    if args and not args[0].startswith("-") and re.fullmatch(r"[A-Za-z]+", args[0]):
        letters, rest, expanded = args[0], args[1:], []
        for letter in letters:
            expanded.append("-" + letter)
            if letter in "fCTXbNLKgVHIF" and rest:
                expanded.append(rest.pop(0))
        args = expanded + rest
    o = getopt(args, "f:C:T:X:b:N:L:K:g:V:H:I:F:", (
        "file=", "directory=", "files-from=", "exclude-from=", "exclude=", "blocking-factor=",
        "newer=", "after-date=", "tape-length=", "starting-file=", "listed-incremental=",
        "label=", "format=", "use-compress-program=", "info-script=", "new-volume-script=",
        "to-command=", "checkpoint-action=", "rsh-command=", "transform=", "xform=",
        "owner=", "group=", "mode=", "mtime=", "strip-components=", "suffix=", "extract",
        "get", "create", "list", "append", "update", "catenate", "concatenate", "delete",
        "diff", "compare", "remove-files", "to-stdout"))
    eff = Effects()
    if o.has("-I", "-F", "--use-compress-program", "--info-script", "--new-volume-script",
             "--to-command", "--checkpoint-action", "--rsh-command"):
        eff.cannot_read("tar runs a command given in its options")
    archive = (o.values("-f", "--file") or ["-"])[-1]
    base = (o.values("-C", "--directory") or [""])[-1]
    extract = o.has("-x", "--extract", "--get")
    if extract and not o.has("-O", "--to-stdout"):
        eff.cannot_read("tar -x writes the files named inside the archive")
    if archive not in SAFE_SINKS:
        changes = o.has("-c", "--create", "-r", "--append", "-u", "--update", "-A",
                        "--catenate", "--concatenate", "--delete")
        if changes:
            eff.write(archive, "tar -f")
        else:
            eff.read(archive, "tar -f")
    if o.has("-c", "--create", "-r", "--append", "-u", "--update"):
        for op in o.operands:
            eff.read(os.path.join(base, op) if base else op, "tar", recursive=True)
        if o.has("--remove-files"):
            eff.cannot_read("tar --remove-files deletes what it archived")
            for op in o.operands:
                eff.delete(os.path.join(base, op) if base else op, "tar --remove-files",
                           recursive=True)
    for value in o.values("-T", "--files-from", "-X", "--exclude-from"):
        eff.read(value, "tar")
    return eff


def zip_tool(ctx: Ctx) -> Effects:
    eff = Effects()
    if ctx.name == "unzip":
        o = getopt(ctx.args, "d:x:P:", ())
        if not o.has("-l", "-t", "-v", "-z", "-Z", "-p", "-c"):
            eff.cannot_read("unzip writes the files named inside the archive")
        for op in o.operands[:1]:
            eff.read(op, "unzip")
        return eff
    o = getopt(ctx.args, "b:n:t:x:i:O:P:s:", ("temp-path=", "suffixes=", "output-file=",
                                              "password=", "split-size=", "unzip-command=",
                                              "move", "test"))
    if o.has("-T", "--test", "--unzip-command") or any(a == "-TT" for a in ctx.args):
        eff.cannot_read("zip -T/-TT runs a command to test the archive")
    if o.has("-m", "--move"):
        eff.cannot_read("zip -m deletes the files it archives")
    recursive = o.has("-r")
    ops = o.operands
    for op in ops[:1] + o.values("-O", "--output-file"):
        eff.write(op if op.endswith(".zip") or "." in os.path.basename(op) else op + ".zip",
                  "zip")
    for op in ops[1:]:
        eff.read(op, "zip", recursive=recursive)
    return eff


def compressor(ctx: Ctx) -> Effects:
    name = ctx.name
    eff = Effects()
    o = getopt(ctx.args, "S:b:T:", ("suffix=", "stdout", "to-stdout", "decompress",
                                    "uncompress", "keep", "test", "list", "rm", "recursive",
                                    "output=", "threads="))
    if o.has("-c", "--stdout", "--to-stdout", "-t", "--test", "-l", "--list") or not o.operands:
        for op in o.operands:
            eff.read(op, name)
        return eff
    decompress = name.startswith("un") or name == "gunzip" or o.has("-d", "--decompress",
                                                                       "--uncompress")
    suffix = (o.values("-S", "--suffix") or [_COMPRESSORS[name]])[-1]
    keep = o.has("-k", "--keep") or (name in _KEEPS_SOURCE and not o.has("--rm"))
    recursive = o.has("-r", "--recursive")
    outputs = o.values("-o", "--output")
    for op in o.operands:
        eff.read(op, name, recursive=recursive)
        if not keep:
            eff.delete(op, name, recursive=recursive)
        if outputs or recursive:
            eff.write(op, name, recursive=True)
            continue
        if not decompress:
            eff.write(op + suffix, name)
            continue
        stem = next((op[: -len(s)] + _STEMS.get(s, "") for s in (suffix, *_STEMS)
                     if op.endswith(s) and len(op) > len(s)), None)
        if stem is None:
            eff.cannot_read(f"{name} would write a name it makes up from {op}")
        else:
            eff.write(stem, name)
    for out in outputs:
        eff.write(out, name)
    return eff


def _ssh_checks(eff: Effects, o: Opts, name: str) -> None:
    if any(_SSH_CODE_OPTION.match(v) for v in o.values("-o")) or o.has("-F"):
        eff.cannot_read(f"{name} options name a command or a configuration to run")
    if name == "scp" and o.has("-S"):
        eff.cannot_read("scp -S runs a program instead of ssh")


def network(ctx: Ctx) -> Effects:
    name, args = ctx.name, ctx.args
    eff = Effects()
    if name in ("scp", "rsync"):
        o = getopt(args, "P:p:i:o:F:e:c:l:S:J:B:f:T:M:", ("rsh=", "exclude=", "include=",
                                                        "port=", "rsync-path=", "filter="))
        remote = [op for op in o.operands if REMOTE.match(op)]
        if name == "rsync" and not remote:
            return copy_like(ctx)
        _ssh_checks(eff, o, name)
        if o.has("-e", "--rsh", "--rsync-path") and name == "rsync":
            eff.cannot_read("rsync -e/--rsync-path runs a command")
        ops = o.operands
        eff.hosts.extend(m.group(1) for op in ops if (m := REMOTE.match(op)))
        if ops and not REMOTE.match(ops[-1]):
            eff.write(ops[-1], name, recursive=True, dynamic=ctx.from_stdin)
        for op in ops[:-1]:
            if not REMOTE.match(op):
                eff.read(op, name)
        return eff
    o = getopt(args, "p:i:o:F:l:e:c:w:s:P:J:L:R:D:W:b:q:E:O:S:m:Q:", ())
    _ssh_checks(eff, o, name)
    if o.operands:
        eff.hosts.append(o.operands[0].split("@")[-1])
    eff.hosts.extend(hosts_in(args))
    for log in o.values("-E") if name == "ssh" else []:
        eff.write(log, "ssh -E")
    return eff


_CURL_SHORT = "o:d:F:H:X:u:A:e:b:c:T:x:m:w:K:E:r:z:C:Y:y:D:U:P:Q:t:"
_CURL_LONG = (
    "output=", "output-dir=", "data=", "data-binary=", "data-raw=", "data-urlencode=",
    "data-ascii=", "form=", "header=", "request=", "user=", "upload-file=", "proxy=",
    "max-time=", "cookie=", "cookie-jar=", "config=", "connect-timeout=", "retry=",
    "user-agent=", "referer=", "cert=", "key=", "json=", "dump-header=", "trace=",
    "trace-ascii=", "stderr=", "libcurl=", "etag-save=", "etag-compare=", "hsts=", "alt-svc=",
    "write-out=", "remote-name", "remote-name-all", "remote-header-name", "url=",
)


def download(ctx: Ctx) -> Effects:
    """``curl``, ``wget``, ``aria2c``, ``http``/``https`` (HTTPie)."""
    name, args = ctx.name, ctx.args
    eff = Effects()
    eff.hosts.extend(hosts_in(args))
    if name == "curl":
        o = getopt(args, _CURL_SHORT, _CURL_LONG)
        eff.hosts.extend(a for a in o.operands if "://" not in a)
        prefix = (o.values("--output-dir") or [""])[-1]
        for value in o.values("-o", "--output"):
            if value not in SAFE_SINKS:
                eff.write(os.path.join(prefix, value) if prefix else value, "curl -o")
        if o.has("-O", "--remote-name", "--remote-name-all"):
            for url in o.operands + o.values("--url"):
                leaf = url_leaf(url)
                eff.write(os.path.join(prefix, leaf) if prefix else leaf, "curl -O")
        for opt in ("-D", "--dump-header", "-c", "--cookie-jar", "--trace", "--trace-ascii",
                    "--stderr", "--libcurl", "--etag-save", "--hsts", "--alt-svc"):
            for value in o.values(opt):
                if value not in SAFE_SINKS and value != "%":
                    eff.write(value, f"curl {opt}")
        if o.has("-J", "--remote-header-name"):
            eff.cannot_read("curl -J saves under a name the server chooses")
        if o.has("-K", "--config"):
            eff.cannot_read("curl -K reads more options from a file")
        return eff
    if name == "wget":
        o = getopt(args, "O:o:a:i:B:e:P:t:T:w:U:Y:Q:D:X:I:l:A:R:n:", (
            "output-document=", "output-file=", "append-output=", "input-file=", "execute=",
            "directory-prefix=", "post-file=", "body-file=", "config=", "use-askpass=",
            "post-data=", "header=", "user=", "password=", "recursive", "mirror",
            "page-requisites", "force-directories", "content-disposition",
            "trust-server-names"))
        if o.has("-e", "--execute", "--config", "--use-askpass", "-i", "--input-file"):
            eff.cannot_read("wget -e/--config/-i reads commands or addresses it was not given")
        if o.has("-r", "--recursive", "-m", "--mirror", "-p", "--page-requisites", "-x",
                 "--force-directories", "--content-disposition", "--trust-server-names"):
            eff.cannot_read("wget saves files under names the server chooses")
        for value in o.values("-o", "--output-file", "-a", "--append-output"):
            eff.write(value, "wget -o")
        outputs = o.values("-O", "--output-document")
        for value in outputs:
            if value not in SAFE_SINKS:
                eff.write(value, "wget -O")
        if not outputs:
            prefix = (o.values("-P", "--directory-prefix") or [""])[-1]
            for url in o.operands:
                leaf = url_leaf(url)
                eff.write(os.path.join(prefix, leaf) if prefix else leaf, "wget")
        return eff
    if name == "aria2c":
        eff.cannot_read("aria2c saves files under names the server chooses")
        return eff
    o = getopt(args, "o:a:", ("output=", "session=", "download", "auth="))
    if o.has("-d", "--download"):
        eff.cannot_read(f"{name} --download saves under a name the server chooses")
    for value in o.values("-o", "--output", "--session"):
        eff.write(value, name)
    return eff


def keys(ctx: Ctx) -> Effects:
    """``ssh-keygen``, ``openssl``, ``gpg``: key and certificate files."""
    name, args = ctx.name, ctx.args
    eff = Effects()
    if name == "ssh-keygen":
        o = getopt(args, "f:b:t:C:N:P:E:F:R:O:n:V:z:I:Z:a:D:G:K:m:M:r:s:S:T:w:Y:", ())
        files = o.values("-f")
        if o.has("-R", "-H"):
            eff.cannot_read("ssh-keygen -R/-H rewrites known_hosts")
        reads_only = o.has("-l", "-y", "-F", "-B", "-e", "-i", "-Q", "-L")
        for path in files:
            if reads_only:
                eff.read(path, name)
            else:
                eff.write(path, "ssh-keygen -f")
                eff.write(path + ".pub", "ssh-keygen -f")
        if not files and not reads_only:
            eff.cannot_read("ssh-keygen writes a key under ~/.ssh")
        return eff
    if name == "openssl":
        for flag, value in itertools.pairwise(args):
            if flag in ("-out", "-keyout", "-certout", "-sigout"):
                eff.write(value, f"openssl {flag}")
            elif flag in ("-in", "-inkey", "-key", "-signkey", "-CAkey", "-config"):
                eff.read(value, f"openssl {flag}")
            elif flag in ("-engine", "-provider-path", "-provider"):
                eff.cannot_read("openssl -engine/-provider loads a library")
        return eff
    o = getopt(args, "o:r:u:", ("output=", "recipient=", "local-user=", "exec-path=",
                                 "homedir="))
    for value in o.values("-o", "--output"):
        if value not in SAFE_SINKS:
            eff.write(value, f"{name} --output")
    if o.has("--exec-path"):
        eff.cannot_read(f"{name} --exec-path runs other programs")
    return eff


def script(ctx: Ctx) -> Effects:
    eff = Effects()
    o = getopt(ctx.args, "c:E:o:T:I:O:B:m:t::", ("command=", "log-out=", "log-in=",
                                                 "log-io=", "log-timing=", "timing"))
    for text in o.values("-c", "--command"):
        ctx.child(text)
    for value in o.values("-T", "-I", "-O", "-B", "--log-out", "--log-in", "--log-io",
                          "--log-timing", "-t"):
        eff.write(value, "script")
    for op in o.operands[:1] or (["typescript"] if not o.has("-O", "--log-out") else []):
        if op not in SAFE_SINKS:
            eff.write(op, "script")
    return eff


def unseen(ctx: Ctx) -> Effects:
    eff = Effects(opaque=True)
    if ctx.name in ("docker", "podman", "nerdctl"):
        sub = next((a for a in ctx.args if not a.startswith("-")), "")
        if sub in _DOCKER_READS or not sub:
            return eff
        eff.cannot_read(f"{ctx.name} {sub} runs a container")
        return eff
    eff.cannot_read(f"{ctx.name}: {_UNSEEN[ctx.name]}")
    if ctx.name == "sqlite3":
        ops = getopt(ctx.args, "A:", ("cmd=", "separator=", "newline=", "nullvalue=")).operands
        for op in ops[:1]:
            eff.write(op, "sqlite3")
    return eff


def archiver(ctx: Ctx) -> Effects:
    eff = Effects(opaque=True)
    eff.cannot_read(f"{ctx.name} reads or writes files named inside an archive")
    return eff


def opaque_tool(ctx: Ctx) -> Effects:
    return Effects(opaque=True)


def builder(ctx: Ctx) -> Effects:
    """``make`` and friends run the build files' commands (tier 1 escalates that); a build
    file read from a stream or code given with ``--eval`` is unreadable outright."""
    eff = Effects(opaque=True)
    o = getopt(ctx.args, "f:C:I:j:l:o:W:", ("file=", "makefile=", "directory=",
                                             "include-dir=", "jobs=", "eval=", "old-file=",
                                             "what-if=", "assume-old=", "assume-new="))
    files = o.values("-f", "--file", "--makefile")
    if o.has("--eval") or any(re.match(r"^(-|/dev/(stdin|fd/\d+)|/proc/)", f) for f in files):
        eff.cannot_read(f"{ctx.name} runs rules read from a stream or given inline")
    return eff


def manual(ctx: Ctx) -> Effects:
    o = getopt(ctx.args, "P:H::M:m:S:s:C:l", ("pager=", "html", "manpath=", "config-file="))
    eff = Effects()
    if o.has("-P", "--pager", "-H", "--html"):
        eff.cannot_read("man -P/-H runs the program it is given")
    return eff


MODELS: dict[str, Callable[[Ctx], Effects]] = {
    **dict.fromkeys(_READERS, reader),
    **dict.fromkeys(_GREPS, grep),
    **dict.fromkeys(("sort", "shuf", "uniq", "tree", "xxd", "iconv", "less", "bat", "batcat",
                     "jq"), text_tool),
    **dict.fromkeys(("tar", "bsdtar", "gtar"), tar),
    **dict.fromkeys(("zip", "unzip"), zip_tool),
    **dict.fromkeys(_COMPRESSORS, compressor),
    **dict.fromkeys(_ARCHIVERS, archiver),
    **dict.fromkeys(("scp", "rsync", "ssh", "sftp", "nc", "ncat", "netcat", "telnet", "socat",
                     "ftp"), network),
    **dict.fromkeys(("curl", "wget", "aria2c", "http", "https"), download),
    **dict.fromkeys(("ssh-keygen", "openssl", "gpg", "gpg2"), keys),
    "script": script,
    **dict.fromkeys((*_UNSEEN, "docker", "podman", "nerdctl"), unseen),
    **dict.fromkeys(OPAQUE_TOOLS, opaque_tool),
    **dict.fromkeys(("make", "gmake", "bmake"), builder),
    "man": manual,
}
