"""What a call must pass beyond access: tool pins, holds for the owner, quota, turns and receipts,
the owner's audit log. Below: `access`. Above: back-channel, the doors.
"""

from .audit import REDACTED, AuditLog, summarize
from .holds import HoldBook, HoldCaps, Holds, needs_hold
from .node_grants import NodeGrant, NodeGrants, node_call
from .pins import DefinitionChanged, PendingTool, PinBook, Pins, collision_key, definition_hash
from .quota import QuotaGate, QuotaState, exhausted
from .rules import CallFacts, Rule, RuleGate, owner_call, visitor_call
from .turns import (
    PostgresTurns,
    TurnCaps,
    TurnStore,
    TurnsUsedUp,
    TurnTooLarge,
    UnknownTurn,
    answer_ok,
    judge,
    receipt_ok,
)

__all__ = [
    "REDACTED",
    "AuditLog",
    "CallFacts",
    "DefinitionChanged",
    "HoldBook",
    "HoldCaps",
    "Holds",
    "NodeGrant",
    "NodeGrants",
    "PendingTool",
    "PinBook",
    "Pins",
    "PostgresTurns",
    "QuotaGate",
    "QuotaState",
    "Rule",
    "RuleGate",
    "TurnCaps",
    "TurnStore",
    "TurnTooLarge",
    "TurnsUsedUp",
    "UnknownTurn",
    "collision_key",
    "definition_hash",
    "exhausted",
    "judge",
    "needs_hold",
    "node_call",
    "owner_call",
    "receipt_ok",
    "answer_ok",
    "summarize",
    "visitor_call",
]
