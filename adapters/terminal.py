"""The terminal connector: type a message, watch the reply stream in.

It is an ordinary bus client: it publishes UserMessages on its user's inbox
``<ns>.inbox.<user>`` (the only one a connector's NATS user may publish on; the engine takes
the sender from that subject) with its own channel name and prints what arrives on
``<ns>.channel.<channel>.out``. A turn ends at its ``completed`` or ``failed`` notice.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import queue
import sys
from collections.abc import Callable
from typing import TextIO

from tether.actors.ports import Bus
from tether.actors.runtime import ask
from tether.events.codec import DecodeFailure, Decoder
from tether.events.messages import Accepted, ChannelMessage, UserMessage
from tether.events.subjects import Subjects

TURN_END = ("completed", "failed")
QUESTION = ": may I run "
"""What marks an approval notice as a question (not its outcome)."""
CHAT_ONLY = {"quit": "leave the chat (the session stays; Ctrl-D too)"}
"""The terminal's own commands, handled before anything is sent."""
REVIEW = " is ready for review:"
"""What marks a plan notice as a review to answer (not its outcome)."""


class TerminalConnector:
    """A chat channel printed to a text stream."""

    def __init__(
        self,
        bus: Bus,
        subjects: Subjects,
        *,
        channel: str | None = None,
        out: TextIO | None = None,
        workspace: str = "",
        answer: Callable[[str], str] | None = None,
        user: str = "",
    ) -> None:
        self.bus = bus
        self.subjects = subjects
        self.user = user or getpass.getuser()
        """The principal this terminal's messages come from: the OS user running it."""
        try:
            self.inbox_subject = subjects.inbox_for(self.user)
        except ValueError:  # a user name that is no subject token: only an engine's bus
            self.inbox_subject = subjects.inbox  # may send there, with ``user`` trusted
        """Where its messages go: ``<ns>.inbox.<user>``."""
        self.channel = channel or f"terminal-{os.getpid()}"
        self.out = out or sys.stdout
        self.workspace = workspace
        self.answer = answer
        """Asks the person at the terminal (approvals, questions and plan reviews during a
        turn); None: nobody to ask."""
        self.session_id = ""
        self._turns_left = 1
        self._last_notice: dict[str, int] = {}
        """Per session, the highest notice number shown: a notice sent again after a
        crash is dropped."""
        self._command = False
        self.inbox: queue.Queue[ChannelMessage] = queue.Queue()
        decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)

        def on_message(data: bytes) -> None:
            with contextlib.suppress(DecodeFailure):  # not ours to judge: skip it
                self.inbox.put(decoder.decode(data))

        self._sub = bus.subscribe(subjects.channel_out(self.channel), lambda m: on_message(m.data))

    def say(self, text: str, timeout: float = 10.0) -> str:
        """Send a message (continuing the current session) and return the session id."""
        accepted = ask(
            self.bus,
            self.inbox_subject,
            UserMessage(
                text=text,
                channel=self.channel,
                session_id=self.session_id,
                workspace=self.workspace,
                user=self.user,
            ),
            Accepted,
            timeout=timeout,
        )
        self.session_id = accepted.session_id
        self._command = text.strip().startswith("/")
        return self.session_id

    def print_turn(self, timeout: float = 120.0) -> ChannelMessage:
        """Print the session's messages until the turn ends (and the implementation turn
        an approved plan starts); returns the last notice."""
        streaming = False
        stream_seq = 0
        self._turns_left = 1
        while True:
            try:
                msg = self.inbox.get(timeout=timeout)
            except queue.Empty:
                self._line(f"[no answer within {timeout:g} s]")
                raise TimeoutError(f"no answer within {timeout:g} s") from None
            if msg.kind not in ("stream", "catchup") and msg.seq:
                if msg.seq <= self._last_notice.get(msg.session_id, 0):
                    continue
                self._last_notice[msg.session_id] = msg.seq
            if msg.kind == "stream":
                if streaming and msg.seq <= stream_seq:  # a new generation (a retry)
                    self.out.write("\n")
                    streaming = False
                stream_seq = msg.seq
                if not streaming:
                    self.out.write("assistant> ")
                    streaming = True
                self.out.write(msg.text)
                self.out.flush()
                continue
            if streaming:
                self.out.write("\n")
                streaming = False
            if msg.kind == "reply":
                continue  # already shown as it streamed
            if msg.kind == "approval" and self.answer is not None and QUESTION in msg.text:
                self._line(f"  ? {msg.text}")
                self._answer_approval(msg.text.split()[1].rstrip(":"))
                continue
            if msg.kind == "question" and self.answer is not None and msg.text.startswith(
                    "question ") and "\nReply with your answer" in msg.text:
                self._line(f"  ? {msg.text.split(chr(10) + 'Reply with', 1)[0]}")
                self._reply(self.answer("answer> ").strip() or "(no answer)")
                continue
            if msg.kind == "plan" and self.answer is not None and REVIEW in msg.text:
                self._line(f"  ? {msg.text}")
                self._review_plan()
                continue
            prefix = {"tool": "  ", "interrupted": "  ! ", "failed": "  x "}.get(msg.kind, "  ")
            self._line(f"{prefix}[{msg.kind}] {msg.text}")
            if msg.kind in TURN_END:
                self._turns_left -= 1
            if (msg.kind in TURN_END and self._turns_left <= 0) or msg.kind == "error" or (
                self._command and msg.kind == "status"
            ):
                return msg

    def _answer_approval(self, interaction_id: str) -> None:
        assert self.answer is not None
        reply = self.answer("approve? [y/N or a reason] ").strip()
        if reply.startswith("/"):  # a command, as the notice says to type it: as typed
            self.say(reply)
        elif reply.lower() in ("y", "yes"):
            self.say(f"/approve {interaction_id}")
        else:
            self.say(f"/deny {interaction_id} {reply}".rstrip())
        self._command = False  # keep waiting for the turn's end

    def _review_plan(self) -> None:
        assert self.answer is not None
        reply = self.answer("proceed, clean, default, or what to change> ").strip()
        if reply.startswith("/"):  # a command, as the notice says to type it: as typed
            command = reply.split(maxsplit=1)[0].lower()
            self._reply(reply)
        else:  # this prompt's own words are its buttons; anything else is feedback
            command = {"proceed": "/proceed", "p": "/proceed", "y": "/proceed",
                       "yes": "/proceed", "clean": "/clean", "c": "/clean",
                       "default": "/default", "d": "/default"}.get(reply.lower(), "")
            self._reply(command or f"/adjust {reply}".rstrip())
        if command in ("/proceed", "/clean", "/default"):
            self._turns_left += 1  # the implementation turn follows the planning turn

    def _reply(self, text: str) -> None:
        self.say(text)
        self._command = False  # keep waiting for the turn's end

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        """Stop listening."""
        self._sub.close()
