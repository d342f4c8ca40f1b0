"""Streaming a reply into editable chat messages: throttling, cursor, status line, tool
summary, and splitting at the message limit.

The key properties: ``split_text`` drops nothing but the separator at each cut and always
cuts where the rule says; and for any chunking and timing of a reply, applying the
streamer's operations leaves the chat reading exactly ``final_messages`` of the whole text,
without any operation ever exceeding the limit or coming sooner than the throttle allows.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random

import pytest

from tether.actors.chat.stream import (
    CURSOR,
    ChatStreamer,
    Edit,
    Op,
    Send,
    final_messages,
    split_text,
    tool_summary,
)
from tether.actors.ports import ManualClock

# --- helpers ------------------------------------------------------------------------------


class Chat:
    """A fake chat applying operations, refusing the ones a real chat would."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.messages: list[str] = []

    def apply(self, ops: list[Op]) -> None:
        for op in ops:
            assert op.text, op
            assert len(op.text) <= self.limit, op
            if isinstance(op, Send):
                assert op.key == len(self.messages), op
                self.messages.append(op.text)
            else:
                assert 0 <= op.key < len(self.messages), op
                assert self.messages[op.key] != op.text, f"edit without a change: {op}"
                self.messages[op.key] = op.text


def reference_split(text: str, limit: int) -> list[str]:
    """The splitting rule written out position by position (independent of the module)."""
    pieces = []
    while len(text) > limit:
        cut = None
        for sep in "\n ":
            for i in range(limit, 0, -1):
                if text[i] == sep:
                    cut = (text[:i], text[i + 1 :])
                    break
            if cut:
                break
        head, text = cut or (text[:limit], text[limit:])
        pieces.append(head)
    if text:
        pieces.append(text)
    return pieces


def rejoins(text: str, pieces: list[str], limit: int) -> bool:
    """Whether the pieces are the text in order with, after each piece, either nothing
    dropped (only possible after a hard cut, i.e. a piece of exactly ``limit``) or one
    newline or space dropped; tried every way, since a piece may itself start with a
    space."""
    if not pieces:
        return text == ""
    head, rest = pieces[0], pieces[1:]
    if not head or len(head) > limit or not text.startswith(head):
        return False
    after = text[len(head) :]
    if not rest:
        return after in ("", "\n", " ")
    if len(head) == limit and after and rejoins(after, rest, limit):
        return True
    return after[:1] in ("\n", " ") and rejoins(after[1:], rest, limit)


def assert_rejoins(text: str, pieces: list[str], limit: int) -> None:
    assert rejoins(text, pieces, limit), (text, pieces, limit)


def stream(
    chunks: list[str], limit: int = 4000, throttle: float = 1.5, can_edit: bool = True
) -> tuple[ChatStreamer, Chat]:
    """Stream ``chunks`` 0.1 s apart (so the throttle holds most of them) and finish."""
    s = ChatStreamer(limit=limit, throttle=throttle, can_edit=can_edit)
    chat = Chat(limit)
    t = 0.0
    for c in chunks:
        chat.apply(s.text(c, t))
        t += 0.1
    chat.apply(s.finish(t))
    return s, chat


# --- split_text ---------------------------------------------------------------------------

A, B = "a" * 4000, "b" * 10


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("", []),
        ("short", ["short"]),
        (A, [A]),  # exactly the limit
        (A + "a", [A, "a"]),  # 4001, no whitespace: hard cut
        ("a" * 3999 + "\n", ["a" * 3999 + "\n"]),  # 4000 with a newline: fits
        (A + "\n" + B, [A, B]),  # newline exactly at index 4000
        (A + "\n", [A]),  # ... and nothing after it: no empty message
        ("a" * 3999 + "\n" + B, ["a" * 3999, B]),  # newline at 3999
        ("a" * 3998 + "\n\n" + B, ["a" * 3998 + "\n", B]),  # the last newline wins
        (A + " " + B, [A, B]),  # space exactly at index 4000
        ("a" * 4001 + "\n" + B, [A, "a\n" + B]),  # newline at 4001 is too late: hard
        (
            "a" * 100 + "\n" + "b" * 100 + " " + "c" * 3800,
            ["a" * 100, "b" * 100 + " " + "c" * 3800],
        ),
        ("a" * 100 + "\n" + "b" * 100 + " " + "c" * 3900, ["a" * 100, "b" * 100, "c" * 3900]),
        ("a" * 3000 + " " + "b" * 1500, ["a" * 3000, "b" * 1500]),  # space, no newline
        ("a" * 9000, [A, A, "a" * 1000]),  # no whitespace at all
        (" " + "a" * 5000, [" " + "a" * 3999, "a" * 1001]),  # whitespace only at index 0
        ("a " + "a" * 5000, ["a", A, "a" * 1000]),  # whitespace only at index 1
        ("\n" * 4001, ["\n" * 4000]),
        ("x\n" * 2100, ["x\n" * 1999 + "x", "x\n" * 100]),
    ],
)
def test_split_text_boundaries(text: str, pieces: list[str]) -> None:
    assert split_text(text) == pieces
    assert_rejoins(text, pieces, 4000)


