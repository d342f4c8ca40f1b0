"""What a ``git`` command line does, as far as the judge can tell from it.

Git runs programs its configuration names (pagers, editors, diff and merge tools, hooks,
``core.fsmonitor``, ``core.sshCommand``, aliases starting with ``!``) and some of its
options write files. So: ``-c`` settings other than a few harmless ones, ``--git-dir``,
``--work-tree``, ``--exec-path=``, ``--config-env``, a word after ``git`` that is not a
git command (an alias, or an external ``git-<name>``), ``git config`` writes, ``git clean``,
``submodule foreach``, ``bisect run``, ``rebase --exec``/``-i``, ``filter-branch``, the
tools that start other programs, ``--upload-pack``/``--receive-pack``/``--exec`` and
``ext::`` URLs are unreadable; ``--output`` (``diff``, ``log``, ``show`` ...), ``-o`` of
``format-patch`` and ``archive``, and ``bundle create`` are written files.
"""

from __future__ import annotations

import os
import re

from tether.actors.gatekeeper.security.shell.model import REMOTE, Ctx, Effects, getopt, hosts_in

BUILTINS: frozenset[str] = frozenset(
    {"add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bundle",
     "cat-file", "check-attr", "check-ignore", "check-mailmap", "check-ref-format", "checkout",
     "checkout-index", "cherry", "cherry-pick", "clean", "clone", "column", "commit",
     "commit-graph", "commit-tree", "config", "count-objects", "describe", "diff",
     "diff-files", "diff-index", "diff-tree", "difftool", "fast-export", "fast-import",
     "fetch", "fetch-pack", "filter-branch", "fmt-merge-msg", "for-each-ref", "for-each-repo",
     "format-patch", "fsck", "gc", "get-tar-commit-id", "grep", "hash-object", "help", "hook",
     "index-pack", "init", "instaweb", "interpret-trailers", "log", "ls-files", "ls-remote",
     "ls-tree", "maintenance", "merge", "merge-base", "merge-file", "merge-index",
     "merge-tree", "mergetool", "mktag", "mktree", "mv", "name-rev", "notes", "pack-objects",
     "pack-refs", "prune", "prune-packed", "pull", "push", "range-diff", "read-tree",
     "rebase", "reflog", "remote", "repack", "replace", "request-pull", "rerere", "reset",
     "restore", "rev-list", "rev-parse", "revert", "rm", "send-email", "shortlog", "show",
     "show-branch", "show-index", "show-ref", "sparse-checkout", "stash", "status",
     "stripspace", "submodule", "switch", "symbolic-ref", "tag", "unpack-file",
     "unpack-objects", "update-index", "update-ref", "update-server-info", "var",
     "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree",
     "write-tree", "credential", "credential-store", "credential-cache", "daemon", "shell",
     "web--browse", "upload-pack", "receive-pack", "p4", "svn", "cvsimport", "cvsserver",
     "cvsexportcommit", "archimport", "quiltimport", "filter-repo", "lfs"}
)
_RUNS_PROGRAMS = frozenset(
    {"difftool", "mergetool", "instaweb", "send-email", "daemon", "shell", "web--browse",
     "credential", "credential-store", "credential-cache", "filter-branch", "filter-repo",
     "p4", "svn", "cvsimport", "cvsserver", "cvsexportcommit", "archimport", "upload-pack",
     "receive-pack", "am", "apply", "quiltimport", "lfs"}
)
_TRANSPARENT = frozenset(
    {"status", "log", "diff", "show", "blame", "add", "grep", "ls-files", "branch",
     "rev-parse", "describe", "shortlog", "config", "remote", "fetch", "ls-remote"}
)
_OUTPUT_SUBS = frozenset({"diff", "log", "show", "whatchanged", "diff-tree", "diff-index",
                          "diff-files", "range-diff", "format-patch"})
_SAFE_SETTING = re.compile(
    r"^(color\.[\w.-]+|advice\.[\w.-]+|user\.(name|email)|core\.quotepath|init\.defaultbranch"
    r"|column\.ui|log\.(date|decorate|abbrevcommit|follow|showroot)|diff\.(noprefix|renames"
    r"|mnemonicprefix|relative|statgraphwidth|context|interhunkcontext)|i18n\.\w+"
    r"|pull\.(rebase|ff)|merge\.ff|commit\.gpgsign|tag\.gpgsign|protocol\.version"
    r"|safe\.directory|core\.abbrev|status\.\w+|fetch\.prune)=", re.IGNORECASE)
_GLOBAL_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace",
                            "--super-prefix", "--config-env", "--exec-path", "--list-cmds",
                            "--attr-source"})
_GLOBAL_FLAGS = frozenset({"-v", "--version", "-h", "--help", "--html-path", "--man-path",
                           "--info-path", "-p", "--paginate", "-P", "--no-pager",
                           "--no-replace-objects", "--no-lazy-fetch", "--no-optional-locks",
                           "--no-advice", "--bare", "--literal-pathspecs", "--glob-pathspecs",
                           "--noglob-pathspecs", "--icase-pathspecs"})
_BRANCH_CHANGES = frozenset({"-d", "-D", "-m", "-M", "-c", "-C", "-f", "--delete", "--move",
                             "--copy", "--force", "--set-upstream-to", "-u", "--unset-upstream",
                             "--edit-description", "--track", "-t"})


