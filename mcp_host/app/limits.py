"""Where the settings become the parts' limits: each function reads one settings group and
returns the limits model of the part it bounds, so a newcomer finds every such translation in
one place (and the bench runs its children under the host's own `child_limits`).

Above: `early`, `shared`, `doors` and `wiring`, which hand these to the parts' constructors.
Below: `settings` and the parts' limits models.
"""

from __future__ import annotations

from mcp_host.backchannel import BackChannelLimits
from mcp_host.children import ChildLimits, InstanceShares
from mcp_host.edge import PrincipalPace, PrincipalRate, ProtocolSessionLimits, ThrottleLimits
from mcp_host.policy import HoldCaps, TurnCaps
from mcp_host.settings import Settings
from mcp_host.store import StoreLimits
from mcp_host.wire import MetaCaps

__all__ = [
    "channel_limits",
    "child_limits",
    "hold_caps",
    "instance_shares",
    "meta_caps",
    "protocol_session_limits",
    "public_sessions_rate",
    "store_limits",
    "throttle_limits",
    "turn_caps",
    "turns_rate",
    "visitor_pace",
]


def child_limits(s: Settings) -> ChildLimits:
    """The limits every child of a host with settings `s` runs under (also the bench's)."""
    return ChildLimits(
        start_timeout_s=s.children.start_timeout_s,
        idle_timeout_s=s.children.idle_timeout_s,
        max_line_bytes=s.children.max_line_bytes,
        stderr_lines_per_s=s.child_logs.stderr_lines_per_s,
        stderr_line_bytes=s.child_logs.stderr_line_bytes,
        backoff_max_s=s.children.restart_backoff_max_s,
        crash_loop_threshold=s.children.crash_loop_threshold,
        timeouts_before_recycle=s.children.timeouts_before_recycle,
        input_timeout_s=s.children.input_timeout_s,
        input_budget=s.children.input_budget,
        backoff_base_s=s.children.restart_backoff_base_s,
        stable_after_s=s.children.stable_after_s,
        log_keep_lines=s.child_logs.keep_lines,
        errors_logged_per_s=s.child_logs.errors_logged_per_s,
        errors_logged_burst=s.child_logs.errors_logged_burst,
    )


def instance_shares(s: Settings) -> InstanceShares:
    """The per-session child instances: in all, per principal, and how fast one may start them."""
    return InstanceShares(
        host=s.principals.max_session_instances,
        per_principal=s.principals.session_instances,
        starts_per_minute=s.principals.instance_starts_per_minute,
    )


def throttle_limits(s: Settings) -> ThrottleLimits:
    """The delay after failed authentications (the sessions endpoint's `FailureThrottle`)."""
    return ThrottleLimits(
        free_failures=s.access.failures_free,
        window_s=s.access.failure_window_s,
        base_delay_s=s.access.failure_delay_s,
        max_delay_s=s.access.failure_delay_max_s,
        max_clients=s.access.failure_clients_max,
    )


def channel_limits(s: Settings) -> BackChannelLimits:
    return BackChannelLimits(
        s.backchannel.max_message_bytes,
        s.backchannel.max_connections,
        denials_logged_per_s=s.backchannel.denials_logged_per_s,
        denials_logged_burst=s.backchannel.denials_logged_burst,
    )


def store_limits(s: Settings) -> StoreLimits:
    return StoreLimits(
        max_doc_bytes=s.store.max_doc_bytes,
        max_doc_depth=s.store.max_doc_depth,
        max_query_limit=s.store.max_query_limit,
    )


def turn_caps(s: Settings) -> TurnCaps:
    p = s.principals
    return TurnCaps(
        turn_bytes=p.turn_max_bytes, turns=p.session_turns, session_bytes=p.session_turn_bytes, receipts=p.turn_receipts
    )


def hold_caps(s: Settings) -> HoldCaps:
    return HoldCaps(per_session=s.principals.session_holds, per_principal=s.principals.principal_holds)


def meta_caps(s: Settings) -> MetaCaps:
    return MetaCaps(s.wire.meta_max_keys, s.wire.meta_max_depth, s.wire.meta_max_bytes)


def protocol_session_limits(s: Settings) -> ProtocolSessionLimits:
    return ProtocolSessionLimits(
        per_session=s.principals.session_protocol_sessions,
        per_principal=s.principals.protocol_sessions,
        host=s.principals.max_protocol_sessions,
        idle_s=s.protocol_sessions.idle_s,
        rest_s=s.protocol_sessions.rest_s,
    )


def visitor_pace(s: Settings) -> PrincipalPace:
    """Each principal's requests on the visitor MCP endpoint: a rate, a burst, and how long one waits."""
    return PrincipalPace(s.principals.requests_per_s, s.principals.requests_burst, s.principals.request_wait_s)


def public_sessions_rate(s: Settings) -> PrincipalRate:
    return PrincipalRate(s.principals.public_sessions_per_minute)


def turns_rate(s: Settings) -> PrincipalRate:
    return PrincipalRate(s.principals.turns_per_minute)
