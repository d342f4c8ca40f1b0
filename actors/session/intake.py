"""What the user sends: a message (a turn, queued behind the running one, or the answer
to what the chat is asked), a chat command, or a request to generate."""

from __future__ import annotations

from tether.actors.authority import may_decide, refusal_reason
from tether.actors.commands import (
    MODE_COMMANDS,
    PLAN_COMMANDS,
    Command,
    help_text,
    parse_command,
    status_text,
)
from tether.actors.session import endings
from tether.actors.session import turn as turns
from tether.actors.session.effects import ResolveDir
from tether.actors.session.inputs import DirResolved
from tether.actors.session.state import WAITING, Phase
from tether.actors.session.step import Step, log
from tether.events.inbox import RefusedMessage
from tether.events.lifecycle import FINISHED
from tether.events.messages import (
    Accepted,
    ChannelMessage,
    ChatText,
    ErrorReply,
    Generate,
    InteractionAnswer,
    PlanAnswer,
    UserMessage,
)


def on_user_message(step: Step, message: UserMessage) -> None:
    """Store the message first (as the next turn's start, or queued behind the running
    turn), answer Accepted, then act on it. Commands are handled at once instead."""
    session, turn = step.session, step.turn
    accepted = Accepted(session_id=step.session_id, name=session.name)
    if not may_decide(message.user, session.owner, session.home_channel,
                      step.config.approvers):
        _refuse_sender(step, message)
        return
    command = parse_command(message.text)
    if command is not None:
        if _run_command(step, command, message):
            step.reply(accepted)
        return
    if turn.phase in WAITING:
        # Text while the chat is asked something answers it (an approval: no, with the
        # text as the reason); the coordinator decides which (it is not a user message).
        step.send(step.subjects.interactions, ChatText(
            session_id=step.session_id, channel=message.channel, text=message.text,
            user=message.user))
        step.reply(accepted)
        return
    turn.last_input = step.now
    if session.budget_exhausted:
        text = (f"session {session.name} spent ${session.cost_usd:.4f} of its "
                f"${session.budget_usd:.2f} budget and cannot go on; fork it or start a "
                "new session")
        step.send(step.subjects.channel_out(message.channel),
                  ChannelMessage(session_id=step.session_id, kind="error", text=text))
        step.reply(ErrorReply(error="budget_exhausted", reason=text))
        return
    if turn.phase is not Phase.IDLE or session.queued:
        session.queue_user_message(text=message.text, channel=message.channel,
                                   user=message.user)
        step.reply(accepted)
        if turn.phase is Phase.IDLE:
            start_queued(step)
        return
    receive(step, message.text, message.channel, message.user)
    step.reply(accepted)
    turns.begin_turn(step)


def _refuse_sender(step: Step, message: UserMessage) -> None:
    """A message from someone who may not decide for this session (its owner and the
    approvers of its home channel may): a command, an answer or a turn alike, it is
    refused, recorded and told to the sender's chat; nothing of it is stored here."""
    reason = refusal_reason(message.user, "send messages to", step.session.name)
    log.warning("session %s: %s", step.session_id, reason)
    step.recorded.append(RefusedMessage(
        channel=message.channel, user=message.user, kind="not_approver", reason=reason,
        size=len(message.text.encode()), excerpt=message.text))
    step.reply(ErrorReply(error="not_allowed", reason=reason))
    step.send(step.subjects.channel_out(message.channel),
              ChannelMessage(session_id=step.session_id, kind="error", text=reason))


