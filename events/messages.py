"""The typed message protocol: every message that crosses an actor boundary.

Each message is a msgspec Struct tagged with ``type`` (its class name in snake case), so
a JSON object such as ``{"type": "user_message", "text": "hi", ...}`` decodes strictly to
the right class. Unions below list what each subject accepts; :mod:`events.codec` turns
them into strict decoders. Fields are plain JSON types so any language can join the bus.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+\Z", max_length=64)]
"""A name that becomes one NATS subject token (session ids, channel names)."""

FilePath = Annotated[str, msgspec.Meta(pattern=r"^[^\x00]*\Z", max_length=4096)]
"""A path a message names for the engine to resolve: no NUL (the file system refuses one,
and Python raises), at most PATH_MAX."""

Version = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
"""An aggregate's version named in a request: one past what a store's 64-bit integer
holds would fail the store's read, in the actor that serves the request."""

OptionalToken = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]*\Z", max_length=64)]
"""A Token, or empty."""

Text = Annotated[str, msgspec.Meta(min_length=1)]
"""Non-empty text (the Messages API refuses empty text blocks)."""


def _snake(name: str) -> str:
    out: list[str] = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class Message(msgspec.Struct, tag_field="type", tag=_snake, kw_only=True):
    """Base of every bus message; the ``type`` tag is the snake-cased class name."""


# --- content blocks (shared by events and messages) -------------------------------------
# Not tracked by the garbage collector (gc=False): they never refer back to themselves,
# and a long history holds thousands (events.conversation.Turn).


class TextBlock(msgspec.Struct, tag_field="type", tag="text", gc=False):
    """Assistant or user text."""

    text: str


class ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use", gc=False):
    """A tool call the model asked for."""

    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result", gc=False):
    """The result of a tool call, sent back to the model."""

    tool_use_id: str
    content: str
    is_error: bool = False


ContentBlock = TextBlock | ToolUseBlock | ToolResultBlock


class Usage(msgspec.Struct):
    """Token usage reported by the model for one response."""

    input_tokens: int = 0
    output_tokens: int = 0


# --- connectors -> engine ---------------------------------------------------------------


class UserMessage(Message):
    """A user's message, published on ``<ns>.inbox`` by any connector.

    ``channel`` names the connector (replies go to ``<ns>.channel.<channel>.out``);
    ``session_id`` continues a session (its id or its name; a finished one resumes),
    empty starts a new one.
    """

    text: Text
    channel: Token
    session_id: OptionalToken = ""
    user: str = "user"
    workspace: str = ""
    single_turn: bool = False
    """A new session that finishes (completed or failed) after this message's turn."""
    budget_usd: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """A new session's budget in dollars (0: the configured default)."""
    origin: Annotated[str, msgspec.Meta(max_length=256)] = ""
    """A new session's route for background notices (``channel``, ``channel|target`` or
    ``channel|account|target``); empty: this message's channel."""


class Accepted(Message):
    """Reply to a UserMessage sent as a request: the session that took it, and its name."""

    session_id: str
    name: str = ""


class ErrorReply(Message):
    """A typed error answer to a request that could not be served."""

    error: str
    reason: str


# --- engine -> connectors ---------------------------------------------------------------

NoticeKind = Literal[
    "stream", "reply", "tool", "interrupted", "completed", "failed", "status", "error",
    "approval", "question", "plan", "budget", "waiting", "reminder", "catchup",
]


class ChannelMessage(Message):
    """What a connector receives on ``<ns>.channel.<channel>.out``."""

    session_id: str
    kind: NoticeKind
    text: str
    seq: int = 0
    """Stream deltas: the delta's number; notices: the delivery's number, the same if
    it is ever sent again (after a crash between sending and recording it), so a
    connector can drop repeats."""
    target: str = ""
    """The conversation inside the connector (route ``channel|target``), if any."""
    account: str = ""
    """The connector account (route ``channel|account|target``), if any."""


class WatchSession(Message):
    """Connector -> router on ``<ns>.router``: watch a session in the foreground (its
    live stream and every notice, after a catch-up of the replies the channel missed) or
    put it in the background (only its endings, with their last lines of output).
    Answered with Watching."""

    session_id: Token
    channel: Token
    foreground: bool = True


class Watching(Message):
    """The router's answer to WatchSession: ``caught_up`` replies were sent again,
    ``trimmed`` more were missed but are no longer kept."""

    session_id: str
    channel: str
    foreground: bool
    caught_up: int = 0
    trimmed: int = 0


