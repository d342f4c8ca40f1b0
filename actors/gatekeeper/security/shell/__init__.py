"""Static analysis of a bash command line: simple commands, what they read, write, delete,
and what the judge cannot read completely.

:func:`parse_shell` lexes the command the way bash does (:mod:`.lexer`: quotes, ``$'...'``,
here-documents, substitutions), follows lists, pipelines, subshells and compound commands
(:mod:`.parser`, :mod:`.structure`), the folders a ``cd`` may lead to and literal variable
assignments (:mod:`.scope`), sees through wrappers (:mod:`.wrappers`: ``env``,
``timeout``, ``sudo``, ``xargs`` ...) and applies a model of each command it knows:
shells and interpreters, ``awk``, ``sed``, ``find``, ``source``/``eval`` (:mod:`.code`),
``git`` (:mod:`.git`), file changers such as ``rm``, ``cp``, ``ln``, ``tee`` (:mod:`.effects`)
and tools such as ``sort -o``, ``tar``, ``curl`` (:mod:`.tools`). Each simple command gets
its file targets, the network hosts it names, its action classes, whether its effects are
*opaque* (not modelled), and the reasons it is *unreadable*.

The analysis errs towards seeing too much: text in quotes that looks like ``$(...)`` is
checked as if it ran; an operand it cannot pin down is a *dynamic* target. Deciding what
that means is the caller's job (protection refuses dynamic writes and escalates what is
unreadable). The only I/O is reading the file system (``isdir``, ``islink``, ``realpath``,
a bounded walk for links below a copied folder, globbing).
"""

from tether.actors.gatekeeper.security.shell.code import XARGS_SAFE
from tether.actors.gatekeeper.security.shell.lexer import LexError, Word, lex, substitutions
from tether.actors.gatekeeper.security.shell.model import (
    INTERPRETERS,
    NETWORK,
    SHELLS,
    Access,
    ShellCommand,
    ShellParse,
    Target,
    hosts_in,
    is_dynamic,
)
from tether.actors.gatekeeper.security.shell.parser import parse_shell
from tether.actors.gatekeeper.security.shell.tools import PURE

#: Commands whose arguments never cause a file to change (naming a protected file is fine).
READERS: frozenset[str] = PURE | XARGS_SAFE

__all__ = [
    "INTERPRETERS",
    "NETWORK",
    "READERS",
    "SHELLS",
    "Access",
    "LexError",
    "ShellCommand",
    "ShellParse",
    "Target",
    "Word",
    "hosts_in",
    "is_dynamic",
    "lex",
    "parse_shell",
    "substitutions",
]
