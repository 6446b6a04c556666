"""Connectors an owner connected, calling their verbs, and what a session sees depending on them.
Below: `children`, `access`. Above: policy, back-channel, the doors.
"""

from .connections import Connection, Connections
from .gateway import ConnectorGateway
from .requirements import RequirementGate

__all__ = ["Connection", "Connections", "ConnectorGateway", "RequirementGate"]