class PlannedNotice(msgspec.Struct, kw_only=True):
    """A notice a stored session event makes, as the notice outbox keeps it: ``id`` is
    ``<position>.<n>``, the ``n``-th notice of the event at notification id
    ``position``; ``generation`` is a reply's model call (else 0)."""

    id: str
    position: int
    n: int
    session_id: str
    kind: str
    text: str
    audience: str
    generation: int = 0


class NoticesPlanned(Message):
    """Session -> router on ``<ns>.notices`` (the engine's own subject): the notices the
    events the session just saved make, so they go out without waiting for the notice
    outbox to read them from the store. The outbox plans the same notices (same ids);
    the router sends each once, and one lost on the way is sent from the outbox."""

    session_id: Token
    notices: list[PlannedNotice]
    after: int = 0
    """The position of the last notice this session told of before these (-1: not known,
    its actor started or restarted since): a router that has not had that one (one was
    lost on the way, or either side restarted) reads the outbox first, so what came before
    goes out before these."""


# --- session manager --------------------------------------------------------------------


class ListSessions(Message):
    """Ask the manager for the known sessions."""


class SessionSummary(msgspec.Struct):
    """One line of the session view."""

    session_id: str
    name: str
    status: str
    turns: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    last_activity: str


class SessionList(Message):
    """The manager's answer to ListSessions."""

    sessions: list[SessionSummary]


class KillSession(Message):
    """Stop a session now (manager or session subject)."""

    session_id: Token
    reason: str = "killed by user"


class ForkSession(Message):
    """Start a new session whose history is ``session_id``'s (id or name) up to its event
    ``at_version`` (0: the latest), or the path to its tree's node ``at_node``. Answered
    with Accepted naming the new session."""

    session_id: Token
    at_version: Version = 0
    at_node: str = ""
    """A node of the source's conversation tree (its id, a unique prefix, or a bookmark):
    the fork's history is the path to it. Not together with ``at_version``."""
    channel: OptionalToken = ""
    """Where to report a refusal and the fork's home channel; empty: none yet (its
    background notices go to the configured working-directory map or fallback until
    someone writes to it)."""
    user: str = "user"


class Killed(Message):
    """Reply to KillSession."""

    session_id: str
    found: bool


# --- session ----------------------------------------------------------------------------


class Reminder(msgspec.Struct):
    """Rules that matched without aborting (``interrupt: never``, or a match outside the
    rule's interrupt scope): ``text`` joins the history after the turn."""

    rules: list[str]
    text: str


class Interrupt(Message):
    """Sent by the TTSR monitor on ``<ns>.session.<id>``: abort the current generation,
    then retry with ``reminder``; ``context_mode`` says whether the partial reply stays.
    ``later`` carries reminders of non-aborting rules that matched in this generation."""

    session_id: Token
    generation: int
    rules: list[str]
    reminder: str
    source: str = "text"
    context_mode: Literal["discard", "keep"] = "discard"
    later: list[Reminder] = []


class StreamDelta(Message):
    """Published by a session on ``<ns>.session.<id>.stream`` (core NATS, not stored).

    ``kind`` is ``turn_start`` when a new model call begins (buffers reset), ``text`` or
    ``tool_input`` for content, ``tool_start`` when a tool_use block opens (``text`` holds
    the tool name) and ``end`` when the model's message is complete. ``turn_start`` carries
    the ``channel`` the reply should go to and ``turn``, the number of turns the session
    completed before this one (TTSR repeat gaps count them).
    """

    session_id: Token
    generation: int
    seq: int
    kind: Literal["turn_start", "text", "thinking", "tool_start", "tool_input", "end"]
    text: str = ""
    block: int = 0
    channel: OptionalToken = ""
    turn: int = 0


# --- generation events (session -> anyone on <ns>.session.<id>.events) ------------------
#
# Published as the loop goes, in order: for each model call provider_request then
# provider_response then assistant_node; one tool_result_node per tool result once the
# message of results is complete; the turn (or generation) ends with one
# generation_done or one generation_error. Core NATS, not stored: each is derived from
# stored session and forest events, which a replay reads instead.


class GenerationEvent(Message):
    """Common fields: the session, the turn it belongs to (turns ended before it, failed
    ones too, counted from 0) and the event's number in that turn (from 1)."""

    session_id: Token
    turn: int
    seq: int


class ProviderRequest(GenerationEvent):
    """A model call is made: what it sends."""

    model: str
    messages: int
    input_tokens: int
    """Estimated from the text's length."""
    max_tokens: int
    """After clamping (at least 1)."""
    tools: list[str]
    tool_choice: str = "auto"
    """``none``: the tools are defined (the history holds tool blocks) but not to be used,
    as in a generation asked for without tools."""


