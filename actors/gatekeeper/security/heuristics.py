"""Tier 1: heuristics for dangerous commands and content.

:func:`scan` returns every :class:`Finding` for an enriched action; each has a ``name``
(the heuristic), a ``verdict`` (``deny`` or ``escalate``) and a one-sentence ``reason``.
An empty result means the heuristics saw nothing wrong. The heuristics:

* ``pipe_to_shell`` (deny): a download (curl, wget ...) piped into a shell or interpreter,
  or fed to one through ``<(...)``/``$(...)``;
* ``broad_delete`` (deny): a recursive delete of ``/``, ``~``, ``$HOME``, ``..``, ``*``,
  ``.``, the workspace itself, a folder above it or a system folder;
* ``permission_blast`` (deny, or escalate for one file): ``chmod -R 777``, world-writable
  modes or recursive ``chown`` on broad paths;
* ``credential_read`` (deny for keys, cloud credentials, keychains and ``/etc/shadow``;
  escalate for ``.env``, ``.netrc`` and tool tokens);
* ``exfiltration`` (escalate; deny for credential files): uploading files with curl
  ``-d @file``/``-F``/``-T``, wget ``--post-file``, scp/rsync to a host, or data into nc/ssh;
* ``reverse_shell`` (deny): ``nc -e``, ``/dev/tcp/`` or ``/dev/udp/`` however it is quoted
  (``/dev/t""cp``, ``$'\x2fdev/tcp'``, a variable holding it), ``socat ... exec:``;
* ``obfuscated_execution`` (deny): decoded or hex-escaped text executed (``base64 -d | sh``,
  ``eval $(... base64 -d)``, ``python -c`` with exec and base64, ``$'\\x..'`` escapes);
* ``inline_code_writes`` (escalate): ``python -c``/``perl -e``/``node -e`` code that writes
  or deletes files, which protection cannot see into;
* ``dangerous_content`` (escalate): written file content holding a pipe-to-shell download
  or decoded execution;
* ``runs_project_code`` (escalate): ``make``, ``cmake``, ``ninja`` run the commands of the
  project's build files;
* ``installs_packages`` (escalate): ``pip install``, ``npm install``, ``npx`` ... run the
  packages' install scripts and reach the network.

The last two escalate "unless the policy allows": an explicit tier-0 allow rule for the
command outweighs them (see :mod:`actors.gatekeeper.security.pipeline`).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from typing import Literal

import msgspec

from tether.actors.gatekeeper.security.action import EnrichedAction, PathRef
from tether.actors.gatekeeper.security.shell import INTERPRETERS, SHELLS, ShellCommand

__all__ = ["Finding", "scan"]


class Finding(msgspec.Struct, frozen=True):
    """One heuristic that fired."""

    name: str
    verdict: Literal["deny", "escalate"]
    reason: str


_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https"})
_DECODERS = frozenset(
    {
        "base64",
        "base32",
        "xxd",
        "openssl",
        "uudecode",
        "rev",
        "gunzip",
        "zcat",
        "printf",
        "echo",
        "tr",
    }
)
_SYSTEM_DIRS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/opt",
        "/proc",
        "/root",
        "/sbin",
        "/srv",
        "/sys",
        "/usr",
        "/var",
        "/tmp",
        "/Users",
        "/System",
        "/Library",
        "/Applications",
    }
)

_DENY_CREDENTIALS = re.compile(
    r"(^|/)\.ssh(/|$)|(^|/)id_(rsa|dsa|ecdsa|ed25519)(\.pub)?$|(^|/)\.aws/(credentials|config)$"
    r"|(^|/)\.gnupg(/|$)|\.keychain(-db)?$|(^|/)Keychains(/|$)|^/etc/(shadow|gshadow|sudoers)"
    r"|(^|/)\.config/gcloud(/|$)|(^|/)\.azure(/|$)|\.(pem|p12|pfx|key)$|(^|/)\.kube/config$",
    re.IGNORECASE,
)
_ESCALATE_CREDENTIALS = re.compile(
    r"(^|/)\.env(\.[\w-]+)?$|(^|/)\.netrc$|(^|/)_netrc$|(^|/)\.pgpass$|(^|/)\.git-credentials$"
    r"|(^|/)\.npmrc$|(^|/)\.pypirc$|(^|/)\.docker/config\.json$|(^|/)credentials\.json$"
    r"|(^|/)\.vault-token$|(^|/)secrets?\.(ya?ml|json|toml)$",
    re.IGNORECASE,
)
_SAFE_ENV = re.compile(r"\.env\.(example|sample|template|dist)$", re.IGNORECASE)
_KEYCHAIN_CMD = re.compile(
    r"\bsecurity\s+(find-(generic|internet)-password|dump-keychain|export)\b"
    r"|\bsecret-tool\s+lookup\b|\bkeyctl\s+(print|read|pipe)\b"
)
_DECODE_TEXT = re.compile(
    r"base64\s+(-d|--decode|-D)\b|\bb64decode\b|\bbase64\.b\w*decode|\batob\s*\(|\bxxd\s+-r"
    r"|\bcodecs\.decode|\bfromhex\b|\bBuffer\.from\([^)]*base64|\bunhexlify\b|\bdecode\(\s*['\"]"
    r"(base64|hex|rot13)",
)
_HEX_ESCAPES = re.compile(r"(\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}){2,}")
_EXEC_TEXT = re.compile(r"\b(exec|eval|compile|__import__|system|popen|spawn|execSync)\s*\(")
_INLINE_WRITES = re.compile(
    r"open\([^)]*['\"][wax+]|\.write_(text|bytes)\(|\bos\.(remove|unlink|rename|replace|"
    r"rmdir|chmod|symlink|link)\b|\bshutil\.|\.unlink\(|\bfs\.(write|append|unlink|rm|rename|"
    r"copy|symlink)\w*|\.(writeFile|appendFile|unlink|rm|rename|copyFile)(Sync)?\("
    r"|\bunlink\s*\(|\brename\s*\(|\bFile\.(write|delete)|>\s*['\"]?\w"
)
_PIPE_TO_SHELL_TEXT = re.compile(
    r"\b(curl|wget)\b[^|\n]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b"
    r"|\b(ba|z|da|k)?sh\s+<\(\s*(curl|wget)\b|\$\(\s*(curl|wget)\b[^)]*\)\s*\"?\s*$"
    r"|\b(source|\.)\s+<\(\s*(curl|wget)\b|\b(ba|z|da|k)?sh\s+-c\s+\S*\$\(\s*(curl|wget)\b"
)


def _finding(name: str, verdict: Literal["deny", "escalate"], reason: str) -> Finding:
    return Finding(name, verdict, reason)


def scan(action: EnrichedAction, home: str | None = None) -> tuple[Finding, ...]:
    """Run every heuristic on ``action`` (``home`` is what ``~`` means; default: this
    process's home). Never raises; the result is in heuristic order, duplicates removed."""
    home_dir = home if home is not None else os.path.expanduser("~")
    findings: list[Finding] = []
    commands = [c for c in action.commands if c.argv]
    findings.extend(_pipe_to_shell(commands, action.command or ""))
    findings.extend(_broad_delete(action, home_dir))
    findings.extend(_permission_blast(action, commands, home_dir))
    findings.extend(_credential_read(action, commands))
    findings.extend(_exfiltration(commands))
    findings.extend(_reverse_shell(commands, action.command or ""))
    findings.extend(_obfuscated(commands, action.command or ""))
    findings.extend(_inline_writes(commands))
    findings.extend(_content(action))
    findings.extend(_project_code(commands))
    return tuple(dict.fromkeys(findings))


def _pipelines(commands: list[ShellCommand]) -> dict[int, list[ShellCommand]]:
    groups: dict[int, list[ShellCommand]] = {}
    for cmd in commands:
        groups.setdefault(cmd.pipeline, []).append(cmd)
    for group in groups.values():
        group.sort(key=lambda c: c.position)
    return groups


def _reads_stdin_program(cmd: ShellCommand) -> bool:
    """An interpreter that takes its program from stdin (no script, no -c/-e)."""
    if cmd.name not in INTERPRETERS or cmd.stdin_is_file:
        return False
    args = list(cmd.argv[1:])
    if any(a in ("-c", "-e", "-m", "-E", "--eval") for a in args):
        return False
    operands = [a for a in args if not a.startswith("-")]
    return not operands or operands[0] == "-"


def _pipe_to_shell(commands: list[ShellCommand], text: str) -> list[Finding]:
    out: list[Finding] = []
    for group in _pipelines(commands).values():
        for i, cmd in enumerate(group):
            if cmd.name in _DOWNLOADERS and any(
                _reads_stdin_program(later) for later in group[i + 1 :]
            ):
                sink = next(c.name for c in group[i + 1 :] if _reads_stdin_program(c))
                out.append(
                    _finding(
                        "pipe_to_shell", "deny", f"a download from {cmd.name} is piped into {sink}"
                    )
                )
                break
    if not out and _PIPE_TO_SHELL_TEXT.search(text):
        out.append(_finding("pipe_to_shell", "deny", "downloaded text is run as a program"))
    return out


def _broad_target(ref: PathRef, workspace: str, home: str) -> str | None:
    raw = ref.original.rstrip("/") or "/"
    if raw in ("~", "$HOME", "${HOME}", "..", "*", ".", "/*", "~/*", "../*", "./*", ".*"):
        return raw
    if ref.resolved is None:
        return None
    real = ref.resolved.rstrip("/") or "/"
    if real in _SYSTEM_DIRS or real == home.rstrip("/"):
        return raw
    if real == workspace or workspace.startswith(real.rstrip("/") + "/"):
        return raw
    if ref.glob and (ref.lexical or "").rstrip("/*") in ("", home.rstrip("/"), workspace):
        return raw
    return None


def _broad_delete(action: EnrichedAction, home: str) -> list[Finding]:
    out: list[Finding] = []
    for ref in action.paths:
        if ref.access == "delete" and ref.recursive:
            broad = _broad_target(ref, action.workspace, home)
            if broad is not None:
                out.append(
                    _finding(
                        "broad_delete",
                        "deny",
                        f"{ref.via} recursively deletes the broad path {broad}",
                    )
                )
    return out


_WORLD_MODES = re.compile(r"^(0?[0-7]?[0-7][0-7][2367]|[ugoa]*[+=][rwxXst]*w[rwxXst]*|a\+\w+)$")


def _permission_blast(
    action: EnrichedAction, commands: list[ShellCommand], home: str
) -> list[Finding]:
    out: list[Finding] = []
    for index, cmd in enumerate(action.commands):
        if cmd.name not in ("chmod", "chown", "chgrp") or cmd not in commands:
            continue
        args = list(cmd.argv[1:])
        recursive = any(
            a in ("-R", "--recursive")
            or (a.startswith("-") and "R" in a and not a.startswith("--"))
            for a in args
        )
        operands = [a for a in args if not a.startswith("-")]
        mode = operands[0] if operands else ""
        refs = [r for r in action.paths if r.command == index and r.access == "write"]
        broad = [r.original for r in refs if _broad_target(r, action.workspace, home)]
        outside = [r.original for r in refs if not r.inside]
        world = cmd.name == "chmod" and bool(_WORLD_MODES.match(mode))
        if recursive and (world or broad):
            what = "world-writable" if world else "ownership"
            out.append(
                _finding(
                    "permission_blast", "deny", f"{cmd.name} -R changes {what} of a whole tree"
                )
            )
        elif world and (broad or outside):
            out.append(
                _finding(
                    "permission_blast", "deny", f"chmod {mode} on {', '.join(broad or outside)}"
                )
            )
        elif world:
            out.append(
                _finding(
                    "permission_blast", "escalate", f"chmod {mode} makes files writable by everyone"
                )
            )
    return out


def _credential_kind(text: str) -> Literal["deny", "escalate"] | None:
    cleaned = text.rstrip("/")
    if _SAFE_ENV.search(cleaned):
        return None
    if _DENY_CREDENTIALS.search(cleaned):
        return "deny"
    if _ESCALATE_CREDENTIALS.search(cleaned):
        return "escalate"
    return None


def _credential_read(action: EnrichedAction, commands: list[ShellCommand]) -> list[Finding]:
    out: list[Finding] = []
    seen: set[str] = set()
    subjects: list[str] = []
    for ref in action.paths:
        if ref.access == "read":
            subjects.extend(s for s in (ref.original, ref.resolved) if s)
    for cmd in commands:
        subjects.extend(a for a in cmd.argv[1:] if "/" in a or a.startswith("."))
        subjects.extend(a.split("@", 1)[1] for a in cmd.argv[1:] if "@" in a and "/" in a)
        subjects.extend(t for op, t in cmd.redirects if op == "<")
    for subject in subjects:
        kind = _credential_kind(subject)
        if kind and subject not in seen:
            seen.add(subject)
            out.append(_finding("credential_read", kind, f"reads the credential file {subject}"))
    text = " ".join(c.text for c in commands)
    if _KEYCHAIN_CMD.search(text):
        out.append(_finding("credential_read", "deny", "reads secrets from the keychain"))
    return out


def _upload_files(cmd: ShellCommand) -> list[str]:
    args = list(cmd.argv[1:])
    files: list[str] = []
    if cmd.name == "curl":
        for i, arg in enumerate(args):
            value = None
            if arg in (
                "-d",
                "--data",
                "--data-binary",
                "--data-urlencode",
                "--data-ascii",
                "-F",
                "--form",
                "-T",
                "--upload-file",
                "--json",
            ) and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(("--data=", "--data-binary=", "--form=", "--upload-file=")):
                value = arg.split("=", 1)[1]
            elif arg.startswith(("-d", "-F", "-T")) and len(arg) > 2:
                value = arg[2:]
            if value is None:
                continue
            if arg in ("-T", "--upload-file") or arg.startswith(("-T", "--upload-file=")):
                files.append(value)
            elif "@" in value:
                files.append(value.split("@", 1)[1].split(";", 1)[0])
            elif "<" in value and arg in ("-F", "--form"):
                files.append(value.split("<", 1)[1])
    elif cmd.name == "wget":
        for i, arg in enumerate(args):
            if arg in ("--post-file", "--body-file") and i + 1 < len(args):
                files.append(args[i + 1])
            elif arg.startswith(("--post-file=", "--body-file=")):
                files.append(arg.split("=", 1)[1])
    elif cmd.name in ("scp", "rsync") and cmd.hosts:
        operands = [a for a in args if not a.startswith("-")]
        if operands and ":" in operands[-1] and not operands[-1].startswith("/"):
            files.extend(a for a in operands[:-1] if ":" not in a)
    return files


def _exfiltration(commands: list[ShellCommand]) -> list[Finding]:
    out: list[Finding] = []
    for group in _pipelines(commands).values():
        for i, cmd in enumerate(group):
            for path in _upload_files(cmd):
                kind: Literal["deny", "escalate"] = "deny" if _credential_kind(path) else "escalate"
                host = ", ".join(cmd.hosts) or "the network"
                out.append(_finding("exfiltration", kind, f"{cmd.name} sends {path} to {host}"))
            if cmd.name in ("nc", "ncat", "netcat", "socat", "telnet", "ssh", "ftp", "sftp"):
                fed = cmd.stdin_is_file or (i > 0 and cmd.position > 0)
                if fed:
                    out.append(
                        _finding(
                            "exfiltration",
                            "escalate",
                            f"data is sent to {', '.join(cmd.hosts) or 'the network'}"
                            f" through {cmd.name}",
                        )
                    )
                elif cmd.name in ("nc", "ncat", "netcat", "socat"):
                    out.append(
                        _finding(
                            "exfiltration", "escalate", f"{cmd.name} opens a raw network connection"
                        )
                    )
    return out


def _reverse_shell(commands: list[ShellCommand], text: str) -> list[Finding]:
    out: list[Finding] = []
    for cmd in commands:
        if cmd.name in ("nc", "ncat", "netcat") and any(
            a in ("-e", "-c", "--exec", "--sh-exec") for a in cmd.argv[1:]
        ):
            out.append(
                _finding("reverse_shell", "deny", f"{cmd.name} -e hands a shell to the network")
            )
    words = [t for c in commands for _, t in c.redirects] + [a for c in commands for a in c.argv]
    if (re.search(r"/dev/(tcp|udp)/", text) or any(_socket(w) for w in words)
            or re.search(r"\bsocat\b.*\bexec:", text, re.I)):
        out.append(_finding("reverse_shell", "deny", "the command wires a shell to a socket"))
    return out


def _socket(word: str) -> bool:
    """``/dev/tcp/...`` or ``/dev/udp/...``, also as a glob that matches it (``/dev/tc?``)."""
    parts = [p for p in word.split("/") if p]
    return word.startswith("/") and len(parts) >= 2 and fnmatch.fnmatchcase("dev", parts[0]) and (
        fnmatch.fnmatchcase("tcp", parts[1]) or fnmatch.fnmatchcase("udp", parts[1]))


_BUILDERS = frozenset({"make", "gmake", "bmake", "cmake", "ninja"})
_INSTALLERS = {
    "pip": ("install", "download", "wheel"), "pip3": ("install", "download", "wheel"),
    "npm": ("install", "i", "ci", "add", "exec", "x", "update", "rebuild"),
    "pnpm": ("install", "i", "add", "dlx", "exec", "update"),
    "yarn": ("install", "add", "dlx", "up", "upgrade"),
    "uv": ("pip", "add", "sync", "tool"), "poetry": ("install", "add", "update"),
    "pipx": ("install", "run", "inject"), "gem": ("install",), "bundle": ("install", "add"),
    "cargo": ("install",), "go": ("install", "get"), "composer": ("install", "require"),
    "bun": ("install", "add", "x"), "deno": ("install",), "conda": ("install", "create"),
    "mamba": ("install", "create"), "brew": ("install",), "apt": ("install",),
    "apt-get": ("install",),
}


def _project_code(commands: list[ShellCommand]) -> list[Finding]:
    out: list[Finding] = []
    for cmd in commands:
        args = [a for a in cmd.argv[1:] if not a.startswith("-")]
        if cmd.name in _BUILDERS:
            out.append(_finding("runs_project_code", "escalate",
                                f"{cmd.name} runs the commands written in the build files"))
        elif cmd.name in ("npx", "pnpx", "bunx", "uvx") or (
            args and args[0] in _INSTALLERS.get(cmd.name, ())
        ) or (cmd.name in INTERPRETERS and cmd.argv[1:3] in (("-m", "pip"), ("-m", "ensurepip"))
              and "install" in cmd.argv):
            out.append(_finding("installs_packages", "escalate",
                                f"{cmd.name} installs packages, running their install scripts"))
    return out


def _obfuscated(commands: list[ShellCommand], text: str) -> list[Finding]:
    out: list[Finding] = []
    for group in _pipelines(commands).values():
        for i, cmd in enumerate(group):
            decoding = cmd.name in _DECODERS and (
                cmd.name not in ("echo", "printf", "tr", "rev")
                or _HEX_ESCAPES.search(" ".join(cmd.argv)) is not None
                or cmd.name == "rev"
            )
            if decoding and any(_reads_stdin_program(c) for c in group[i + 1 :]):
                out.append(
                    _finding(
                        "obfuscated_execution",
                        "deny",
                        f"text generated by {cmd.name} is piped into a shell",
                    )
                )
                break
    for cmd in commands:
        joined = " ".join(cmd.argv[1:])
        if cmd.name == "eval" and (
            _DECODE_TEXT.search(joined)
            or _HEX_ESCAPES.search(joined)
            or "$(" in joined
            or "`" in joined
        ):
            out.append(_finding("obfuscated_execution", "deny", "eval runs computed text"))
        if cmd.name in INTERPRETERS and cmd.name not in SHELLS:
            if _EXEC_TEXT.search(joined) and (
                _DECODE_TEXT.search(joined)
                or _HEX_ESCAPES.search(joined)
                or re.search(r"b64|base64|decode", joined)
            ):
                out.append(
                    _finding("obfuscated_execution", "deny", f"{cmd.name} executes decoded code")
                )
            elif _EXEC_TEXT.search(joined) and "exec" in joined:
                out.append(
                    _finding(
                        "obfuscated_execution",
                        "escalate",
                        f"{cmd.name} runs code built at run time",
                    )
                )
        if (
            cmd.name in SHELLS
            and "-c" in cmd.argv
            and ("$(" in joined or "`" in joined or _HEX_ESCAPES.search(joined))
        ):
            out.append(
                _finding(
                    "obfuscated_execution", "deny", f"{cmd.name} -c runs text computed at run time"
                )
            )
    if re.search(r"\$\([^)]*\b(base64|xxd|openssl)\b[^)]*-(d|r|-decode|D)\b", text):
        out.append(
            _finding("obfuscated_execution", "deny", "the command runs text decoded at run time")
        )
    if re.search(r"\$'[^']*\\(x[0-9a-fA-F]{2}|[0-7]{3})", text):
        out.append(
            _finding("obfuscated_execution", "deny", "the command hides words in $'\\x..' escapes")
        )
    return out


def _inline_writes(commands: list[ShellCommand]) -> list[Finding]:
    out: list[Finding] = []
    for cmd in commands:
        if cmd.name not in INTERPRETERS or cmd.name in SHELLS:
            continue
        args = list(cmd.argv[1:])
        code = [
            args[i + 1]
            for i, a in enumerate(args[:-1])
            if a in ("-c", "-e", "-E", "--eval", "-pe", "-ne")
        ]
        if any(_INLINE_WRITES.search(c) for c in code):
            out.append(
                _finding(
                    "inline_code_writes",
                    "escalate",
                    f"{cmd.name} inline code writes or deletes files",
                )
            )
    return out


def _content(action: EnrichedAction) -> list[Finding]:
    payload = action.request.payload if isinstance(action.request.payload, dict) else {}
    fields = ("content", "new_string", "new_text", "new_source")
    texts: Iterable[object] = (payload.get(k) for k in fields)
    out: list[Finding] = []
    for text in texts:
        if not isinstance(text, str):
            continue
        if _PIPE_TO_SHELL_TEXT.search(text):
            out.append(
                _finding(
                    "dangerous_content",
                    "escalate",
                    "the content written runs a download as a program",
                )
            )
        if re.search(r"base64\s+(-d|--decode)[^\n|]*\|\s*(ba|z)?sh\b", text) or (
            _EXEC_TEXT.search(text) and _DECODE_TEXT.search(text)
        ):
            out.append(
                _finding(
                    "dangerous_content", "escalate", "the content written executes decoded text"
                )
            )
    return out