@pytest.mark.parametrize("length", [3999, 4000, 4001, 4002, 8000, 8001, 8002])
@pytest.mark.parametrize("at", [None, 0, 1, 2, 3998, 3999, 4000, 4001, 4002, 7999, 8000])
@pytest.mark.parametrize("sep", ["\n", " "])
def test_split_text_at_the_real_limit(length: int, at: int | None, sep: str) -> None:
    chars = ["a"] * length
    if at is not None and at < length:
        chars[at] = sep
    text = "".join(chars)
    pieces = split_text(text)
    assert pieces == reference_split(text, 4000)
    assert_rejoins(text, pieces, 4000)


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5])
def test_split_text_exhaustively_on_small_texts(limit: int) -> None:
    for n in range(9):
        for chars in itertools.product("a \n", repeat=n):
            text = "".join(chars)
            pieces = split_text(text, limit)
            assert pieces == reference_split(text, limit), (text, limit)
            assert_rejoins(text, pieces, limit)


def test_split_text_rejects_a_useless_limit() -> None:
    with pytest.raises(ValueError):
        split_text("abc", 0)


# --- tool_summary and final_messages ------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "summary"),
    [
        ([], ""),
        (["Read"], "🧰 Read"),
        (["Bash", "Read", "Bash", "Edit", "Bash", "Edit"], "🧰 Bash x3, Read, Edit x2"),
        (["Edit", "Edit", "Bash"], "🧰 Edit x2, Bash"),  # first-use order, not by count
    ],
)
def test_tool_summary(names: list[str], summary: str) -> None:
    assert tool_summary(names) == summary


def test_final_messages_put_the_summary_on_the_last_message_when_it_fits() -> None:
    assert final_messages("done", ["Bash", "Bash"]) == ["done\n\n🧰 Bash x2"]
    assert final_messages("", ["Bash"]) == ["🧰 Bash"]
    assert final_messages("", []) == []
    summary = "🧰 Read"
    fits = "a" * (4000 - 2 - len(summary))
    assert final_messages(fits, ["Read"]) == [fits + "\n\n" + summary]
    assert final_messages(fits + "a", ["Read"]) == [fits + "a", summary]


# --- streaming: cursor and throttle -------------------------------------------------------


def test_first_chunk_is_sent_at_once_with_the_cursor() -> None:
    s = ChatStreamer()
    assert s.text("Hel", 0.0) == [Send(0, "Hel" + CURSOR)]
    assert CURSOR == "▍"


def test_changes_within_the_throttle_are_held_and_flushed_by_tick() -> None:
    s = ChatStreamer()
    s.text("Hello", 0.0)
    assert s.text(" world", 0.5) == []
    assert s.tick(1.49) == []
    assert s.tick(1.5) == [Edit(0, "Hello world▍")]
    assert s.tick(5.0) == []  # nothing held any more


def test_held_change_is_flushed_by_the_next_text_after_the_throttle() -> None:
    s = ChatStreamer()
    s.text("a", 0.0)
    assert s.text("b", 1.0) == []
    assert s.text("c", 1.6) == [Edit(0, "abc▍")]
    assert s.text("d", 2.0) == []  # the throttle restarts at the last update


def test_held_change_is_flushed_by_a_tool_call_after_the_throttle() -> None:
    s = ChatStreamer()
    s.text("a", 0.0)
    s.text("b", 1.0)
    assert s.tool("Read", "a.py", 2.0) == [Edit(0, "ab▍\n\n🔧 Read: a.py")]