def git(ctx: Ctx) -> Effects:
    """The effects of ``git ARGS`` (module docstring)."""
    args = ctx.args
    eff = Effects()
    folder = ""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in _GLOBAL_VALUES and not eq and name != "--exec-path":
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        if name == "-C":
            folder = os.path.join(folder, value)
        elif name == "-c" and not _SAFE_SETTING.match(value):
            eff.cannot_read(f"git -c {value} sets configuration that may run a program")
        elif name in ("--git-dir", "--work-tree", "--config-env", "--super-prefix") or (
            name == "--exec-path" and eq
        ):
            eff.cannot_read(f"git {name} changes which repository or programs git uses")
        elif name not in _GLOBAL_VALUES and name not in _GLOBAL_FLAGS:
            eff.cannot_read(f"git {arg} is an option Tether does not know")
        i += 1
    sub = args[i] if i < len(args) else ""
    rest = args[i + 1 :]
    if not sub:
        return eff
    if sub not in BUILTINS:
        eff.cannot_read(f"git {sub} is not a git command Tether knows (an alias or an "
                        f"external git-{sub} would run)")
        eff.opaque = True
        return eff
    eff.opaque = sub not in _TRANSPARENT
    if sub in _RUNS_PROGRAMS:
        eff.cannot_read(f"git {sub} runs other programs or changes files the judge does "
                        "not see")
    if any(a.startswith(("ext::", "fd::")) for a in rest):
        eff.cannot_read("an ext:: or fd:: URL makes git run a command")
    if any(a.split("=", 1)[0] in ("--upload-pack", "--receive-pack", "--exec", "-u",
                                  "--template", "--config") for a in rest) and sub in (
        "clone", "fetch", "pull", "push", "ls-remote", "archive", "submodule"
    ):
        eff.cannot_read(f"git {sub} is told to run a program or use a configuration")
    _subcommand(sub, rest, folder, eff)
    if sub in ("clone", "fetch", "pull", "push", "ls-remote", "remote", "submodule"):
        eff.hosts.extend(hosts_in(rest))
        eff.hosts.extend(m.group(1) for a in rest if (m := REMOTE.match(a)))
        if not eff.hosts and sub != "remote":
            eff.hosts.append("(git remote)")
    return eff


def _subcommand(sub: str, rest: list[str], folder: str, eff: Effects) -> None:
    def at(path: str) -> str:
        return os.path.join(folder, path) if folder else path

    if sub in _OUTPUT_SUBS:
        for j, arg in enumerate(rest):
            if arg == "--output" and j + 1 < len(rest):
                eff.write(at(rest[j + 1]), f"git {sub} --output")
            elif arg.startswith("--output="):
                eff.write(at(arg.split("=", 1)[1]), f"git {sub} --output")
    if sub == "format-patch":
        o = getopt(rest, "o:v:", ("output-directory=", "output=", "suffix=", "subject-prefix=",
                                  "start-number=", "numbered-files", "stdout", "cover-letter"))
        if not o.has("--stdout"):
            if o.has("--numbered-files", "--suffix"):
                eff.cannot_read("git format-patch writes files under names it makes up")
            folder_out = (o.values("-o", "--output-directory") or [""])[-1]
            eff.write(at(os.path.join(folder_out, "0*.patch") if folder_out else "0*.patch"),
                      "git format-patch")
    elif sub == "archive":
        o = getopt(rest, "o:", ("output=", "remote=", "exec=", "prefix=", "format="))
        for value in o.values("-o", "--output"):
            eff.write(at(value), "git archive --output")
        if o.has("--exec"):
            eff.cannot_read("git archive --exec runs a program")
        if o.has("--remote"):
            eff.classes.add("network")
    elif sub == "bundle" and rest[:1] == ["create"] and len(rest) > 1:
        eff.write(at(rest[1]), "git bundle create")
    elif sub == "clean":
        o = getopt(rest, "e:", ("exclude=", "dry-run", "interactive", "force"))
        if not o.has("-n", "--dry-run") or o.has("-i", "--interactive"):
            eff.cannot_read("git clean deletes files git does not track")
    elif sub == "config":
        _config(rest, eff)
    elif sub == "submodule" and "foreach" in rest:
        eff.cannot_read("git submodule foreach runs a command in every submodule")
    elif sub == "bisect" and rest[:1] == ["run"]:
        eff.cannot_read("git bisect run runs a command")
    elif sub == "rebase" and any(a in ("-x", "-i", "--interactive") or a.startswith(
            ("--exec", "-x")) for a in rest):
        eff.cannot_read("git rebase --exec/-i runs commands or an editor")
    elif sub == "grep" and any(a.startswith(("-O", "--open-files-in-pager")) for a in rest):
        eff.cannot_read("git grep -O runs a pager program")
    elif (sub == "branch" and any(a.split("=", 1)[0] in _BRANCH_CHANGES
                                  or not a.startswith("-") for a in rest)) or (
            sub == "remote" and rest[:1] in (["add"], ["set-url"])):
        eff.classes.add("write")


_CONFIG_READS = ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l",
                 "--get-color", "--get-colorbool")
_CONFIG_WRITES = ("--add", "--unset", "--unset-all", "--replace-all", "--rename-section",
                  "--remove-section", "--edit", "-e")


def _config(rest: list[str], eff: Effects) -> None:
    """``git config`` may only read: a ``get``/``list`` verb, a read option, or one name."""
    o = getopt(rest, "f:", ("file=", "blob=", "type=", "default=", "comment=", "value=",
                            *(r.lstrip("-") for r in _CONFIG_READS + _CONFIG_WRITES
                              if r.startswith("--"))))
    words = o.operands
    verb = words[0] if words and words[0] in ("get", "list", "set", "unset", "rename-section",
                                               "remove-section", "edit") else ""
    reading = verb in ("get", "list") or (
        not verb and (o.has(*_CONFIG_READS) or len(words) <= 1) and not o.has(*_CONFIG_WRITES))
    if not reading:
        eff.cannot_read("git config changes configuration, which can name programs git runs")
