"""The scripted Anthropic-compatible server, spoken to over raw HTTP (no SDK)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.fake_llm import EXHAUSTED_TEXT, FakeLLM, ScriptError, load_script, parse_script

ROOT = Path(__file__).resolve().parents[2]
HEADERS = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
"""What the SDK sends with every request, and the stand-in (as the API) requires."""

TEXT_AND_TOOL = """
responses:
  - chunk: 5
    blocks:
      - text: "Let me read the file for you."
      - tool_use: {name: read_file, input: {path: README.md, lines: [1, 20]}}
    usage: {input_tokens: 11, output_tokens: 22}
"""


def _post(fake: FakeLLM, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    try:
        conn.request("POST", "/v1/messages", json.dumps(body), HEADERS)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse a server-sent-events body into (event name, data) pairs."""
    out = []
    for frame in raw.decode().split("\n\n"):
        if not frame.strip():
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


TOOLS = [{"name": "read_file", "input_schema": {"type": "object"}}]


def _request(text: str = "hello", stream: bool = True) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }


def _text_of(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(
        d["delta"]["text"]
        for name, d in events
        if name == "content_block_delta" and d["delta"]["type"] == "text_delta"
    )


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(parse_script(TEXT_AND_TOOL)) as server:
        yield server


def test_stream_has_the_messages_api_event_sequence(fake: FakeLLM) -> None:
    status, headers, raw = _post(fake, _request())
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = _sse(raw)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] == 11
    assert start["model"] == "claude-test"

    text_deltas = [d for n, d in events if n == "content_block_delta" and d["index"] == 0]
    assert len(text_deltas) > 1
    assert all(len(d["delta"]["text"]) <= 5 for d in text_deltas)
    assert _text_of(events) == "Let me read the file for you."

    tool_start = next(d for n, d in events if n == "content_block_start" and d["index"] == 1)
    assert tool_start["content_block"]["type"] == "tool_use"
    assert tool_start["content_block"]["name"] == "read_file"
    assert tool_start["content_block"]["id"].startswith("toolu_")
    pieces = [
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    ]
    assert len(pieces) > 1
    assert json.loads("".join(pieces)) == {"path": "README.md", "lines": [1, 20]}

    message_delta = events[-2][1]
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    assert message_delta["usage"]["output_tokens"] == 22
    assert fake.wait_for_completed(1)


def test_requests_are_recorded(fake: FakeLLM) -> None:
    body = _request("please read README.md")
    body["system"] = "be brief"
    _post(fake, body)
    assert fake.requests == [body]
    assert fake.request(0) == fake.request(-1) == body
    fake.requests[0]["system"] = "changed by a reader"
    fake.request(0)["messages"].clear()
    assert fake.requests == [body]  # each read is a copy: the record stays as received
    with pytest.raises(IndexError):
        fake.request(1)


def test_match_selects_and_each_response_is_served_once() -> None:
    script = parse_script(
        """
responses:
  - match: weather
    blocks: [{text: "It is sunny."}]
  - blocks: [{text: "Generic answer."}]
  - match: "file contents"
    blocks: [{text: "Thanks for the file."}]
"""
    )
    with FakeLLM(script) as fake:
        # "weather" does not match: the first response that matches is the generic one
        assert _text_of(_sse(_post(fake, _request("hello"))[2])) == "Generic answer."
        assert _text_of(_sse(_post(fake, _request("what is the weather?"))[2])) == ("It is sunny.")
        tool_result = _request()
        tool_result["tools"] = TOOLS
        tool_result["messages"] = [
            {"role": "user", "content": "read it"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "the file contents"}
                ],
            },
        ]
        assert _text_of(_sse(_post(fake, tool_result)[2])) == "Thanks for the file."
        assert fake.served == 3
        assert fake.remaining == 0


def test_exhausted_script_replies_with_text_and_counts() -> None:
    with FakeLLM(parse_script("responses: []")) as fake:
        status, _, raw = _post(fake, _request())
        assert status == 200
        events = _sse(raw)
        assert _text_of(events) == EXHAUSTED_TEXT
        assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
        assert fake.exhausted == 1


def test_exhausted_script_can_answer_an_error() -> None:
    with FakeLLM(parse_script("on_exhausted: error\nresponses: []")) as fake:
        status, headers, raw = _post(fake, _request())
        assert status == 500
        assert headers["x-should-retry"] == "false"
        body = json.loads(raw)
        assert body["type"] == "error"
        assert body["error"]["type"] == "api_error"
        assert fake.exhausted == 1