def test_finish_flushes_a_held_change_and_removes_the_cursor() -> None:
    s = ChatStreamer()
    s.text("Hello", 0.0)
    s.text(" world", 0.1)
    assert s.finish(0.2) == [Edit(0, "Hello world")]
    assert s.shown == ["Hello world"]


def test_finish_with_nothing_held_still_removes_the_cursor() -> None:
    s = ChatStreamer()
    s.text("Hi", 0.0)
    assert s.finish(10.0) == [Edit(0, "Hi")]


def test_a_call_with_nothing_to_change_does_not_restart_the_throttle() -> None:
    s = ChatStreamer()
    s.text("a", 0.0)
    assert s.tick(2.0) == []  # nothing held
    assert s.text("b", 2.5) == [Edit(0, "ab▍")]  # 2.5 s after the last update


def test_throttle_is_configurable() -> None:
    s = ChatStreamer(throttle=0.3)
    s.text("a", 0.0)
    assert s.text("b", 0.29) == []
    assert s.tick(0.3) == [Edit(0, "ab▍")]


def test_updates_never_come_sooner_than_the_throttle() -> None:
    clock = ManualClock()
    s = ChatStreamer(clock, throttle=1.5)
    rng = random.Random(7)
    update_times: list[float] = []
    t = 0.0
    for _ in range(400):
        kind = rng.random()
        ops = (
            s.text(rng.choice(["word ", "x", "\n"]))
            if kind < 0.6
            else s.tool("Bash", "run")
            if kind < 0.7
            else s.tick()
        )
        if ops:
            update_times.append(t)
        step = rng.choice([0.05, 0.2, 0.7])
        clock.advance(step)
        t += step
    gaps = [b - a for a, b in itertools.pairwise(update_times)]
    assert len(update_times) > 10
    assert min(gaps) >= 1.5 - 1e-9


def test_cursor_is_on_every_update_while_streaming_and_gone_at_the_end() -> None:
    s = ChatStreamer()
    streamed = [s.text(c, 2.0 * t) for t, c in enumerate(["one ", "two ", "three"])]
    assert all(ops and ops[-1].text.endswith(CURSOR) for ops in streamed)
    final = s.finish(3.0)
    assert final == [Edit(0, "one two three")]
    assert s.shown == ["one two three"]
    assert CURSOR not in "".join(s.shown)


# --- streaming: the tool status line ------------------------------------------------------


def test_status_line_is_set_replaced_and_cleared() -> None:
    s = ChatStreamer(throttle=1.0)
    assert s.text("Let me check.", 0.0) == [Send(0, "Let me check.▍")]
    assert s.tool("Bash", "running the tests", 1.0) == [
        Edit(0, "Let me check.▍\n\n🔧 Bash: running the tests")
    ]
    assert s.tool("Read", "app.py", 2.0) == [Edit(0, "Let me check.▍\n\n🔧 Read: app.py")]
    assert s.text(" All green.", 3.0) == [Edit(0, "Let me check. All green.▍")]


def test_an_empty_text_chunk_keeps_the_status_line() -> None:
    s = ChatStreamer(throttle=0.0)
    s.text("x", 0.0)
    s.tool("Grep", "", 1.0)
    assert s.text("", 2.0) == []
    assert s.shown == ["x▍\n\n🔧 Grep"]


def test_status_line_description_is_kept_on_one_line() -> None:
    s = ChatStreamer()
    assert s.tool("Bash", "pytest -q\n  tests/", 0.0) == [Send(0, "🔧 Bash: pytest -q tests/")]


def test_a_reply_starting_with_a_tool_shows_the_status_line_alone() -> None:
    s = ChatStreamer(throttle=1.0)
    assert s.tool("Read", "a.py", 0.0) == [Send(0, "🔧 Read: a.py")]
    assert s.text("Found it.", 1.0) == [Edit(0, "Found it.▍")]
    assert s.finish(1.1) == [Edit(0, "Found it.\n\n🧰 Read")]


