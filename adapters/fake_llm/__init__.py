"""A local stand-in for the Anthropic Messages API that plays scripted responses.

``FakeLLM`` is a real HTTP server (standard library only: ``ThreadingHTTPServer`` on daemon
threads) answering ``POST /v1/messages``. With ``"stream": true`` it replies with the same
server-sent events the real API sends, so the real ``anthropic`` SDK parses them:
``message_start`` (with ``message.usage``), ``ping``, ``content_block_start`` /
``content_block_delta`` / ``content_block_stop`` per block (``text_delta`` for text,
``input_json_delta`` for tool calls, the input JSON split into several ``partial_json``
chunks), ``message_delta`` (``stop_reason`` and ``usage``) and ``message_stop``. Without
``stream`` it answers with the whole message as one JSON object.

It runs in-process (``with FakeLLM(parse_script(text)) as llm: ... llm.base_url``) or as a
command (``tether fake-llm --script FILE``, see :func:`main`).

Script format (YAML, decoded strictly: unknown keys, wrong types and missing values are
errors that name the place, e.g. ``... - at `$.responses[0].blocks[1]```)::

    on_exhausted: reply          # optional: "reply" (default) or "error"
    responses:
      - match: "optional substring"  # served only when the request's last user message
                                     # (its text, or its tool_result content) contains it
        chunk: 8                     # optional: characters per delta (default 12)
        delay_ms: 0                  # optional: pause between deltas (default 0)
        truncate: false              # optional: end the stream cleanly but without
                                     # message_stop (fault injection)
        blocks:                      # each block has exactly one of text / thinking /
          - text: "Hello there"      # tool_use
          - tool_use: {name: read_file, input: {path: README.md}}
        usage: {input_tokens: 10, output_tokens: 20}  # optional, else estimated
      - error: {status: 529, type: overloaded_error, message: "Overloaded"}
                                     # optional instead of blocks: answer with this HTTP
                                     # error (Anthropic error JSON); served once like any
                                     # other response
      - blocks: [{text: "Half an ans"}]        # may be empty
        stream_error: {type: overloaded_error, message: "Overloaded"}
                                     # stream the blocks (HTTP 200), then an `error` event
                                     # instead of message_delta / message_stop; a request
                                     # without `stream` gets the matching HTTP error

Selection: each request is served the first not-yet-served response whose ``match``
matches (a response without ``match`` matches anything); each response is served once, so
unmatched responses keep their order. When none is left the server answers a plain text
reply ``(script exhausted)`` and counts it in :attr:`FakeLLM.exhausted`; with
``on_exhausted: error`` it answers HTTP 500 with an Anthropic-style error body (and
``x-should-retry: false`` so the SDK does not retry).

Requests the real API would refuse (see :func:`header_problem`: a JSON body and the
``anthropic-version`` header; :func:`request_problem`: the conversation) get HTTP 400 and
use up nothing. A scripted response the real API could not have given under the request's
``tool_choice`` (a tool_use block under ``{"type": "none"}``; none, or not the named tool,
under ``any`` / ``tool``) is a script problem: HTTP 500 ``api_error`` with
``x-should-retry: false``, listed in :attr:`FakeLLM.script_errors`.

``stop_reason`` is ``tool_use`` when the response has a tool_use block, else ``end_turn``.
Tool-use ids are unique per server (``toolu_fake_0001``...) unless a script names one.
Every request body received is recorded (:attr:`FakeLLM.requests`). A client that
disconnects mid-stream is noticed (also while pausing between deltas), counted in
:attr:`FakeLLM.disconnects`, and the stream stops without a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from tether.adapters.fake_llm.checks import (
    header_problem,
    request_problem,
    tool_choice_problem,
)
from tether.adapters.fake_llm.script import (
    DEFAULT_CHUNK,
    ERROR_STATUS,
    EXHAUSTED_TEXT,
    Block,
    ErrorSpec,
    Response,
    Script,
    ScriptError,
    StreamErrorSpec,
    ToolUseSpec,
    UsageSpec,
    load_script,
    parse_script,
)
from tether.adapters.fake_llm.server import FakeLLM

__all__ = [
    "DEFAULT_CHUNK",
    "ERROR_STATUS",
    "EXHAUSTED_TEXT",
    "Block",
    "ErrorSpec",
    "FakeLLM",
    "Response",
    "Script",
    "ScriptError",
    "StreamErrorSpec",
    "ToolUseSpec",
    "UsageSpec",
    "header_problem",
    "load_script",
    "main",
    "parse_script",
    "request_problem",
    "tool_choice_problem",
]


def main(argv: list[str] | None = None) -> int:
    """``tether fake-llm --script FILE [--host H] [--port P]``: serve a script until Ctrl-C.

    Prints the base URL on the first line of standard output; returns 0 on Ctrl-C or
    SIGTERM, 2 when the script is invalid or the address cannot be bound.
    """
    parser = argparse.ArgumentParser(
        prog="tether fake-llm",
        description=(
            "Serve scripted responses over the Anthropic Messages API (streaming server-sent "
            "events), for tests and demos without network. Point the SDK at it with "
            "ANTHROPIC_BASE_URL=<printed URL>. Script format: see docs/fake-llm.md."
        ),
    )
    parser.add_argument("--script", required=True, metavar="FILE", help="YAML script to play")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=0, help="port to bind; 0 picks a free one (default 0)"
    )
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    args = parser.parse_args(argv)

    try:
        script = load_script(args.script)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(f"fake-llm: {line}", file=sys.stderr, flush=True)

    fake = FakeLLM(script, host=args.host, port=args.port, log=None if args.quiet else log)
    try:
        fake.start()
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    print(fake.base_url, flush=True)
    if not args.quiet:
        log(f"serving {len(script.responses)} scripted responses; Ctrl-C to stop")
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0
