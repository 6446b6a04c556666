"""The visitor methods answered without the SDK's server on the 2026-07-28 hot path (issue 31).

Above: `app.wiring`, which hands `direct_answers` to `exchange.ModernExchange`. Below: each
method's own answerer. A method not named here — and any request an answerer declines — is
served by the SDK's `serve_one` with the visitor `Server`, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server import Server

from .direct_call import DirectCall
from .door import VisitorDoor
from .exchange import DirectAnswer
from .input_rounds import InputRounds
from .tools_list import ToolsListAnswer

__all__ = ["direct_answers"]


def direct_answers(door: VisitorDoor, *, rounds: InputRounds, server: Server[Any]) -> Mapping[str, DirectAnswer]:
    """By method, what answers it directly (see `exchange.DirectAnswer`); `rounds`: where the
    2026-07-28 calls wait between input rounds; `server`: the visitor server, whose `serverInfo`
    stamp the answers carry."""
    return {
        "tools/call": DirectCall(door, rounds, server.server_info_stamp),
        "tools/list": ToolsListAnswer(door),
    }