class ProviderResponse(GenerationEvent):
    """The model call's answer was complete."""

    stop_reason: str
    usage: Usage


class AssistantNode(GenerationEvent):
    """An assistant message was appended to the conversation tree at ``node_id``."""

    node_id: str
    parent_id: str
    content: list[ContentBlock]


class ToolResultNode(GenerationEvent):
    """A tool result is in the conversation tree: ``node_id`` is the message of results
    that holds it (one per assistant message whose calls it answers)."""

    node_id: str
    call_id: str
    is_error: bool
    content: str


class GenerationDone(GenerationEvent):
    """The turn ended normally: ``nodes`` are its final assistant nodes (seed 003: one for
    a single completion, not every message made on the way; one per completion when
    several were asked for), ``stop`` why it ended."""

    nodes: list[str]
    stop: str


ErrorKind = Literal["aborted", "tool_iteration_limit", "provider", "budget", "failed"]


class GenerationError(GenerationEvent):
    """The turn ended with an error of ``kind``: ``aborted`` (stopped or killed; no model
    call follows), ``tool_iteration_limit`` (a generation's tool loop ran past its limit),
    ``provider`` (the model call failed), ``budget`` or ``failed`` (anything else)."""

    kind: ErrorKind
    message: str


AnyGenerationEvent = (
    ProviderRequest | ProviderResponse | AssistantNode | ToolResultNode | GenerationDone
    | GenerationError
)


# --- the conversation tree (requests to a session on its subject) -----------------------


TREE_PAGE_MAX = 1000
"""Nodes one TreeView carries at most, so a reply stays well under NATS's 1 MiB limit."""


class TreeQuery(Message):
    """Ask a session for its conversation tree (answered with TreeView): ``limit`` nodes
    (at most :data:`TREE_PAGE_MAX`) from node ``offset`` of the depth-first order."""

    session_id: Token
    offset: int = 0
    limit: int = 500


class TreeNode(msgspec.Struct, kw_only=True):
    """One node of a TreeView: ``depth`` from its root (0), children in order."""

    node_id: str
    parent_id: str
    role: str
    depth: int
    text: str
    """The node's text, or a line naming its tool blocks."""
    children: int
    bookmarks: list[str] = msgspec.field(default_factory=list)


class TreeView(Message):
    """A page of a session's tree, depth first, and the node its history ends at (its
    cursor). ``total`` nodes in all; ``version``, the tree's, changes whenever the tree
    does, so a reader paging through can tell that it should start again."""

    session_id: str
    cursor: str
    nodes: list[TreeNode]
    offset: int = 0
    total: int = 0
    version: int = 0


class BranchTo(Message):
    """Move the session to ``node_id`` of its tree: its history becomes the path to it,
    and its next message continues from there. Answered with Branched or ErrorReply."""

    session_id: Token
    node_id: Text
    user: str = "user"


class EditNode(Message):
    """Edit a text node of the session's tree (in place without children, else as a
    branch) and move the session there. Answered with Branched or ErrorReply."""

    session_id: Token
    node_id: Text
    text: str
    user: str = "user"


class Generate(Message):
    """Generate the next assistant message from the session's position with no new user
    message: ``n`` completions (each its own branch; several only with ``tools`` off),
    at most ``max_tool_iterations`` model calls (seed 003; 0 counts as 1): a call past
    them that asks for tools ends the generation with the typed limit error. Answered
    with Accepted, or ErrorReply when refused."""

    session_id: Token
    n: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1
    tools: bool = True
    max_tool_iterations: Annotated[int, msgspec.Meta(ge=0)] = 5
    user: str = "user"


class Branched(Message):
    """The session now stands at ``node_id`` (its history holds ``messages`` messages)."""

    session_id: str
    node_id: str
    messages: int


class SplitNode(Message):
    """Split a text node of the session's tree at ``position`` of its text (1 <= position
    < its length): a new node holding the left part takes its place, and the node keeps
    the rest. Answered with TreeChanged (the left part's node) or ErrorReply."""

    session_id: Token
    node_id: Text
    position: int
    user: str = "user"


class DeleteNode(Message):
    """Delete a node of the session's tree: ``cascade`` with everything under it, or
    ``reparent`` (its children take its place). Never the node the session stands at or
    one on its path. Answered with TreeChanged (the node removed) or ErrorReply."""

    session_id: Token
    node_id: Text
    mode: Literal["cascade", "reparent"] = "cascade"
    user: str = "user"


