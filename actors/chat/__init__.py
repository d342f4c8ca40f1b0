"""The chats' side of a session: who is told what, and what is asked of them.

:mod:`.router` is the notification router actor (the outbox's notices to each chat),
:mod:`.routes` its pure rules (origins, routes, output blocks), :mod:`.interactions` the
coordinator of approvals, questions and plan reviews, and :mod:`.stream` how a reply
streams into a chat that edits one message in place (Telegram).
"""

from tether.actors.chat.interactions import InteractionCoordinatorActor
from tether.actors.chat.router import NotificationRouterActor, RouterSettings
from tether.actors.chat.routes import OutputBuffer, parse_route, resolve_origin
from tether.actors.chat.stream import ChatStreamer, split_text

__all__ = ["ChatStreamer", "InteractionCoordinatorActor", "NotificationRouterActor",
           "OutputBuffer", "RouterSettings", "parse_route", "resolve_origin", "split_text"]