def test_finish_replaces_the_status_line_with_the_summary() -> None:
    s = ChatStreamer(throttle=0.0)
    s.text("Working.", 0.0)
    for t, (name, what) in enumerate(
        [("Bash", "ls"), ("Read", "a"), ("Bash", "x"), ("Edit", "a"), ("Edit", "b"), ("Bash", "y")]
    ):
        s.tool(name, what, float(t))
    assert s.finish(9.0) == [Edit(0, "Working.\n\n🧰 Bash x3, Read, Edit x2")]


def test_status_line_is_left_out_when_it_does_not_fit() -> None:
    s = ChatStreamer(limit=20, throttle=0.0)
    s.text("a" * 15, 0.0)
    assert s.tool("Bash", "a long description", 1.0) == []  # would pass 20: not shown
    assert s.shown == ["a" * 15 + CURSOR]
    s2 = ChatStreamer(limit=20, throttle=0.0)
    assert s2.tool("Bash", "a very long description", 0.0) == [Send(0, "🔧 Bash: a very long…")]


# --- empty replies ------------------------------------------------------------------------


def test_empty_reply_sends_nothing() -> None:
    s = ChatStreamer()
    assert s.text("", 0.0) == []
    assert s.tick(5.0) == []
    assert s.finish(6.0) == []


def test_reply_with_only_tools_ends_as_the_summary() -> None:
    s = ChatStreamer()
    assert s.tool("Bash", "ls", 0.0) == [Send(0, "🔧 Bash: ls")]
    s.tool("Bash", "pwd", 0.1)
    assert s.finish(0.2) == [Edit(0, "🧰 Bash x2")]
    blind = ChatStreamer(can_edit=False)
    blind.tool("Read", "a", 0.0)
    assert blind.finish(0.1) == [Send(0, "🧰 Read")]


# --- streaming past the limit -------------------------------------------------------------


def test_streaming_past_the_limit_continues_in_a_new_message() -> None:
    s = ChatStreamer(limit=20, throttle=1.0)
    assert s.text("first line\nsecond", 0.0) == [Send(0, "first line\nsecond▍")]
    # 21 characters: the full part is finalised, the rest goes on in message 1.
    assert s.text(" bit", 1.0) == [Edit(0, "first line"), Send(1, "second bit▍")]
    assert s.text(" more", 2.0) == [Edit(1, "second bit more▍")]
    assert s.finish(2.1) == [Edit(1, "second bit more")]
    assert s.shown == final_messages("first line\nsecond bit more", [], 20)


def test_a_held_burst_past_several_limits_is_split_in_one_flush() -> None:
    s = ChatStreamer(limit=10, throttle=1.0)
    s.text("ab", 0.0)
    assert s.text("cdefghij klmnopqrst uvw", 0.5) == []
    assert s.tick(1.0) == [
        Edit(0, "abcdefghij"),
        Send(1, "klmnopqrst"),
        Send(2, "uvw▍"),
    ]


def test_cursor_is_left_out_when_the_text_fills_the_message() -> None:
    s = ChatStreamer(limit=10, throttle=0.0)
    assert s.text("a" * 10, 0.0) == [Send(0, "a" * 10)]
    assert s.text("b", 1.0) == [Send(1, "b▍")]  # hard cut, nothing edited in message 0


def test_summary_goes_on_the_continuation_message() -> None:
    s = ChatStreamer(limit=20, throttle=0.0)
    s.text("abc def", 0.0)
    s.tool("Read", "", 1.0)
    s.text(" ghi jkl mnop qrst", 2.0)  # 25 characters: "abc def ghi jkl mnop" | "qrst"
    assert s.shown == ["abc def ghi jkl mnop", "qrst▍"]
    assert s.finish(3.0) == [Edit(1, "qrst\n\n🧰 Read")]


def test_text_ending_on_a_cut_leaves_nothing_to_continue() -> None:
    s = ChatStreamer(limit=30, throttle=0.0)
    assert s.text("abc " + "d" * 26 + "\n", 0.0) == [Send(0, "abc " + "d" * 26)]  # 31
    assert s.finish(1.0) == []


def test_summary_gets_a_message_of_its_own_after_a_text_ending_on_a_cut() -> None:
    s = ChatStreamer(limit=30, throttle=0.0)
    assert s.text("abc d\n", 0.0) == [Send(0, "abc d\n▍")]
    # 31 characters with the newline at index 30: message 0 is full, nothing follows.
    assert s.text("e" * 24 + "\n", 0.5) == [Edit(0, "abc d\n" + "e" * 24)]
    # A continuation that would hold only a status line is not sent...
    assert s.tool("Read", "a.py", 1.0) == []
    assert s.shown == ["abc d\n" + "e" * 24]
    # ... and the summary, which cannot fit under a full message, gets its own.
    assert s.finish(2.0) == [Send(1, "🧰 Read")]