class BookmarkNode(Message):
    """Point bookmark ``name`` at ``node_id`` (created or moved), or with ``remove`` drop
    it. A bookmark names a node wherever a node is asked for. Answered with TreeChanged
    or ErrorReply."""

    session_id: Token
    name: Text
    node_id: str = ""
    remove: bool = False
    user: str = "user"


class TreeChanged(Message):
    """The session's tree was changed as asked: ``node_id`` is the node concerned, and
    ``detail`` says what happened in a line."""

    session_id: str
    node_id: str
    detail: str


class UndoFiles(Message):
    """Put back the files the session's tool calls changed, from the snapshots taken
    before each call: those of its last changing call, or with ``to_version`` every change
    recorded after that event. Only between turns; answered with Undone or ErrorReply."""

    session_id: Token
    to_version: Version | None = None
    user: str = "user"


class RestoredPath(msgspec.Struct, frozen=True):
    """A path an undo put back: ``removed`` when it did not exist before event ``before``
    (the event that recorded its snapshot), else restored as it was then."""

    path: str
    removed: bool
    before: int


class Undone(Message):
    """What an undo put back (nothing: no file change was recorded after the point)."""

    session_id: str
    restored: list[RestoredPath]


# --- TTSR monitor -----------------------------------------------------------------------


class BarrierCheck(Message):
    """Session -> monitor request: has everything up to ``seq`` of ``generation`` been
    checked, and is it clear of every eligible rule?"""

    session_id: Token
    generation: int
    seq: int


class BarrierResult(Message):
    """Monitor -> session answer to BarrierCheck. ``unchecked``: the monitor missed part of
    the stream (it restarted, or a delta was lost) and cannot vouch for it."""

    generation: int
    clear: bool
    rules: list[str] = []
    reminder: str = ""
    unchecked: bool = False
    context_mode: Literal["discard", "keep"] = "discard"
    later: list[Reminder] = []
    """Reminders of non-aborting rules that matched in this generation (added after the
    turn). They travel with the answer, so none can arrive after the turn ended."""


# --- gatekeeper -------------------------------------------------------------------------


Mode = Literal["default", "plan", "auto"]
"""A session's mode: ``default`` asks for what the policy escalates, ``plan`` only reads
and writes its plan file until the plan is approved, ``auto`` approves the configured
tools' escalations (never protection's minimum tiers)."""


class ToolProposal(Message):
    """Session -> gatekeeper request on ``<ns>.gatekeeper``: may this call run?"""

    session_id: Token
    call_id: str
    tool: str
    input: dict[str, Any]
    workspace: FilePath
    action_hash: str
    mode: Mode = "default"
    auto_approve: bool = False
    """The session's mode approves this tool's escalations (``auto`` mode)."""
    plan_file: FilePath = ""
    """In plan mode: the one file the session may write (absolute)."""


class Verdict(Message):
    """Gatekeeper answer to a ToolProposal."""

    call_id: str
    decision: Literal["allow", "deny", "escalate"]
    reason: str
    action_hash: str
    tier: str = "policy"
    required_tier: int = 0
    """For ``escalate``: who must decide (2: the LLM evaluator, 3: a person)."""
    writes: list[str] = []
    """Absolute paths the call writes or deletes (snapshotted before it runs)."""
    network: bool = False
    """The call may reach the network (its sandbox keeps the host's network): granted
    with an allow or, for an escalation, by the person who approves it."""


# --- interactions -----------------------------------------------------------------------


class ApprovalRequest(Message):
    """Session -> coordinator on ``<ns>.interactions``: ask the session's chat to approve a
    tool call. Acknowledged with InteractionOpened; the answer comes later as
    InteractionSettled on the session's subject."""

    session_id: Token
    call_id: str
    tool: str
    summary: str
    reason: str
    channel: Token
    owner: str = ""
    """The session's owner: with the approvers named for ``home_channel``, the only one
    whose answer is taken."""
    home_channel: OptionalToken = ""
    """The channel the session was started on (whose approvers count; ``channel``, where
    the question goes, follows the latest message); empty: ``channel``."""


class QuestionRequest(Message):
    """Session -> coordinator: the model asks the chat a question (``AskUserQuestion``).
    The next text in the chat answers it, unless an approval is waiting there."""

    session_id: Token
    call_id: str
    question: str
    channel: Token
    options: list[str] = []
    owner: str = ""
    """The session's owner: with the approvers named for ``home_channel``, the only one
    whose answer is taken."""
    home_channel: OptionalToken = ""
    """The channel the session was started on (whose approvers count; ``channel``, where
    the question goes, follows the latest message); empty: ``channel``."""


