"""The settled part of a history shaped once: every result equals shaping the whole
history, on random histories that grow, branch, compact and continue."""

from __future__ import annotations

import random

import msgspec
import pytest

from tether.actors.model import shaped_history as module
from tether.actors.model.coalesce import coalesce
from tether.actors.model.shaped_history import Shaped, shaped_history
from tether.actors.model.stale_results import summarize_stale_results
from tether.actors.model.tokens import estimate_message_tokens
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.session import Turn

LONG = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(40))
"""A tool result long enough for its summary to be shorter."""


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing remembered."""
    monkeypatch.setattr(module, "_MEMO", module._Memo(module.MEMO_SESSIONS))


def _tool_turns(turns: int) -> list[Turn]:
    """A session of ``turns`` turns, each a question, a read, its result and an answer."""
    history: list[Turn] = []
    for n in range(turns):
        history += [Turn("user", [TextBlock(f"q{n}")]),
                    Turn("assistant", [ToolUseBlock(f"t{n}", "read_file", {"path": "a"})]),
                    Turn("user", [ToolResultBlock(f"t{n}", LONG, False)]),
                    Turn("assistant", [TextBlock("done")])]
    return history


def whole(history: list[Turn], keep_turns: int) -> Shaped:
    """Shaping without the memo: the definition the memo must agree with."""
    shaped = coalesce(summarize_stale_results(history, keep_turns))
    api = [{"role": t.role, "content": [msgspec.to_builtins(b) for b in t.content]}
           for t in shaped]
    return Shaped(api, sum(estimate_message_tokens(m) for m in api))


def _message(rng: random.Random, n: int) -> list[Turn]:
    """One random step of a conversation (a few messages)."""
    call = f"toolu_{n}"
    kind = rng.choice(["text", "tool", "tool", "mixed", "continuation", "reminder",
                       "assistant-text", "assistant-mixed", "empty-text"])
    result = ToolResultBlock(call, rng.choice([LONG, "short", "Error: boom\n" + LONG]),
                             rng.random() < 0.3)
    if kind == "text":
        return [Turn("user", [TextBlock(f"question {n}")])]
    if kind == "tool":
        return [Turn("assistant", [TextBlock("let me look"),
                                   ToolUseBlock(call, "read_file", {"path": f"f{n}"})]),
                Turn("user", [result])]
    if kind == "mixed":  # results and the next question in one message
        return [Turn("assistant", [ToolUseBlock(call, "read_file", {"path": "x"})]),
                Turn("user", [result, TextBlock(f"and then {n}")])]
    if kind == "continuation":
        return [Turn("user", [TextBlock("what colour is the ")]),
                Turn("user", [TextBlock("grass")], continues=True)]
    if kind == "reminder":
        return [Turn("user", [TextBlock(f"<system-reminder>rule {n}</system-reminder>")])]
    if kind == "assistant-mixed":
        return [Turn("assistant", [TextBlock("first"), TextBlock("second")])]
    if kind == "empty-text":
        return [Turn("user", [TextBlock("  ")])]
    return [Turn("assistant", [TextBlock(f"answer {n}")])]


@pytest.mark.parametrize("keep_turns", [1, 2, 4])
@pytest.mark.parametrize("seed", range(12))
def test_every_shape_equals_shaping_the_whole_history(seed: int, keep_turns: int) -> None:
    rng = random.Random(seed)
    history: list[Turn] = []
    for n in range(160):
        roll = rng.random()
        if roll < 0.05 and history:  # a branch: back to an earlier message, then on
            history = history[:rng.randrange(len(history))]
        elif roll < 0.07 and len(history) > 4:  # compaction: a summary, then the recent
            history = [Turn("user", [TextBlock("summary")]), *history[-4:]]
        elif roll < 0.09:  # loaded again: equal messages, new objects
            history = [msgspec.structs.replace(t) for t in history]
        else:
            history = history + _message(rng, n)
        assert shaped_history(history, keep_turns) == whole(history, keep_turns), n
    assert module._MEMO._items, "the memo was never used"


def test_a_long_session_is_shaped_from_its_settled_cut_on() -> None:
    """The memo is used: the messages before the cut are the ones shaped last time."""
    history = _tool_turns(30)
    first = shaped_history(history, 4)
    history.append(Turn("user", [TextBlock("one more")]))
    second = shaped_history(history, 4)
    assert second == whole(history, 4)
    shared = sum(1 for a, b in zip(first.messages, second.messages, strict=False) if a is b)
    assert shared >= 100  # the first 26 turns' messages, not shaped again


def test_a_history_that_shrank_below_the_cut_is_shaped_whole() -> None:
    history = _tool_turns(12)
    shaped_history(history, 4)
    for cut in range(len(history), 0, -1):  # undo, one message at a time
        assert shaped_history(history[:cut], 4) == whole(history[:cut], 4), cut

