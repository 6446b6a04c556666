"""The back-channel: grants minted around a forwarded call, the unix socket each plugin that named
host ops reaches the host on, and the op table. Below: policy. Above: the doors.
"""

from .grants import CallScope, GrantBook
from .ops import OpServices
from .server import BackChannel, BackChannelLimits, ServesOps
from .sockets import OpSockets, named_ops

__all__ = [
    "BackChannel",
    "BackChannelLimits",
    "CallScope",
    "GrantBook",
    "OpServices",
    "OpSockets",
    "ServesOps",
    "named_ops",
]
