"""What a call must pass beyond access: tool pins, holds for the owner, quota, turns and receipts,
the owner's audit log. Below: `access`. Above: back-channel, the doors.
"""

from .audit import REDACTED, AuditLog, summarize
from .holds import HoldBook, Holds, needs_hold
from .pins import DefinitionChanged, PendingTool, PinBook, Pins, collision_key, definition_hash
from .quota import QuotaGate, QuotaState, exhausted
from .turns import PostgresTurns, TurnStore, UnknownTurn, judge, receipt_ok

__all__ = [
    "REDACTED",
    "AuditLog",
    "DefinitionChanged",
    "HoldBook",
    "Holds",
    "PendingTool",
    "PinBook",
    "Pins",
    "PostgresTurns",
    "QuotaGate",
    "QuotaState",
    "TurnStore",
    "UnknownTurn",
    "collision_key",
    "definition_hash",
    "exhausted",
    "judge",
    "needs_hold",
    "receipt_ok",
    "summarize",
]