class PlanReviewRequest(Message):
    """Session -> coordinator: the plan is ready; the chat chooses proceed, clean proceed
    or adjust. Never times out. ``call_id`` is the ExitPlanMode call (``plan-N`` when the
    review is offered because a plan file was written without it); ``source`` says where
    the plan text came from."""

    session_id: Token
    call_id: str
    plan: str
    source: Literal["file", "written", "streamed", "fallback"]
    channel: Token
    owner: str = ""
    """The session's owner: with the approvers named for ``home_channel``, the only one
    whose answer is taken."""
    home_channel: OptionalToken = ""
    """The channel the session was started on (whose approvers count; ``channel``, where
    the question goes, follows the latest message); empty: ``channel``."""


class InteractionOpened(Message):
    """Coordinator -> session: the request is stored and was shown to the chat."""

    interaction_id: str
    call_id: str


class InteractionSettled(Message):
    """Coordinator -> session on ``<ns>.session.<id>``: what became of an interaction.

    ``outcome``: approved or denied (approvals), answered (questions; ``answer`` holds the
    text), proceed, clean_proceed, default or adjust (plan reviews; ``answer`` holds the
    feedback),
    expired (no answer in time) or cancelled. ``by`` is the user, ``timeout`` or
    ``tether``."""

    session_id: Token
    call_id: str
    interaction_id: str
    kind: Literal["approval", "question", "plan_review"]
    outcome: Literal["approved", "denied", "answered", "proceed", "clean_proceed", "default",
                     "adjust", "expired", "cancelled"]
    by: str
    reason: str = ""
    answer: str = ""


class InteractionAnswer(Message):
    """Session -> coordinator: ``/approve`` or ``/deny``. ``interaction_id``, when given,
    must name a pending approval of the session; otherwise (and for a no whose first word
    was not an id) the answer is for ``call_id``, the call the session is waiting on."""

    session_id: Token
    approved: bool
    user: str
    call_id: str = ""
    interaction_id: str = ""
    reason: str = ""
    channel: OptionalToken = ""
    """The chat the answer came from (told when it is refused)."""


class PlanAnswer(Message):
    """Session -> coordinator: ``/proceed``, ``/clean`` or ``/adjust FEEDBACK`` for the
    session's pending plan review."""

    session_id: Token
    choice: Literal["proceed", "clean_proceed", "default", "adjust"]
    user: str
    feedback: str = ""
    channel: OptionalToken = ""
    """The chat the answer came from (told when it is refused)."""


class ChatText(Message):
    """Session -> coordinator: plain text sent to a chat while the session waits on an
    interaction. The chat's pending approvals take it first (a no, with the text as the
    reason), then its questions (the answer), then its plan reviews (feedback)."""

    session_id: Token
    channel: Token
    text: str
    user: str


class CancelInteractions(Message):
    """Session -> coordinator: the session failed or was killed; cancel what it waits on."""

    session_id: Token
    reason: str


# --- dead letters -----------------------------------------------------------------------


class DeadLetter(Message):
    """Published on ``<ns>.deadletter`` for every payload an actor could not accept."""

    subject: str
    reason: str
    payload: str
    size: int


class RelayedEvent(msgspec.Struct, kw_only=True):
    """A stored event as published on ``<ns>.evt.<aggregate>.<id>.<event>`` (JetStream).

    ``id`` is the store's notification id (also the ``Nats-Msg-Id`` header); for sessions
    ``aggregate_id`` is the short session id, for other aggregates their UUID. ``data``
    holds the event's own fields.
    """

    id: int
    aggregate: Token
    aggregate_id: Token
    originator_id: str
    version: int
    event: str
    timestamp: str
    data: dict[str, Any]


InboxMessage = UserMessage
TreeCommand = SplitNode | DeleteNode | BookmarkNode
ManagerMessage = (
    ListSessions | KillSession | ForkSession | UserMessage | TreeQuery | BranchTo | EditNode
    | Generate | TreeCommand | UndoFiles
)
SessionMessage = (
    UserMessage | Interrupt | KillSession | InteractionSettled | TreeQuery | BranchTo
    | EditNode | Generate | TreeCommand | UndoFiles
)
MonitorMessage = BarrierCheck
GatekeeperMessage = ToolProposal
InteractionMessage = (
    ApprovalRequest | QuestionRequest | PlanReviewRequest | InteractionAnswer | PlanAnswer
    | ChatText | CancelInteractions
)
