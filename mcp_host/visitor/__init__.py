"""The visitor face: a session's tool list (bindings, listings), what it may call (the door), the
MCP server behind every session endpoint, input rounds, list changes, and the HTTP routes.
Below: the back-channel. Above: `owner`, `app`.
"""

from .app_checks import reach as app_reach
from .app_reader import AppReader
from .bindings import Bindings
from .change_feed import ChangeFeed
from .direct import direct_answers
from .door import VisitorDoor, sees
from .exchange import DirectAnswer, ModernExchange
from .fleet import Fleet
from .http import SessionsEndpoint, TurnsEndpoint, VisitorMCPEndpoint, bearer_token, security_settings
from .input_rounds import InputRounds
from .node import NODE_PATH, NodeDoor, NodeMCPEndpoint, build_node_server
from .one_url import ONE_URL_PATH, OneURLEndpoint
from .opening import SessionOpener
from .owner_review import OwnerReview
from .server import build_visitor_server
from .tasks import TaskBook
from .tool_search import ToolSearch

__all__ = [
    "NODE_PATH",
    "DirectAnswer",
    "AppReader",
    "Bindings",
    "ChangeFeed",
    "Fleet",
    "InputRounds",
    "ModernExchange",
    "NodeDoor",
    "NodeMCPEndpoint",
    "ONE_URL_PATH",
    "OneURLEndpoint",
    "OwnerReview",
    "SessionOpener",
    "SessionsEndpoint",
    "TaskBook",
    "ToolSearch",
    "TurnsEndpoint",
    "VisitorDoor",
    "VisitorMCPEndpoint",
    "app_reach",
    "bearer_token",
    "build_node_server",
    "build_visitor_server",
    "direct_answers",
    "security_settings",
    "sees",
]
