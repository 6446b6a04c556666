"""Asking the visitor something during a tool call: elicitation that reaches the right visitor.

    answer = await elicit(ctx, "Which day suits you?", Day)   # None: the client cannot ask

Under the host, one plugin process serves many visitors at once, and the stdio wire does not
say which call a server→client request belongs to. The host puts a call id in each forwarded
call's `_meta["mcp-host/call"]`; `elicit` sends it back with the request, so the question
reaches the visitor of this very call. (The SDK's `ctx.elicit` works too, as long as only one
visitor session is calling the plugin at that moment; otherwise the host refuses it.)
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import mcp.types as types
from mcp import MCPError
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel, ValidationError

from .contract import CALL_KEY

__all__ = ["CALL_KEY", "Elicited", "elicit"]

M = TypeVar("M", bound=BaseModel)


class Elicited(BaseModel):
    """The visitor's answer: `action` is accept, decline or cancel; `data` only on accept."""

    action: str
    data: Any = None


async def elicit(ctx: Context, message: str, schema: type[M]) -> Elicited | None:
    """Ask this call's visitor `message`, to be answered in the shape of `schema`.

    None when the visitor's client cannot be asked (it lacks elicitation, or no client is
    behind the call); an `Elicited` whose `data` is a `schema` instance on accept.
    Raises ValueError when the client accepts with content that does not fit `schema`.
    """
    request_context = ctx.request_context
    call_id = (request_context.meta or {}).get(CALL_KEY)
    meta: dict[str, Any] | None = {CALL_KEY: call_id} if isinstance(call_id, str) else None
    params = types.ElicitRequestFormParams(
        message=message, requested_schema=render_elicitation_schema(schema), _meta=cast(types.RequestParamsMeta, meta)
    )
    try:
        result = await request_context.session.send_request(
            types.ElicitRequest(params=params),
            types.ElicitResult,
            metadata=ServerMessageMetadata(related_request_id=request_context.request_id),
        )
    except MCPError as exc:
        if exc.error.code in (types.INVALID_REQUEST, types.METHOD_NOT_FOUND):
            return None  # the client cannot be asked; the tool answers some other way
        raise
    if result.action != "accept":
        return Elicited(action=result.action)
    try:
        return Elicited(action="accept", data=schema.model_validate(result.content or {}))
    except ValidationError as exc:
        raise ValueError("the visitor's answer does not fit the question's schema") from exc