# --- connectors that cannot edit ----------------------------------------------------------


def test_non_editing_connector_gets_everything_at_finish() -> None:
    s = ChatStreamer(limit=20, can_edit=False)
    assert s.text("hello there", 0.0) == []
    assert s.tool("Bash", "ls", 5.0) == []
    assert s.text(" general kenobi, you are a bold one", 10.0) == []
    assert s.tick(20.0) == []
    assert s.finish(21.0) == [
        Send(0, "hello there general"),
        Send(1, "kenobi, you are a"),
        Send(2, "bold one\n\n🧰 Bash"),
    ]


# --- the whole property -------------------------------------------------------------------


def random_chunks(text: str, rng: random.Random) -> list[str]:
    chunks, i = [], 0
    while i < len(text):
        n = rng.randint(1, 9)
        chunks.append(text[i : i + n])
        i += n
    return chunks


@pytest.mark.parametrize("can_edit", [True, False])
@pytest.mark.parametrize("limit", [5, 12, 40])
def test_any_stream_ends_as_final_messages(can_edit: bool, limit: int) -> None:
    rng = random.Random(limit)
    for _ in range(300):
        words = [rng.choice(["a", "bb", "ccccc", "d" * 13, "\n", " ", "\n\n"]) for _ in range(30)]
        text = "".join(rng.choice([w, w + " "]) for w in words)
        s = ChatStreamer(limit=limit, throttle=1.5, can_edit=can_edit)
        chat = Chat(limit)
        tools: list[str] = []
        t = 0.0
        for chunk in random_chunks(text, rng):
            if rng.random() < 0.2:
                name = rng.choice(["Bash", "Read", "Edit"])
                tools.append(name)
                chat.apply(s.tool(name, rng.choice(["", "x", "a long one"]), t))
            chat.apply(s.text(chunk, t))
            if rng.random() < 0.3:
                chat.apply(s.tick(t + 0.05))
            t += rng.choice([0.1, 0.5, 2.0])
        if not can_edit:
            assert chat.messages == []
        chat.apply(s.finish(t))
        assert chat.messages == final_messages(text, tools, limit), (text, tools)
        assert s.shown == chat.messages


def test_streamed_cuts_match_split_text_at_the_real_limit() -> None:
    text = "word " * 900 + "\n" + "x" * 4100 + " tail"
    _, chat = stream(random_chunks(text, random.Random(1)))
    assert chat.messages == split_text(text)
    assert [len(m) for m in chat.messages] == [3999, 500, 4000, 105]


# --- time and lifecycle -------------------------------------------------------------------


def test_time_comes_from_the_clock_when_not_given() -> None:
    clock = ManualClock()
    s = ChatStreamer(clock)
    assert s.text("a") == [Send(0, "a▍")]
    clock.advance(1.0)
    assert s.text("b") == []
    clock.advance(0.5)
    assert s.tick() == [Edit(0, "ab▍")]


def test_now_may_be_a_datetime() -> None:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    s = ChatStreamer()
    s.text("a", start)
    assert s.text("b", start + dt.timedelta(seconds=1)) == []
    assert s.tick(start + dt.timedelta(seconds=2)) == [Edit(0, "ab▍")]


def test_no_time_and_no_clock_is_an_error() -> None:
    with pytest.raises(ValueError):
        ChatStreamer().text("a")


def test_calls_after_finish_are_refused() -> None:
    s = ChatStreamer()
    s.text("a", 0.0)
    s.finish(1.0)
    assert s.finished
    for call in (lambda: s.text("b", 2.0), lambda: s.tick(2.0), lambda: s.finish(2.0)):
        with pytest.raises(RuntimeError):
            call()


@pytest.mark.parametrize(("limit", "throttle"), [(1, 1.5), (4000, -1.0)])
def test_bad_settings_are_refused(limit: int, throttle: float) -> None:
    with pytest.raises(ValueError):
        ChatStreamer(limit=limit, throttle=throttle)
