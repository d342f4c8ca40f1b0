"""Where a session's notices go (origin, route) and what a channel missed (output buffer)."""

from __future__ import annotations

import pytest

from tether.actors.chat.routes import (
    BUFFER_BLOCKS,
    LAST_CHARS,
    LAST_LINES,
    UNKNOWN,
    OutputBuffer,
    Route,
    parse_route,
    resolve_origin,
)

# --- resolve_origin ----------------------------------------------------------------------

WORKDIRS = {"/a/b": "dir-b", "/a": "dir-a"}


def test_explicit_origin_wins_over_everything() -> None:
    assert resolve_origin("explicit|1", "request", "/a/b/c", WORKDIRS, "fb") == "explicit|1"


def test_request_channel_comes_before_workdir_and_fallback() -> None:
    assert resolve_origin("", "request|7", "/a/b/c", WORKDIRS, "fb") == "request|7"


def test_workdir_prefix_comes_before_fallback() -> None:
    assert resolve_origin("", "", "/a/b/c", WORKDIRS, "fb") == "dir-b"


def test_fallback_when_no_workdir_matches() -> None:
    assert resolve_origin("", "", "/elsewhere", WORKDIRS, "fb") == "fb"


def test_unknown_when_nothing_applies() -> None:
    assert resolve_origin("", "", "/elsewhere", WORKDIRS, "") == UNKNOWN
    assert resolve_origin("", "", "", {}, "") == "unknown"


def test_empty_workspace_matches_no_prefix() -> None:
    assert resolve_origin("", "", "", {"/": "root"}, "fb") == "fb"


@pytest.mark.parametrize("workspace", ["/a/b", "/a/b/", "/a/b/c", "/a/b/c/d/e.txt"])
def test_prefix_matches_itself_and_paths_below_it(workspace: str) -> None:
    assert resolve_origin("", "", workspace, {"/a/b": "hit"}, "fb") == "hit"


@pytest.mark.parametrize("workspace", ["/a/bc", "/a/b.c", "/a/b-c/d", "/a", "/x/a/b"])
def test_prefix_must_match_on_a_path_boundary(workspace: str) -> None:
    assert resolve_origin("", "", workspace, {"/a/b": "hit"}, "fb") == "fb"


@pytest.mark.parametrize("key", ["/a/b/", "/a/b//", "/a/./b"])
def test_map_keys_are_normalised(key: str) -> None:
    workdirs = {key: "hit"}
    assert resolve_origin("", "", "/a/b/c", workdirs, "fb") == "hit"
    assert resolve_origin("", "", "/a/b", workdirs, "fb") == "hit"
    assert resolve_origin("", "", "/a/bc", workdirs, "fb") == "fb"


def test_root_prefix_matches_every_absolute_path() -> None:
    assert resolve_origin("", "", "/anything/at/all", {"/": "root"}, "fb") == "root"


def test_longest_prefix_wins_regardless_of_dict_order() -> None:
    keys = [("/a", "short"), ("/a/b", "middle"), ("/a/b/c", "long")]
    for order in (keys, list(reversed(keys)), [keys[1], keys[2], keys[0]]):
        workdirs = dict(order)
        assert resolve_origin("", "", "/a/b/c/d", workdirs, "fb") == "long"
        assert resolve_origin("", "", "/a/b/x", workdirs, "fb") == "middle"
        assert resolve_origin("", "", "/a/x", workdirs, "fb") == "short"
        assert resolve_origin("", "", "/a/bc", workdirs, "fb") == "short"


def test_longest_prefix_is_measured_after_normalising() -> None:
    # "/a/b/////" is longer as written but is only "/a/b"; "/a/b/c" is the longer prefix.
    workdirs = {"/a/b/////": "b", "/a/b/c": "c"}
    assert resolve_origin("", "", "/a/b/c/d", workdirs, "fb") == "c"
    assert resolve_origin("", "", "/a/b/d", workdirs, "fb") == "b"


def test_workspace_is_normalised() -> None:
    assert resolve_origin("", "", "/a/x/../b/c", {"/a/b": "hit"}, "fb") == "hit"
    assert resolve_origin("", "", "/a/b/../bc", {"/a/b": "hit"}, "fb") == "fb"


# --- parse_route -------------------------------------------------------------------------


def test_channel_only() -> None:
    assert parse_route("telegram") == Route("telegram")
    assert parse_route("telegram") == Route(channel="telegram", target="", account="")


def test_channel_and_target() -> None:
    assert parse_route("telegram|42") == Route("telegram", target="42")


def test_channel_account_and_target() -> None:
    route = parse_route("telegram|acct|42")
    assert route == Route("telegram", target="42", account="acct")


def test_target_keeps_the_rest_of_the_route() -> None:
    assert parse_route("a|b|c|d") == Route("a", target="c|d", account="b")
    assert parse_route("a|b|c|d|e") == Route("a", target="c|d|e", account="b")


@pytest.mark.parametrize("route", ["", UNKNOWN, "a||b", "|x", "x|", "|", "a|b|", "a|b||c"])
def test_empty_unknown_or_malformed_routes_go_to_the_webhook(route: str) -> None:
    assert parse_route(route) is None