def _run_command(step: Step, command: Command, message: UserMessage) -> bool:
    """Handle a chat command: never stored as a user message, never sent to the model;
    what it did is recorded and told to the channel. False: it is decided once the shell
    has answered a read (``/dir``), which then answers the request."""
    session, phase = step.session, step.turn.phase
    name, result = command.name, ""
    if name == "status":
        result = status_text(session)
    elif name == "clear":
        if phase is not Phase.IDLE:
            result = "a turn is running; send /clear again when it is done"
        else:
            session.clear_context()
            result = "context cleared: the next message starts fresh"
    elif name == "dir":
        if command.args:  # the folder is looked for first (then on_dir_resolved)
            step.effects.append(ResolveDir(command.args, session.workspace,
                                           step.config.workspace_root or session.workspace,
                                           message.user, message.channel))
            return False
        result = f"working directory: {session.workspace}"
    elif name in ("approve", "deny"):
        if phase is not Phase.APPROVAL:
            result = "nothing is waiting for approval"
        else:
            interaction, _, why = command.args.partition(" ")
            queue = step.turn.tool_queue
            step.send(step.subjects.interactions, InteractionAnswer(
                session_id=step.session_id, interaction_id=interaction,
                approved=name == "approve", user=message.user, reason=why.strip(),
                call_id=queue[0].id if queue else "", channel=message.channel))
            result = "answer sent"
    elif name == "default" and phase is Phase.REVIEW:  # seed 000's third choice
        step.send(step.subjects.interactions, PlanAnswer(
            session_id=step.session_id, choice="default", user=message.user,
            channel=message.channel))
        result = "answer sent"
    elif name in MODE_COMMANDS:
        mode = MODE_COMMANDS[name]
        auto = step.config.auto_list(mode)
        session.change_mode(mode=mode, auto_approve=auto, reason=f"/{name}")
        result = f"mode is now {mode}" + (
            f"; auto-approved: {', '.join(auto)}" if auto else "")
        if mode == "plan":
            result += (f"; the plan goes to {step.plan_file()}, and ExitPlanMode asks you "
                       "to review it")
    elif name == "stop":
        if phase is Phase.IDLE:
            result = "no turn is running"
        else:
            endings.stop_turn(step, f"stopped by {message.user}")
            result = "the turn was stopped; the session waits for your next message"
    elif name in PLAN_COMMANDS:
        if phase is not Phase.REVIEW:
            result = "no plan is waiting for review"
        else:
            step.send(step.subjects.interactions, PlanAnswer(
                session_id=step.session_id, choice=PLAN_COMMANDS[name],  # type: ignore[arg-type]
                user=message.user, feedback=command.args, channel=message.channel))
            result = "answer sent"
    else:
        prefix = "" if name == "help" else f"unknown command /{name}. "
        result = prefix + help_text()
    _record_command(step, name, command.args, message.user, message.channel, result)
    return True


def on_dir_resolved(step: Step, resolved: DirResolved) -> None:
    """``/dir`` moves the session to the folder found, between turns only."""
    session, path = step.session, resolved.path
    if path is None:
        root = step.config.workspace_root or session.workspace
        result = f"{resolved.requested!r} is not a folder inside {root}"
    elif step.turn.phase is not Phase.IDLE:
        result = "a turn is running; send /dir again when it is done"
    else:
        session.change_workspace(path=path)
        result = f"working directory is now {path}"
    _record_command(step, "dir", resolved.requested, resolved.user, resolved.channel, result)
    step.reply(Accepted(session_id=step.session_id, name=session.name))


def _record_command(step: Step, name: str, args: str, user: str, channel: str,
                    result: str) -> None:
    """Record what a command did and tell its channel."""
    step.session.run_command(name=name, args=args, user=user, channel=channel, result=result)
    step.send(step.subjects.channel_out(channel),
              ChannelMessage(session_id=step.session_id, kind="status", text=result))


def start_queued(step: Step) -> None:
    """Take up the oldest queued message as the next turn."""
    head = step.session.queued[0]
    receive(step, head.text, head.channel, head.user)
    turns.begin_turn(step)


def receive(step: Step, text: str, channel: str, user: str) -> None:
    """Record ``text`` as the user's message that starts the next turn."""
    session = step.session
    step.turn.gen = None
    resumed = session.status in FINISHED
    session.receive_user_message(text=text, channel=channel, user=user)
    if session.status != "running":
        step.set_status("running", "resumed" if resumed else "user message")


def on_generate(step: Step, message: Generate) -> None:
    """Answer the history as it stands, with no new user message (refused with a reason
    when the session is busy or the request cannot be served)."""
    session = step.session
    history = session.history
    why = ""
    if step.turn.phase is not Phase.IDLE or session.queued:
        why = "a turn is running; generate when it is done (or /stop it)"
    elif message.n > 1 and message.tools:
        why = (f"{message.n} completions cannot run with tools active: ask for one, or "
               "turn tools off (tether generate --no-tools)")
    elif session.budget_exhausted:
        why = f"session {session.name} spent its budget"
    elif not history or history[-1].role != "user":
        why = ("nothing to answer: the session stands at an assistant message (or has "
               "none); send a message, or branch to a user message first")
    if why:
        step.reply(ErrorReply(error="generate_refused", reason=why))
        return
    resumed = session.status in FINISHED
    session.start_generation(n=message.n, tools=message.tools,
                             max_tool_iterations=message.max_tool_iterations,
                             user=message.user)
    if session.status != "running":
        step.set_status("running", "resumed" if resumed else "generate")
    step.turn.last_input = step.now
    step.reply(Accepted(session_id=step.session_id, name=session.name))
    step.turn.gen = message
    turns.begin_turn(step)
