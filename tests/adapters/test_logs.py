"""Log lines as text or JSON, with the session they concern: the formatter directly, then
`tether serve --log-format json` as an operator runs it."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import Serve, engine_env, wait_until
from tether.actors.log_context import bound_session
from tether.actors.runtime import RemoteError, ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.logs import configure_logging
from tether.adapters.nats_bus import NatsBus
from tether.events.messages import Accepted, UserMessage
from tether.events.subjects import Subjects

log = logging.getLogger("tests.logs")


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_bound_session_and_only_there() -> None:
    out = io.StringIO()
    handler = configure_logging(verbose=True, log_format="json", stream=out)
    try:
        log.info("no session here")
        with bound_session("s-1"):
            log.warning("inside s-1 %s", "ü")
            threading.Thread(target=contextvars.copy_context().run,
                             args=(log.info, "a thread started with the context")).start()
            threading.Thread(target=log.info, args=("a bare thread",)).start()
        log.error("named explicitly", extra={"session_id": "s-2"})
        with bound_session("s-1"):
            log.error("an explicit session wins", extra={"session_id": "s-3"})
        wait_until(lambda: len(out.getvalue().splitlines()) == 6, "six lines")
    finally:
        logging.getLogger().removeHandler(handler)
    got = {str(line["message"]): line.get("session_id") for line in lines(out)}
    assert got == {"no session here": None, "inside s-1 ü": "s-1",
                   "a thread started with the context": "s-1", "a bare thread": None,
                   "named explicitly": "s-2", "an explicit session wins": "s-3"}
    first = lines(out)[0]
    assert {"time", "level", "logger", "message"} <= set(first)
    assert first["level"] == "INFO" and first["logger"] == "tests.logs"


def test_text_lines_stay_text() -> None:
    out = io.StringIO()
    handler = configure_logging(verbose=False, stream=out)
    try:
        log.info("not shown without -v")
        with bound_session("s-1"):
            log.warning("shown")
    finally:
        logging.getLogger().removeHandler(handler)
    [line] = out.getvalue().splitlines()
    assert line.endswith(" WARNING tests.logs: shown")


def test_serve_logs_json_lines_naming_the_session(
    tmp_path: Path, nats_url: str, namespace: str, workspace: Path,
    fake_llm: Callable[[str], FakeLLM],
) -> None:
    llm = fake_llm('responses:\n  - blocks: [{text: "Hello."}]\n')
    env = engine_env(tmp_path, nats_url, namespace, workspace, llm.base_url)
    serve = Serve(env, tmp_path / "serve.log", command=("-v", "serve", "--log-format", "json"))
    bus = NatsBus(nats_url)
    subjects = Subjects(namespace)
    try:
        sid = ask(bus, subjects.inbox, UserMessage(text="hi", channel="c", user="ana"),
                  Accepted).session_id
        with pytest.raises(RemoteError, match="not_allowed"):
            ask(bus, subjects.inbox,
                UserMessage(text="/stop", channel="c", user="mallory", session_id=sid),
                Accepted)
    finally:
        bus.close()
        assert serve.stop() == 0
    records = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    about = [r for r in records if sid in str(r["message"])]
    assert any(r["level"] == "WARNING" and "mallory" in str(r["message"]) for r in about)
    assert all(r.get("session_id") == sid for r in about)  # every line about it names it


def test_a_json_line_is_one_line_whatever_a_message_holds() -> None:
    out = io.StringIO()
    handler = configure_logging(verbose=True, log_format="json", stream=out)
    try:
        log.warning('odd: "quoted"\n{"level": "ERROR"} \u2028 split \u2029 here \x85 end')
    finally:
        logging.getLogger().removeHandler(handler)
    text = out.getvalue()
    assert text.count("\n") == 1 and len(text.splitlines()) == 1  # no separator leaks
    [record] = lines(out)
    assert record["level"] == "WARNING" and "\u2028" in str(record["message"])
