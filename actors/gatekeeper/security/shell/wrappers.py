"""Wrappers that run another command (``env``, ``timeout``, ``nice``, ``nohup``, ``sudo``,
``xargs``, ``flock``, ``watch``, ``strace`` ...), seen through to the command they run, and
the environment variables whose values make programs run other code.

:func:`strip` removes the wrappers in front of a command and reports what they do
themselves: files they write (``time -o``, ``strace -o``, ``flock FILE``, ``nohup.out``),
assignments they make (``env NAME=VALUE``), a folder they change to (``env -C``), text
they hand to a shell (``env -S``, ``watch``, ``flock -c``, ``su -c``) and what makes them
unreadable (``chroot``, ``unshare --root``). :func:`variable_risk` says why assigning a
variable is unreadable (``PATH``, ``LD_PRELOAD``, ``BASH_ENV``, ``GIT_DIR`` ...).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from tether.actors.gatekeeper.security.shell.lexer import Word
from tether.actors.gatekeeper.security.shell.model import Effects, Opts, command_name, getopt

# wrapper -> (short options with values, long options; "=" marks those taking a value,
#             positional words before the command)
_SPECS: dict[str, tuple[str, tuple[str, ...], int]] = {
    "sudo": ("u:g:C:D:h:p:r:t:U:T:a:", ("user=", "group=", "chdir=", "host=", "prompt=",
                                         "role=", "type=", "other-user=", "command-timeout=",
                                         "close-from="), 0),
    "doas": ("u:C:", (), 0),
    "pkexec": ("", ("user=",), 0),
    "nice": ("n:", ("adjustment=",), 0),
    "ionice": ("c:n:p:P:u:", ("class=", "classdata="), 0),
    "timeout": ("s:k:", ("signal=", "kill-after="), 1),
    "stdbuf": ("i:o:e:", ("input=", "output=", "error="), 0),
    "nohup": ("", (), 0),
    "time": ("f:o:", ("format=", "output="), 0),
    "builtin": ("", (), 0),
    "exec": ("a:", (), 0),
    "setsid": ("", (), 0),
    "unbuffer": ("", (), 0),
    "busybox": ("", (), 0),
    "toybox": ("", (), 0),
    "chronic": ("", (), 0),
    "caffeinate": ("w:t:", (), 0),
    "flock": ("w:E:c:", ("timeout=", "conflict-exit-code=", "command="), 1),
    "watch": ("n:d::", ("interval=", "differences"), 0),
    "strace": ("o:e:E:p:s:u:P:I:a:X:O:S:b:", ("output=",), 0),
    "ltrace": ("o:e:E:p:s:u:a:n:l:A:D:F:", ("output=",), 0),
    "valgrind": ("", ("log-file=", "xml-file="), 0),
    "fakeroot": ("i:s:", ("lib=", "faked="), 0),
    "faketime": ("f", (), 1),
    "torsocks": ("u:p:a:P:", (), 0),
    "proxychains": ("f:", (), 0),
    "proxychains4": ("f:", (), 0),
    "catchsegv": ("", (), 0),
    "dbus-run-session": ("", ("config-file=", "dbus-daemon="), 0),
    "xvfb-run": ("n:s:f:e:p:w:", ("server-num=", "server-args=", "auth-file=",
                                   "error-file="), 0),
    "unshare": ("R:w:S:G:", ("root=", "wd=", "setuid=", "setgid=", "propagation=",
                              "setgroups=", "map-user=", "map-group=", "kill-child"), 0),
    "chrt": ("", (), 1),
    "taskset": ("", (), 1),
    "numactl": ("N:m:C:c:p:P:i:l", ("cpunodebind=", "membind=", "physcpubind=",
                                      "preferred=", "interleave="), 0),
    "cgexec": ("g:", (), 0),
    "chroot": ("", ("userspec=", "groups="), 1),
    "sg": ("", (), 1),
    "runuser": ("u:g:G:c:s:", ("user=", "group=", "command=", "shell="), 0),
    "su": ("c:s:g:G:", ("command=", "shell=", "group="), 0),
    "xargs": ("I:i::n:d:a:P:L:l::s:E:e::", ("arg-file=", "delimiter=", "max-args=",
                                           "max-procs=", "max-lines=", "max-chars=",
                                           "replace=", "eof=", "process-slot-var="), 0),
    "command": ("", (), 0),
    "env": ("u:C:S:", ("unset=", "chdir=", "split-string=", "block-signal",
                       "default-signal", "ignore-signal"), 0),
}
WRAPPERS: frozenset[str] = frozenset(_SPECS)
_NETWORK_WRAPPERS = frozenset({"torsocks", "proxychains", "proxychains4"})
_COMMAND_VARS = frozenset({"PAGER", "GIT_PAGER", "MANPAGER", "EDITOR", "VISUAL", "GIT_EDITOR",
                           "GIT_SEQUENCE_EDITOR", "SYSTEMD_PAGER", "BROWSER", "SHELL"})
_RISKY_VARS = frozenset(
    {"PATH", "BASH_ENV", "ENV", "CDPATH", "IFS", "PROMPT_COMMAND", "PS4", "SHELLOPTS",
     "BASHOPTS", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB",
     "NODE_OPTIONS", "LESSOPEN", "LESSCLOSE", "SSH_ASKPASS", "SUDO_ASKPASS", "PYTHONSTARTUP",
     "PYTHONHOME", "GCONV_PATH", "HOME", "ZDOTDIR", "XDG_CONFIG_HOME", "OPENSSL_CONF",
     "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "EXINIT", "VIMINIT", "MYVIMRC",
     "CURL_HOME", "WGETRC", "EMACSLOADPATH", "TERMINFO", "HOSTALIASES", "GLOBIGNORE"}
)
_RISKY_PREFIXES = ("LD_", "DYLD_", "GIT_", "BASH_FUNC_", "NPM_CONFIG_", "npm_config_")
_SAFE_GIT_VARS = frozenset({"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
                           "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE",
                           "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS", "GIT_FLUSH",
                           "GIT_ADVICE"})
_KEEP = object()


@dataclass
class Stripped:
    """The command behind the wrappers, and what the wrappers do themselves."""

    argv: list[str]
    words: list[Word | None]
    wrappers: list[str] = field(default_factory=list)
    from_stdin: bool = False
    lookup_only: bool = False
    effects: Effects = field(default_factory=Effects)
    assignments: list[tuple[str, str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    cwd: object = _KEEP

    @property
    def changes_cwd(self) -> bool:
        return self.cwd is not _KEEP


def strip(argv: list[str], words: list[Word | None]) -> Stripped:
    """Remove the wrappers in front of ``argv`` (``words`` aligned with it)."""
    out = Stripped(list(argv), list(words))
    while out.argv:
        name = command_name(out.argv[0])
        if name not in _SPECS:
            break
        out.wrappers.append(name)
        rest, rest_words = out.argv[1:], out.words[1:]
        if name == "command":
            o = getopt(rest, "", (), permute=False)
            if o.has("-v", "-V"):
                out.lookup_only = True
                out.argv, out.words = [], []
                return out
        short, longs, positional = _SPECS[name]
        o = getopt(rest, short, longs, permute=name in ("su", "runuser"))
        taken = len(rest) - len(o.operands)
        _wrapper_effects(name, o.opts, o.operands, out)
        if name == "env":
            while o.operands and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", o.operands[0]):
                key, _, value = o.operands[0].partition("=")
                out.assignments.append((key, value))
                o.operands = o.operands[1:]
                taken += 1
            splits = o.values("-S", "--split-string")
            if splits:
                out.texts.append(" ".join([*splits, shlex.join(o.operands)]))
                out.argv, out.words = [], []
                return out
        if name in ("watch", "su", "runuser", "sg", "flock"):
            text = _shell_text(name, o)
            if text is not None:
                out.texts.append(text)
                out.argv, out.words = [], []
                return out
        skip = min(positional, len(o.operands)) if not (
            name in ("chrt", "taskset") and o.has("-p")) else len(o.operands)
        if name == "flock" and o.operands and not o.operands[0].isdigit():
            out.effects.write(o.operands[0], "flock")
        if name == "chroot":
            out.effects.cannot_read("chroot runs the command with another root folder")
            out.cwd = None
        if name == "unshare":
            out.effects.cannot_read("unshare runs the command in new namespaces, where it "
                                    "may mount and change kernel settings")
        taken += skip
        out.argv, out.words = rest[taken:], rest_words[taken:]
        if name == "xargs":
            out.from_stdin = True
            for path in o.values("-a", "--arg-file"):
                out.effects.read(path, "xargs -a")
            if not out.argv:
                out.argv, out.words = ["echo"], [None]
        if name == "nohup":
            out.effects.write("nohup.out", "nohup")
    return out


def _wrapper_effects(name: str, opts: list[tuple[str, str | None]], operands: list[str],
                     out: Stripped) -> None:
    eff = out.effects
    for opt, value in opts:
        if value is None:
            continue
        if (name, opt) in (("time", "-o"), ("time", "--output"), ("strace", "-o"),
                           ("strace", "--output"), ("ltrace", "-o"), ("ltrace", "--output"),
                           ("valgrind", "--log-file"), ("valgrind", "--xml-file"),
                           ("fakeroot", "-s")):
            eff.write(value, f"{name} {opt}")
        elif name in ("strace", "ltrace") and opt == "-E" and "=" in value:
            key, _, val = value.partition("=")
            out.assignments.append((key, val))
        elif (name, opt) in (("env", "-C"), ("env", "--chdir"), ("sudo", "-D"),
                             ("sudo", "--chdir"), ("unshare", "-w"), ("unshare", "--wd")):
            out.cwd = value
        elif (name, opt) in (("unshare", "-R"), ("unshare", "--root"),
                             ("dbus-run-session", "--dbus-daemon")):
            eff.cannot_read(f"{name} {opt} changes the root folder or runs another program")
    if name in ("sudo", "doas", "su", "runuser") and any(o in ("-i", "-s", "--login", "--shell")
                                                         for o, _ in opts) and not operands:
        eff.cannot_read(f"{name} starts a shell that reads its standard input")
    if name in _NETWORK_WRAPPERS:
        eff.classes.add("network")


def _shell_text(name: str, o: Opts) -> str | None:
    """The text ``watch``, ``su -c``, ``runuser -c``, ``sg -c``, ``flock -c`` hand to a
    shell, or None when they exec a command directly."""
    if name == "watch":
        return None if o.has("-x", "--exec") else " ".join(o.operands)
    texts = o.values("-c", "--command")
    if texts:
        return texts[-1]
    ops = o.operands
    if name in ("sg", "flock") and ops[1:2] in (["-c"], ["--command"]) and len(ops) > 2:
        return ops[2]
    if name == "sg" and len(ops) > 1:
        return " ".join(ops[1:])
    return None


def variable_risk(name: str) -> str | None:
    """Why assigning ``name`` makes programs run code or find files elsewhere (None when it
    does not); command-valued variables (``PAGER``, ``EDITOR``) are judged by their value,
    see :func:`command_variable`."""
    if name in _COMMAND_VARS:
        return None
    if name in _RISKY_VARS or (name.startswith(_RISKY_PREFIXES) and name not in _SAFE_GIT_VARS):
        return f"setting {name} changes which programs or files other commands use"
    return None


def command_variable(name: str) -> bool:
    """True for variables whose value is a command some program runs (``GIT_PAGER``)."""
    return name in _COMMAND_VARS

