"""Caps on 2025-11-25 protocol sessions (`Mcp-Session-Id`) per credential, per principal and per
endpoint; adopting a session born on another replica; resting an idle one.

Above: the visitor, owner and node MCP endpoints (`visitor.http.VisitorMCPEndpoint`,
`owner_facade.http.OwnerMCPEndpoint`, `visitor.node`), which authenticate a request and put its
credential in the scope (`credential.authenticated`) before handing it here; the visitor
endpoint also says who is asking for the session (`principal.Asking`). Below: the next ASGI
callable — the JSON-RPC edge (`jsonrpc.py`), then the SDK's
`StreamableHTTPSessionManager.handle_request` — and the records (`store.protocol_records`,
through `SessionRecords`).

The SDK keeps every protocol session until its client deletes it or it has had no request in
flight for the manager's `session_idle_timeout`, under one cap for the whole manager (503 past
it): one caller that keeps sending `initialize` fills it and locks every other 2025-11-25
client out (issue 11, defect 2). Here each credential (a visitor session, the owner, a node
grant) may hold `per_session` protocol sessions, and each principal (`principal.Principal`: the
visitor session's access code or API key, else the address of the request that opens it; on
the owner's and a node's door, the credential) `per_principal`; the endpoint `host` in all.

What is known comes from the wire only, as the SDK shows it to any client:

- a session is born when a request without `Mcp-Session-Id` is answered below 400 with an
  `Mcp-Session-Id` header (exactly when the SDK keeps it);
- it ends when a DELETE of it is answered 2xx or a request for it is answered 404, or when it
  had no request in flight for `idle_s` — the manager is given the same number, so by then the
  SDK has dropped it too;
- to close one, a DELETE for it is sent through the next callable with the credential and
  Host of the request that opened it, as its client would (`as_client`).

The modules, one concept each:

- `table`: the sessions this endpoint holds and their caps (who closes to make room, or why
  there is none);
- `asgi`: `ProtocolSessions`, the ASGI wrapper — opening, using and closing sessions through
  the table, refusing an opening with no room (429, 503);
- `records` and `adoption`: recording each session born here, and opening here one born on
  another replica (issue 16);
- `resting`: ending an idle recorded session in the SDK and waking it at its next request
  (issue 26, defect 7);
- `as_client`: requests to the SDK below as a session's own client would send them;
- `messages`: reading and rewriting ASGI headers, the JSON-RPC error answers.

Every part logs under this package's name.
"""

from .asgi import ProtocolSessions
from .records import SessionRecords
from .table import ProtocolSessionLimits

__all__ = ["ProtocolSessionLimits", "ProtocolSessions", "SessionRecords"]