def test_scripted_http_error() -> None:
    script = parse_script(
        "responses:\n  - error: {status: 529, type: overloaded_error, message: Overloaded}\n"
    )
    with FakeLLM(script) as fake:
        status, _, raw = _post(fake, _request())
        assert status == 529
        assert json.loads(raw)["error"] == {"type": "overloaded_error", "message": "Overloaded"}


def test_truncate_ends_the_body_without_message_stop() -> None:
    script = parse_script("responses:\n  - truncate: true\n    blocks: [{text: partial}]\n")
    with FakeLLM(script) as fake:
        status, _, raw = _post(fake, _request())
        names = [name for name, _ in _sse(raw)]
        assert status == 200
        assert "message_delta" in names
        assert "message_stop" not in names


def test_tool_ids_are_unique_across_responses() -> None:
    script = parse_script(
        """
responses:
  - blocks: [{tool_use: {name: a}}, {tool_use: {name: b}}]
  - blocks: [{tool_use: {name: a}}]
"""
    )
    with FakeLLM(script) as fake:
        ids = []
        for _ in range(2):
            for name, data in _sse(_post(fake, _request())[2]):
                if name == "content_block_start":
                    ids.append(data["content_block"]["id"])
        assert len(ids) == 3
        assert len(set(ids)) == 3