# --- OutputBuffer ------------------------------------------------------------------------


def filled(size: int, count: int) -> OutputBuffer:
    buffer = OutputBuffer(size)
    for n in range(1, count + 1):
        buffer.add(f"block {n}")
    return buffer


def test_add_numbers_blocks_from_one() -> None:
    buffer = OutputBuffer(3)
    assert [buffer.add(f"b{n}") for n in range(5)] == [1, 2, 3, 4, 5]
    assert buffer.total == 5


def test_default_size() -> None:
    buffer = filled(BUFFER_BLOCKS, BUFFER_BLOCKS + 1)
    kept, trimmed = buffer.since(0)
    assert len(kept) == BUFFER_BLOCKS
    assert kept[0][0] == 2
    assert trimmed == 1


def test_empty_buffer_has_nothing_since_anything() -> None:
    buffer = OutputBuffer(3)
    assert buffer.since(0) == ([], 0)
    assert buffer.last_lines() == ""


def test_since_without_trimming() -> None:
    buffer = filled(5, 3)
    assert buffer.since(0) == ([(1, "block 1"), (2, "block 2"), (3, "block 3")], 0)
    assert buffer.since(2) == ([(3, "block 3")], 0)
    assert buffer.since(3) == ([], 0)


def test_since_from_the_start_reports_trimmed_blocks() -> None:
    buffer = filled(3, 5)
    assert buffer.since(0) == ([(3, "block 3"), (4, "block 4"), (5, "block 5")], 2)


def test_since_a_kept_block() -> None:
    buffer = filled(3, 5)
    assert buffer.since(3) == ([(4, "block 4"), (5, "block 5")], 0)
    assert buffer.since(4) == ([(5, "block 5")], 0)


def test_since_the_last_block_is_nothing() -> None:
    buffer = filled(3, 5)
    assert buffer.since(5) == ([], 0)


def test_since_a_trimmed_block_counts_only_the_missed_trimmed_ones() -> None:
    buffer = filled(3, 5)
    assert buffer.since(1) == ([(3, "block 3"), (4, "block 4"), (5, "block 5")], 1)
    assert buffer.since(2) == ([(3, "block 3"), (4, "block 4"), (5, "block 5")], 0)


def test_numbering_stays_absolute_as_trimming_continues() -> None:
    buffer = filled(3, 5)
    assert buffer.add("block 6") == 6
    assert buffer.since(0) == ([(4, "block 4"), (5, "block 5"), (6, "block 6")], 3)
    assert buffer.since(5) == ([(6, "block 6")], 0)


def test_all_trimmed_with_a_zero_size_buffer() -> None:
    buffer = filled(0, 4)
    assert buffer.since(0) == ([], 4)
    assert buffer.since(3) == ([], 1)
    assert buffer.since(4) == ([], 0)


def test_last_lines_takes_the_last_five_non_empty_lines_across_blocks_in_order() -> None:
    buffer = OutputBuffer(10)
    buffer.add("one\ntwo")
    buffer.add("three\n\n   \nfour")
    buffer.add("\nfive\n")
    buffer.add("six\n\nseven\n")
    assert LAST_LINES == 5
    assert buffer.last_lines() == "three\nfour\nfive\nsix\nseven"


def test_last_lines_with_fewer_lines_than_asked() -> None:
    buffer = OutputBuffer(10)
    buffer.add("one")
    buffer.add("")
    buffer.add("two  \n")
    assert buffer.last_lines() == "one\ntwo"


def test_last_lines_within_one_block() -> None:
    buffer = OutputBuffer(10)
    buffer.add("\n".join(f"line {n}" for n in range(1, 9)))
    assert buffer.last_lines() == "line 4\nline 5\nline 6\nline 7\nline 8"
    assert buffer.last_lines(lines=2) == "line 7\nline 8"


def test_last_lines_only_sees_kept_blocks() -> None:
    buffer = OutputBuffer(2)
    for n in range(1, 5):
        buffer.add(f"b{n}")
    assert buffer.last_lines() == "b3\nb4"


def test_last_lines_under_the_limit_is_unchanged() -> None:
    buffer = OutputBuffer(10)
    text = "x" * LAST_CHARS
    buffer.add(text)
    assert buffer.last_lines() == text


def test_last_lines_over_the_limit_keeps_the_end_with_a_leading_ellipsis() -> None:
    buffer = OutputBuffer(10)
    buffer.add("a" * 300)
    buffer.add("b" * 300)
    out = buffer.last_lines()
    assert len(out) == LAST_CHARS
    assert out.startswith("…")
    assert out == "…" + ("a" * 300 + "\n" + "b" * 300)[-(LAST_CHARS - 1):]
    assert out.endswith("b" * 300)


def test_last_lines_character_limit_is_configurable() -> None:
    buffer = OutputBuffer(10)
    buffer.add("abcdef\nghij")
    assert buffer.last_lines(chars=11) == "abcdef\nghij"
    assert buffer.last_lines(chars=10) == "…cdef\nghij"
    assert buffer.last_lines(chars=5) == "…ghij"
    assert buffer.last_lines(lines=1, chars=4) == "ghij"
    assert buffer.last_lines(lines=1, chars=3) == "…ij"
