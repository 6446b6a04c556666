"""The connection a connector's call carries: the owner's settings for one category.

Above: `kit` (`Kit.connection`) and a connector's tools. Below: the SDK's request contexts,
read through `session.meta_of`.

A connector (`kind: connector`) reaches an outside service for a category. The host keeps
each owner's connection settings (encrypted at rest) and writes them, decrypted, into every
call it forwards to the connector as `_meta["mcp-host/connection"]` =
`{owner_id, category, settings}`; like the session scope, whatever a visitor's client put
under `mcp-host/` was dropped first. The connector uses the settings for that call only and
never stores them. They hold secrets (a password): `ConnectionInfo` keeps them out of its
repr, and nothing here logs them.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .contract import CONNECTION_KEY
from .errors import Unconfigured
from .session import CallSource, meta_of

__all__ = ["CONNECTION_KEY", "ConnectionInfo", "connection_of"]

logger = logging.getLogger("mcp_host_kit")


class ConnectionInfo(BaseModel):
    """The owner's connection of one category, as the host wrote it into the call.

    `settings` maps the keys the connector's manifest declares under `settings` to the
    owner's values (a secret one in clear); it is left out of `repr`.
    """

    # extra="ignore": a newer host may add keys; a connector built on this kit keeps working.
    model_config = ConfigDict(extra="ignore", frozen=True)

    owner_id: str
    category: str
    settings: dict[str, Any] = Field(repr=False)


def connection_of(source: CallSource) -> ConnectionInfo:
    """The connection the call `source` belongs to carries (an MCPServer `ctx`, a low-level
    request context, or the call's `_meta`).

    Raises `Unconfigured` when the call carries none, or one that is malformed.
    """
    value = meta_of(source).get(CONNECTION_KEY)
    if value is None:
        raise Unconfigured("this call carries no connection: the owner has not connected this service")
    try:
        return ConnectionInfo.model_validate(value)
    except ValidationError as exc:
        # Field names only: the values may be secrets.
        fields = sorted({".".join(str(part) for part in error["loc"]) or "(root)" for error in exc.errors()})
        logger.warning("the call's %s is malformed (fields: %s)", CONNECTION_KEY, ", ".join(fields))
        raise Unconfigured("this call's connection is malformed") from None