def test_non_streaming_request_gets_the_whole_message() -> None:
    with FakeLLM(parse_script(TEXT_AND_TOOL)) as fake:
        status, _, raw = _post(fake, _request(stream=False))
        message = json.loads(raw)
        assert status == 200
        assert message["stop_reason"] == "tool_use"
        assert message["content"][0] == {"type": "text", "text": "Let me read the file for you."}
        assert message["content"][1]["input"] == {"path": "README.md", "lines": [1, 20]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("responses:\n  - blocks: [{txt: hi}]\n", "unknown field `txt` - at `$.responses[0]"),
        (
            "responses:\n  - blocks: [{text: hi, tool_use: {name: x}}]\n",
            "exactly one of `text`, `thinking` or `tool_use` - at `$.responses[0].blocks[0]`",
        ),
        ("responses:\n  - blocks: []\n", "non-empty `blocks`"),
        (
            "responses:\n  - error: {status: 529}\n    stream_error: {type: api_error}\n",
            "either `error` or `stream_error`",
        ),
        (
            "responses:\n  - truncate: true\n    blocks: [{text: a}]\n"
            "    stream_error: {type: api_error}\n",
            "either `truncate` or `stream_error`",
        ),
        (
            "responses:\n  - stream_error: {status: 529}\n",
            "unknown field `status` - at `$.responses[0].stream_error`",
        ),
        ("responses:\n  - chunk: 0\n    blocks: [{text: hi}]\n", "`$.responses[0].chunk`"),
        ("on_exhausted: explode\nresponses: []\n", "`$.on_exhausted`"),
        ("{}\n", "missing required field `responses`"),
        ("responses: [\n", "not valid YAML"),
    ],
)
def test_bad_script_is_a_clear_error(text: str, expected: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(text)
    assert expected in str(info.value)


def test_load_script_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("responses:\n  - blocks: [{txt: hi}]\n")
    with pytest.raises(ScriptError, match=r"bad\.yaml: invalid fake-LLM script"):
        load_script(bad)
    with pytest.raises(ScriptError, match=r"missing\.yaml: cannot read"):
        load_script(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text(TEXT_AND_TOOL)
    assert load_script(good).responses[0].chunk == 5


def test_client_disconnect_mid_stream_is_noticed() -> None:
    script = parse_script(
        "responses:\n  - chunk: 1\n    delay_ms: 1000\n    blocks: [{text: 'a long slow answer'}]\n"
    )
    with FakeLLM(script) as fake:
        sock = socket.create_connection(("127.0.0.1", fake.port), timeout=10)
        body = json.dumps(_request()).encode()
        sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"anthropic-version: 2023-06-01\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while b"text_delta" not in received:
            received += sock.recv(65536)
        sock.close()  # the server is now pausing 1 s before the next delta
        assert fake.wait_for_disconnects(1, timeout=5)
        assert fake.completed == 0


def test_command_serves_until_interrupted(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("responses:\n  - blocks: [{text: from the command}]\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "tether.adapters.fake_llm", "--script",
         str(script), "--quiet"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", "/v1/messages", json.dumps(_request()), HEADERS)
        assert _text_of(_sse(conn.getresponse().read())) == "from the command"
        conn.close()
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints where each thread is
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"the stand-in did not stop within 10 s of SIGINT:\n{err[-6000:]}")
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_command_rejects_a_bad_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tether.adapters.fake_llm import main

    script = tmp_path / "script.yaml"
    script.write_text("responses: 3\n")
    assert main(["--script", str(script)]) == 2
    assert "script.yaml" in capsys.readouterr().err


def test_a_conversation_the_real_api_would_refuse_gets_a_400() -> None:
    script = parse_script("responses:\n  - blocks: [{text: never served}]\n")
    unanswered = _request()
    unanswered["tools"] = TOOLS
    unanswered["messages"] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t9", "name": "x", "input": {}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
    ]
    empty_text = _request()
    empty_text["messages"] = [{"role": "user", "content": [{"type": "text", "text": ""}]}]
    stray_result = _request()
    stray_result["tools"] = TOOLS
    stray_result["messages"] = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    reused = _request()
    reused["tools"] = TOOLS
    call = {"type": "tool_use", "id": "t1", "name": "x", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "x"}
    reused["messages"] = [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]}, {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    with FakeLLM(script) as fake:
        for body, expected in (
            (unanswered, "without `tool_result`"),
            (empty_text, "must be non-empty"),
            (stray_result, "unexpected `tool_use_id`"),
            (reused, "`tool_use` ids must be unique: t1"),
        ):
            status, _, payload = _post(fake, body)
            assert status == 400
            error = json.loads(payload)["error"]
            assert error["type"] == "invalid_request_error" and expected in error["message"]
        assert fake.requests == [] and fake.remaining == 1


@pytest.mark.parametrize(("headers", "expected"), [
    ({"anthropic-version": "2023-06-01"}, "Content-Type must be application/json, not none"),
    ({"Content-Type": "text/plain", "anthropic-version": "2023-06-01"},
     "Content-Type must be application/json, not 'text/plain'"),
    ({"Content-Type": "application/json"}, "anthropic-version: header is required"),
])
def test_a_request_without_the_api_s_headers_gets_a_400(
        headers: dict[str, str], expected: str) -> None:
    """As the real API: a body not declared JSON, or without the API's version, is refused
    and uses nothing up. (The SDK sends both; Tether hands it its own encoded body.)"""
    with FakeLLM(parse_script("responses:\n  - blocks: [{text: never served}]\n")) as fake:
        conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
        try:
            conn.request("POST", "/v1/messages", json.dumps(_request()), headers)
            response = conn.getresponse()
            status, payload = response.status, response.read()
        finally:
            conn.close()
        assert status == 400
        error = json.loads(payload)["error"]
        assert error == {"type": "invalid_request_error", "message": expected}
        assert fake.requests == [] and fake.remaining == 1


def test_stream_error_is_an_error_event_after_the_blocks() -> None:
    script = parse_script(
        """
responses:
  - chunk: 4
    blocks: [{text: "half an answer"}, {tool_use: {name: read_file}}]
    stream_error: {type: overloaded_error, message: Overloaded}
"""
    )
    with FakeLLM(script) as fake:
        status, _, raw = _post(fake, _request())
        assert status == 200
        events = _sse(raw)
        names = [name for name, _ in events]
        assert names[:2] == ["message_start", "ping"]
        assert names.count("content_block_stop") == 2  # both blocks are streamed whole
        assert "message_delta" not in names and "message_stop" not in names
        assert events[-1] == (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
        assert _text_of(events) == "half an answer"
        assert fake.wait_for_completed(1)


def test_stream_error_without_blocks_follows_message_start() -> None:
    script = parse_script("responses:\n  - stream_error: {type: api_error, message: boom}\n")
    with FakeLLM(script) as fake:
        names = [name for name, _ in _sse(_post(fake, _request())[2])]
        assert names == ["message_start", "ping", "error"]


def test_stream_error_without_stream_is_the_matching_http_error() -> None:
    script = parse_script(
        "responses:\n  - blocks: [{text: hi}]\n"
        "    stream_error: {type: overloaded_error, message: Overloaded}\n"
    )
    with FakeLLM(script) as fake:
        status, _, raw = _post(fake, _request(stream=False))
        assert status == 529
        assert json.loads(raw)["error"] == {"type": "overloaded_error", "message": "Overloaded"}


def _with_tool_history(body: dict[str, Any]) -> dict[str, Any]:
    body["messages"] = [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    return body


@pytest.mark.parametrize("tools", [None, []])
def test_tool_blocks_in_a_request_without_tools_get_a_400(tools: list[Any] | None) -> None:
    script = parse_script("responses:\n  - blocks: [{text: never served}]\n")
    body = _with_tool_history(_request())
    if tools is not None:
        body["tools"] = tools
    with FakeLLM(script) as fake:
        status, _, payload = _post(fake, body)
        assert status == 400
        assert json.loads(payload)["error"] == {
            "type": "invalid_request_error",
            "message": "messages.1: Requests which include `tool_use` or `tool_result` "
            "blocks must define tools.",
        }
        assert fake.requests == [] and fake.remaining == 1
        body["tools"] = TOOLS  # the same conversation with tools is served
        assert _post(fake, body)[0] == 200
        assert fake.remaining == 0


def test_tool_choice_is_recorded() -> None:
    with FakeLLM(parse_script("responses:\n  - blocks: [{text: plain}]\n")) as fake:
        body = _with_tool_history(_request())
        body["tools"] = TOOLS
        body["tool_choice"] = {"type": "none"}
        status, _, raw = _post(fake, body)
        assert status == 200 and _text_of(_sse(raw)) == "plain"
        assert fake.requests[0]["tool_choice"] == {"type": "none"}
        assert fake.script_errors == []


@pytest.mark.parametrize(
    ("tools", "choice", "expected"),
    [
        (TOOLS, {"type": "sometimes"}, "tool_choice.type: must be one of"),
        (TOOLS, "none", "tool_choice.type: must be one of"),
        (None, {"type": "any"}, "`any` may only be specified while providing tools"),
        (TOOLS, {"type": "tool"}, "tool_choice.name"),
        (TOOLS, {"type": "tool", "name": "write_file"}, "`write_file` is not among"),
    ],
)
def test_an_invalid_tool_choice_gets_a_400(
    tools: list[Any] | None, choice: Any, expected: str
) -> None:
    with FakeLLM(parse_script("responses:\n  - blocks: [{text: never}]\n")) as fake:
        body = _request()
        if tools is not None:
            body["tools"] = tools
        body["tool_choice"] = choice
        status, _, payload = _post(fake, body)
        assert status == 400
        assert expected in json.loads(payload)["error"]["message"]
        assert fake.requests == [] and fake.remaining == 1


@pytest.mark.parametrize(
    ("choice", "blocks", "expected"),
    [
        ({"type": "none"}, "[{text: a}, {tool_use: {name: read_file}}]", "is `none`"),
        ({"type": "any"}, "[{text: only text}]", "is `any` but"),
        (
            {"type": "tool", "name": "read_file"},
            "[{tool_use: {name: other}}]",
            "tool `read_file` but",
        ),
    ],
)
def test_a_response_impossible_under_tool_choice_is_a_script_problem(
    choice: dict[str, Any], blocks: str, expected: str
) -> None:
    script = parse_script(f"responses:\n  - blocks: {blocks}\n")
    with FakeLLM(script) as fake:
        body = _request()
        body["tools"] = [*TOOLS, {"name": "other", "input_schema": {"type": "object"}}]
        body["tool_choice"] = choice
        status, headers, payload = _post(fake, body)
        assert status == 500
        assert headers["x-should-retry"] == "false"
        error = json.loads(payload)["error"]
        assert error["type"] == "api_error"
        assert error["message"].startswith("fake LLM script problem: response 1: ")
        assert expected in error["message"]
        assert fake.script_errors == [error["message"]]
        assert len(fake.requests) == 1  # a valid request: recorded, the response used up


def test_the_stand_in_answers_without_nagles_delay() -> None:
    """A quick second call on the same connection must not wait ~40 ms for a delayed ACK:
    the server's connections have TCP_NODELAY."""
    from tether.adapters.fake_llm.server import _Handler

    assert _Handler.disable_nagle_algorithm is True
