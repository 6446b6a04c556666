"""The groups of settings, one model per part of the host that uses them (`settings.children`,
`settings.http`, ...), each setting read from its one flat variable (its `validation_alias` when
it has one, else its name). `host.Settings` holds one of each.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

__all__ = [
    "AccessSettings",
    "BackchannelSettings",
    "ChildLogSettings",
    "ChildrenSettings",
    "ConnectorSettings",
    "DatabaseSettings",
    "EgressSettings",
    "Group",
    "HttpSettings",
    "MiB",
    "OAuthSettings",
    "PolicySettings",
    "PrincipalSettings",
    "ProtocolSessionSettings",
    "RetentionSettings",
    "SandboxSettings",
    "StoreSettings",
    "WireSettings",
]

MiB = 1024 * 1024


class Group(BaseModel):
    # Read by field name or by flat name (the validation alias): the environment and
    # `Settings(<flat name>=…)` give flat names, code and tests may give field names.
    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True)


class WireSettings(Group):
    """What travels (wire/): caps on the `_meta` a visitor's request carries."""

    meta_max_keys: int = Field(default=16, ge=1)
    meta_max_depth: int = Field(default=4, ge=1)
    meta_max_bytes: int = Field(default=4096, ge=256)


class HttpSettings(Group):
    """HTTP requests and connections (edge/http_server.py: the uvicorn config of `serve` and the tests)."""

    # Visitor input caps: an MCP request body, and a REST body (sessions, turns).
    max_body_bytes: int = Field(default=4 * MiB, ge=64 * 1024)
    max_rest_body_bytes: int = Field(default=64 * 1024, ge=1024)
    # A connection whose request head (request line and headers) is not complete within
    # `http_header_timeout_s` of its start, or is over `http_max_head_bytes`, is answered 408 /
    # 431 and closed. A request body that sends nothing for `http_body_timeout_s` (per read) is
    # answered 408 and closed. Past `http_max_connections` open connections (or requests in
    # progress) every new request is answered 503 (uvicorn's `limit_concurrency`). An idle
    # keep-alive connection is closed after `http_keep_alive_s`: longer than the clients' own
    # idle expiry (httpx 5 s, undici 4 s, aiohttp 15 s) and a load balancer's (60 s), so the
    # client, not the host, closes an idle connection. When both sides waited 5 s, a request sent
    # as the host closed the connection met a closed socket (a ReadError, no answer).
    header_timeout_s: float = Field(default=10.0, gt=0, validation_alias="http_header_timeout_s")
    max_head_bytes: int = Field(default=64 * 1024, ge=4096, validation_alias="http_max_head_bytes")
    body_timeout_s: float = Field(default=30.0, gt=0, validation_alias="http_body_timeout_s")
    # A whole request, head and body, must arrive within `http_request_timeout_s` of its start,
    # and its body bring at least `http_body_min_bytes_per_s` in every `http_body_rate_window_s`
    # (the first window is its grace; 0 bytes/s: no minimum); else 408 and the connection
    # closes. The answer has no deadline. 30 s carries the largest MCP body (4 MiB) at 140 KB/s;
    # 1 KiB/s is far below any link a client would use, and a body a byte every 2 s is cut after 5 s.
    request_timeout_s: float = Field(default=30.0, gt=0, validation_alias="http_request_timeout_s")
    body_min_bytes_per_s: int = Field(default=1024, ge=0, validation_alias="http_body_min_bytes_per_s")
    body_rate_window_s: float = Field(default=5.0, gt=0, validation_alias="http_body_rate_window_s")
    max_connections: int = Field(default=1000, ge=2, validation_alias="http_max_connections")
    keep_alive_s: int = Field(default=65, ge=1, validation_alias="http_keep_alive_s")
    # Past `http_max_connections_per_client` connections open from one client address, a new
    # one is answered 503 and closed before it is read, so one address cannot hold the
    # host-wide cap (it must be below it). 64: a browser opens at most 6 per host, an MCP client
    # 2-3 (a GET stream, a POST or two), so a NAT of some 20 clients fits. An IPv6 address
    # counts as its /64. Addresses uvicorn trusts as proxies (its FORWARDED_ALLOW_IPS, by
    # default 127.0.0.1 and ::1) are not capped per address, nor held to the reserve below.
    max_connections_per_client: int = Field(default=64, ge=1, validation_alias="http_max_connections_per_client")
    # The last `http_reserved_share` of `http_max_connections` (250 of 1,000) go only to an
    # address holding fewer than `http_reserved_per_client` connections: however many addresses
    # a flood comes from, those holding 4 or more fill 750 at most (12 at their cap do), and
    # filling the reserve as well takes 63 addresses more.
    reserved_share: float = Field(default=0.25, ge=0, lt=1, validation_alias="http_reserved_share")
    reserved_per_client: int = Field(default=4, ge=1, validation_alias="http_reserved_per_client")
    # On SIGTERM (app/drain.py) `/readyz` and every new request are answered 503 at once, and
    # the calls in flight and those parked between input rounds get this long to finish before
    # the listener closes and the host stops (then uvicorn's 5 s grace, then cancelled).
    drain_timeout_s: float = Field(default=25.0, ge=0, validation_alias="drain_timeout_s")

    @model_validator(mode="after")
    def _connection_caps_nest(self) -> HttpSettings:
        # One client address must not be able to fill the host-wide cap.
        if self.max_connections_per_client >= self.max_connections:
            raise ValueError("http_max_connections_per_client must be below http_max_connections")
        return self


class ProtocolSessionSettings(Group):
    """2025-11-25 `Mcp-Session-Id`s on the MCP endpoints (edge/protocol_sessions/): one that
    had no request in flight for `idle_s` is closed. How many one visitor session, one principal
    and the whole endpoint may hold: `PrincipalSettings`.
    """

    idle_s: float = Field(default=300.0, gt=0, validation_alias="protocol_session_idle_s")
    # One idle this long ends in the SDK (~40 KB each) and rests: its next request opens it
    # again from its record, its id unchanged; at or past `idle_s`, none rests.
    rest_s: float = Field(default=60.0, gt=0, validation_alias="protocol_session_rest_s")


class DatabaseSettings(Group):
    """PostgreSQL (store/database.py), and its outages (store/database_watch.py, app/health.py)."""

    # A server by URL; unset, an embedded one in the data dir.
    url: SecretStr | None = Field(default=None, validation_alias="database_url")
    # An embedded PostgreSQL that dies is restarted at once, then after `restart_backoff_s`
    # doubling to `restart_backoff_max_s`, at most `restart_attempts` times per outage; then
    # the host stops (for its supervisor to restart). Meanwhile, and while a server by URL is
    # away, requests that need the database get `unavailable` (HTTP 503,
    # `Retry-After: retry_after_s`).
    restart_attempts: int = Field(default=5, ge=1, validation_alias="database_restart_attempts")
    restart_backoff_s: float = Field(default=0.25, ge=0, validation_alias="database_restart_backoff_s")
    restart_backoff_max_s: float = Field(default=5.0, ge=0, validation_alias="database_restart_backoff_max_s")
    retry_after_s: int = Field(default=2, ge=1, validation_alias="database_retry_after_s")
    # /readyz (and the outage probe) waits at most this long for the database's SELECT 1.
    readiness_timeout_s: float = Field(default=1.0, gt=0, le=30)


class StoreSettings(Group):
    """The argument checks of every plugin store (store/checks.py)."""

    max_doc_bytes: int = Field(default=256 * 1024, ge=1024, validation_alias="store_max_doc_bytes")
    max_doc_depth: int = Field(default=32, ge=2, validation_alias="store_max_doc_depth")
    max_query_limit: int = Field(default=500, ge=1, validation_alias="store_max_query_limit")


class SandboxSettings(Group):
    """Sandboxing a child (sandbox/): on or off, and its resource limits (per child)."""

    mode: Literal["on", "off"] = Field(default="on", validation_alias="sandbox")
    memory_bytes: int = Field(default=1024 * MiB, ge=64 * MiB, validation_alias="child_memory_bytes")
    max_processes: int = Field(default=64, ge=4, validation_alias="child_max_processes")
    max_open_files: int = Field(default=256, ge=32, validation_alias="child_max_open_files")
    cpu_seconds: int = Field(default=3600, ge=1, validation_alias="child_cpu_seconds")
    max_file_bytes: int = Field(default=256 * MiB, ge=MiB, validation_alias="child_max_file_bytes")
    # Each of these five is the default and the ceiling of the same key of a manifest's
    # `limits` (memory_mb, processes, open_files, cpu_seconds; sandbox/budget.py).
    # A sandbox's tmpfs: its private /tmp and /dev/shm (the rest of its file system is
    # read-only). Both are part of `memory_bytes`: without a memory cgroup, its RLIMIT_DATA is
    # what they leave (never RLIMIT_AS, which V8 cannot start under); a plugin with a smaller
    # `limits.memory_mb` gets them scaled down in the same proportion.
    tmp_bytes: int = Field(default=64 * MiB, ge=MiB, validation_alias="child_tmp_bytes")
    shm_bytes: int = Field(default=16 * MiB, ge=MiB, validation_alias="child_shm_bytes")
    # Where the cgroup file systems are mounted; each sandbox gets a pids cgroup of
    # `max_processes` tasks and a memory cgroup of `memory_cgroup_bytes` when usable there
    # (sandbox/cgroups.py, `SandboxCgroups`).
    cgroup_root: Path = Path("/sys/fs/cgroup")
    # Each sandbox's memory cgroup, where the host has a memory controller: the sandbox's
    # memory cap (no memory rlimit is set then), on all the RAM its processes hold together,
    # swap included, so also the memfd and tmpfs pages they write (no rlimit sees those) and
    # page cache. Unset: `memory_bytes`. A plugin's `limits.memory_mb` lowers it for its own
    # sandboxes. At the cap a write fails or the kernel's OOM killer kills in the sandbox,
    # and the child's cause says "out of memory (limit N MiB)".
    memory_cgroup_bytes: int | None = Field(default=None, ge=64 * MiB, validation_alias="child_memory_cgroup_bytes")

    @model_validator(mode="after")
    def _tmpfs_within_memory(self) -> SandboxSettings:
        # The tmpfs caps come out of the child's budget and must leave some.
        if self.tmp_bytes + self.shm_bytes >= self.memory_bytes:
            raise ValueError("child_tmp_bytes + child_shm_bytes must be below child_memory_bytes (they are part of it)")
        return self


class EgressSettings(Group):
    """A sandboxed child's network through the host's egress proxy (egress/, sandbox/budget.py)."""

    # An /etc/hosts-format file the proxy resolves names from before DNS (split-horizon names).
    hosts_file: Path | None = Field(default=None, validation_alias="egress_hosts_file")
    # The default and the ceiling of a manifest's `limits.egress_connections` (tunnels open at
    # once per child) and `limits.egress_mb_per_minute` (MiB per child per rolling minute,
    # both directions; past it the child's tunnels are slowed, not cut).
    connections: int = Field(default=32, ge=1, validation_alias="egress_connections")
    mb_per_minute: int = Field(default=600, ge=1, validation_alias="egress_mb_per_minute")
    # A tunnel with no byte either way for this long is closed.
    idle_s: float = Field(default=300.0, gt=0, validation_alias="egress_idle_s")


class ChildrenSettings(Group):
    """A child's life (children/lifecycle.py) and the calls forwarded to it."""

    call_timeout_s: float = Field(default=30.0, gt=0)
    list_timeout_s: float = Field(default=5.0, gt=0)
    # `/readyz` answers 503 ("lists": "starting") until the first lists at start are done (every
    # capability listed for the owner's review, the prestarted children's lists vetted), so a
    # load balancer sends the first visitor to warm children; at most this long (0: no wait).
    ready_lists_wait_s: float = Field(default=30.0, ge=0, validation_alias="ready_lists_wait_s")
    # How long a visitor's client may take to answer a child's elicitation or sampling request
    # (the call's own timeout waits meanwhile), and how long a 2026-07-28 call stays parked
    # between input rounds.
    input_timeout_s: float = Field(default=600.0, gt=0)
    # Elicitation, sampling and roots requests (and inference.generate ops) one call may put to
    # its visitor's client: sampling spends the visitor's model tokens.
    input_budget: int = Field(default=16, ge=1)
    start_timeout_s: float = Field(default=10.0, gt=0, validation_alias="child_start_timeout_s")
    idle_timeout_s: float = Field(default=600.0, gt=0, validation_alias="child_idle_timeout_s")
    max_line_bytes: int = Field(default=8 * MiB, ge=1024, validation_alias="child_max_line_bytes")
    # A child's consecutive failures (crashes, failed starts) delay its next start: none after
    # the first, then `restart_backoff_base_s` doubling up to `restart_backoff_max_s`. Only an
    # answered tools/call or `stable_after_s` of uptime resets the count (a restarted child
    # answering initialize or tools/list proves nothing).
    restart_backoff_base_s: float = Field(default=0.25, ge=0, validation_alias="child_restart_backoff_base_s")
    restart_backoff_max_s: float = Field(default=30.0, ge=0, validation_alias="child_restart_backoff_max_s")
    stable_after_s: float = Field(default=30.0, gt=0, validation_alias="child_stable_after_s")
    crash_loop_threshold: int = Field(default=5, ge=1, validation_alias="child_crash_loop_threshold")
    timeouts_before_recycle: int = Field(default=3, ge=1, validation_alias="child_timeouts_before_recycle")
    max_running: int = Field(default=64, ge=1, validation_alias="max_children")
    # Per-session instances (manifest `instances: per_session`): one child per visitor session
    # that used the plugin, stopped after this long without a call (a session's agent pauses
    # between turns for seconds, rarely minutes) or when the session ends. How many run, and
    # each principal's share of them: `PrincipalSettings`.
    session_idle_timeout_s: float = Field(default=300.0, gt=0, validation_alias="child_session_idle_timeout_s")
    # Start the children every session can see (acl: always) when the host starts, so the
    # first visitor does not wait for Python children to boot (~0.8 s of CPU each).
    prestart: bool = Field(default=True, validation_alias="prestart_children")


class PrincipalSettings(Group):
    """What one principal (principal.py: an access code, an API key, or a public session's
    client address) may hold at once and how fast it may start it, beside the host-wide caps it
    shares with every other principal. Past its share a principal is refused `unavailable` with
    a retry hint; nothing of another principal is stopped to make room for it.

    Per-session instances (children/instances.py): at most `max_session_instances` host-wide
    (beside `max_children`, which counts shared and owner-context children), of which one
    principal holds at most `session_instances`, busy or idle (unset: max(4, 1/8 of the
    host-wide cap), never more than it), and starts at most `instance_starts_per_minute` (a
    token bucket of that size, refilled over a minute; each start costs about 1 s of CPU and
    70 MB). Making room stops an idle instance: the principal's own least recently used one
    when it is at its share, else one of the principal holding the most; never a busy one.

    Turns (policy/turns.py): a turn's message and answer together hold at most
    `turn_max_bytes` (UTF-8; past it 413, nothing stored), a session at most
    `session_max_turns` turns and `session_max_turn_bytes` of them (past either 429
    `quota_exhausted`: a new session starts afresh), and a turn at most `turn_max_receipts`
    receipts, past which only the first of each kind is kept.
    Holds (policy/holds.py): at most `session_max_pending_holds` calls of one session and
    `principal_max_pending_holds` of one principal wait for the owner at once; past either a
    new one is refused `unavailable` with a retry hint, never parked.
    2025-11-25 protocol sessions (edge/protocol_sessions/), per MCP endpoint: at most
    `max_protocol_sessions` (the SDK's own cap is the same number, a backstop), of which one
    principal holds at most `protocol_sessions` and one visitor session (or the owner) at most
    `session_protocol_sessions`. Past the principal's or the session's cap its own least
    recently used idle one is closed to make room (never another principal's), or the new one
    refused 429 when all of them are busy; the last quarter of the endpoint's cap goes only to
    a principal holding fewer than one session may, and a full endpoint refuses a principal
    with no idle one of its own to close (503 `unavailable`, Retry-After).
    MCP tasks (visitor/tasks.py): at most `max_tasks` remembered host-wide, `tasks` of one
    principal and `session_tasks` of one visitor session, each until its ttl ends (then it is
    cancelled in its child); past any of them, and in the last quarter of the host's for a
    principal holding as many as one session may, a new task is refused `unavailable` with a
    retry hint. No task of another principal is forgotten to make room.
    """

    max_session_instances: int = Field(default=32, ge=1, validation_alias="max_session_instances")
    session_instances: int = Field(default=4, ge=1, validation_alias="principal_session_instances")
    instance_starts_per_minute: int = Field(default=4, ge=1, validation_alias="principal_instance_starts_per_minute")
    # Public sessions one client address opens a minute (a bucket of that size, refilled over a
    # minute): each is a row and a token, kept until it expires.
    public_sessions_per_minute: int = Field(default=60, ge=1, validation_alias="principal_public_sessions_per_minute")
    # Requests one principal sends a second to its sessions' MCP endpoints, `requests_burst` at
    # once; past them a request waits its turn up to `request_wait_s`, then is refused 429
    # (edge/rates.py `PrincipalPace`): a flood costs the host what this rate does, not more.
    requests_per_s: float = Field(default=20.0, gt=0, validation_alias="principal_requests_per_s")
    requests_burst: int = Field(default=100, ge=1, validation_alias="principal_requests_burst")
    request_wait_s: float = Field(default=2.0, ge=0, validation_alias="principal_request_wait_s")
    # Turns one principal opens a minute over all its sessions: with `turn_max_bytes`, what it
    # can add to the database a minute however many sessions it opens.
    turns_per_minute: int = Field(default=60, ge=1, validation_alias="principal_turns_per_minute")
    turn_max_bytes: int = Field(default=64 * 1024, ge=1024, validation_alias="turn_max_bytes")
    session_turns: int = Field(default=1000, ge=1, validation_alias="session_max_turns")
    session_turn_bytes: int = Field(default=4 * MiB, ge=1024, validation_alias="session_max_turn_bytes")
    turn_receipts: int = Field(default=1000, ge=1, validation_alias="turn_max_receipts")
    session_holds: int = Field(default=20, ge=1, validation_alias="session_max_pending_holds")
    principal_holds: int = Field(default=100, ge=1, validation_alias="principal_max_pending_holds")
    # 256 protocol sessions: a NAT of a few hundred public clients at one address. 30 principals
    # at that cap fill 7,500 of an endpoint's 10,000; the last 2,500 take some 170 more, each
    # holding fewer than 16. Tasks likewise: 59 principals at 128, then 40 more below 64.
    max_protocol_sessions: int = Field(default=10_000, ge=2, validation_alias="protocol_sessions_max")
    protocol_sessions: int = Field(default=256, ge=1, validation_alias="principal_max_protocol_sessions")
    session_protocol_sessions: int = Field(default=16, ge=1, validation_alias="session_max_protocol_sessions")
    max_tasks: int = Field(default=10_000, ge=2, validation_alias="max_tasks")
    tasks: int = Field(default=128, ge=1, validation_alias="principal_max_tasks")
    session_tasks: int = Field(default=64, ge=1, validation_alias="session_max_tasks")

    @model_validator(mode="before")
    @classmethod
    def _share_of_the_host(cls, data: Any) -> Any:
        # Unset, the share follows the host-wide cap it is a share of.
        if isinstance(data, Mapping) and not {"session_instances", "principal_session_instances"} & data.keys():
            host = data.get("max_session_instances", cls.model_fields["max_session_instances"].default)
            if isinstance(host, (int, str)) and str(host).isdigit():
                return {**data, "session_instances": min(int(host), max(4, int(host) // 8))}
        return data

    @model_validator(mode="after")
    def _share_within_the_host(self) -> PrincipalSettings:
        if self.session_instances > self.max_session_instances:
            raise ValueError("principal_session_instances must not be above max_session_instances")
        # One principal must not be able to fill a host-wide cap, nor one session its principal's.
        if not self.session_protocol_sessions <= self.protocol_sessions < self.max_protocol_sessions:
            raise ValueError(
                "session_max_protocol_sessions <= principal_max_protocol_sessions < protocol_sessions_max must hold"
            )
        if not self.session_tasks <= self.tasks < self.max_tasks:
            raise ValueError("session_max_tasks <= principal_max_tasks < max_tasks must hold")
        return self


class ChildLogSettings(Group):
    """What of a child's stderr reaches the log and the owner (children/stderr.py, issue 12)."""

    stderr_lines_per_s: int = Field(default=20, ge=1, validation_alias="child_stderr_lines_per_s")
    stderr_line_bytes: int = Field(default=2048, ge=80, validation_alias="child_stderr_line_bytes")
    # Each plugin's last stderr, exception and error-result lines, kept for the owner's
    # `capability_logs`; and the exceptions (one line per traceback) and error results logged
    # per plugin and second after a burst, apart from `stderr_lines_per_s`.
    keep_lines: int = Field(default=200, ge=1, le=10_000, validation_alias="child_log_keep_lines")
    errors_logged_per_s: float = Field(default=1.0, gt=0, validation_alias="child_errors_logged_per_s")
    errors_logged_burst: int = Field(default=10, ge=1, validation_alias="child_errors_logged_burst")


class AccessSettings(Group):
    """Who may open which session (access/), and slowing down wrong codes and keys (edge/throttle.py)."""

    # How long a verified session token is trusted without asking the database again
    # (access/session_cache.py); 0 asks every time.
    auth_cache_ttl_s: float = Field(default=1.0, ge=0, le=10)
    # During a database outage, a session token verified within this many seconds is still
    # accepted, so known visitors reach tools that do not need the database; 0: never.
    auth_outage_grace_s: float = Field(default=60.0, ge=0, le=600)
    # At POST /v1/sessions, per client address, within a sliding window: the first
    # `failures_free` failures are answered at once; each later one waits `failure_delay_s`,
    # doubling, capped at `failure_delay_max_s`. At most `failure_clients_max` clients are
    # remembered (per replica).
    failures_free: int = Field(default=5, ge=0, validation_alias="access_failures_free")
    failure_window_s: float = Field(default=300.0, gt=0, validation_alias="access_failure_window_s")
    failure_delay_s: float = Field(default=0.25, ge=0, validation_alias="access_failure_delay_s")
    failure_delay_max_s: float = Field(default=4.0, ge=0, le=60, validation_alias="access_failure_delay_max_s")
    failure_clients_max: int = Field(default=10_000, ge=1, validation_alias="access_failure_clients_max")


class ConnectorSettings(Group):
    """What an owner connected (connectors/)."""

    # The host key that seals connector secrets: base64 of 32 bytes, shared by replicas;
    # unset, a key file in the data dir is made at first start.
    secret_key: SecretStr | None = None
    # How long a connector's `can_perform` answer and an owner's connected categories are
    # reused (connecting or disconnecting on this replica drops them at once).
    can_perform_ttl_s: float = Field(default=30.0, ge=0)
    connections_ttl_s: float = Field(default=1.0, ge=0)


class PolicySettings(Group):
    """What a call must pass beyond access (policy/): pins, holds, quota."""

    # Tool pinning (pins.py, docs/security.md E8): a plugin tool whose definition the owner has not
    # approved is hidden from visitors. Off shows every safe tool as its child lists it.
    pin_tools: bool = True
    # MCP Apps (visitor/app_checks.py): an app whose contents are larger than this is refused
    # and its tool rejected (the ext-apps examples' apps are ~0.4 MiB).
    # An app over `child_max_line_bytes` ends its child's answer (and the child) before this is
    # measured: the host holds at most that much of it.
    app_max_bytes: int = Field(default=4 * MiB, ge=1024, validation_alias="app_max_bytes")
    # Holds (holds.py, docs/security.md E11, E16): a visitor's call to a tool annotated
    # `destructiveHint: true` (and not `readOnlyHint: true`) waits for the owner's approval;
    # a hold not used within `hold_ttl_s` of its creation expires.
    hold_destructive_tools: bool = True
    hold_ttl_s: float = Field(default=3600.0, gt=0)
    # How long a quota limit read for a visitor's list or call is reused; the write that
    # would pass the cap always reads it afresh (quota.py).
    quota_limit_ttl_s: float = Field(default=1.0, ge=0, le=60)


class RetentionSettings(Group):
    """How long the host keeps what visitors and the owner leave in the database
    (store/retention.py: one sweep every `retention_sweep_interval_s` on each replica, each
    table in batches of `retention_sweep_batch` rows, safe to run on several replicas at once).

    A public session without a request for `public_session_idle_s` expires: its token is
    refused from then on, as an ended session's, and the sweep marks it ended. Code and API-key
    sessions end when the owner ends them or revokes their credential. Rows older than their
    retention are deleted: turns (with their receipts) by when they were opened, receipts by
    when they were written, audit rows by when the owner's call was made, holds by when they
    expired, ended sessions (with all their turns) by when they ended, and revoked OAuth grants
    (oauth/grants.py: the owner's list of connected clients shows them meanwhile) by when they
    were revoked. A retention of 0 keeps those rows for ever. Server settings (`MCP_HOST_TURN_RETENTION_DAYS`, …): the
    operator, who is the owner of a single-owner install, sets them.
    """

    public_session_idle_s: float = Field(default=86_400.0, gt=0, validation_alias="public_session_idle_s")
    turn_days: float = Field(default=30.0, ge=0, validation_alias="turn_retention_days")
    receipt_days: float = Field(default=30.0, ge=0, validation_alias="receipt_retention_days")
    audit_days: float = Field(default=365.0, ge=0, validation_alias="audit_retention_days")
    hold_days: float = Field(default=30.0, ge=0, validation_alias="hold_retention_days")
    session_days: float = Field(default=30.0, ge=0, validation_alias="session_retention_days")
    oauth_grant_days: float = Field(default=30.0, ge=0, validation_alias="oauth_grant_retention_days")
    sweep_interval_s: float = Field(default=300.0, gt=0, validation_alias="retention_sweep_interval_s")
    sweep_batch: int = Field(default=5000, ge=1, validation_alias="retention_sweep_batch")


class OAuthSettings(Group):
    # Whether an OAuth client may be known by the URL of its client ID metadata document (CIMD,
    # the 2026-07-28 revision's preferred registration; the host fetches it through the remote
    # guard). Off, the metadata does not offer it and clients register (RFC 7591): for a host
    # that cannot reach the internet, where a client such as Claude Code, offered CIMD, names a
    # document the host could not fetch and its sign-in would fail.
    client_documents: bool = Field(default=True, validation_alias="oauth_client_documents")


class BackchannelSettings(Group):
    """Children asking the host for things (backchannel/)."""

    # Each plugin that names ops gets one unix socket under `runtime_dir` (a fresh private
    # folder under the system temp dir when unset: socket paths must stay under 108 bytes, so
    # not under a deep data dir).
    runtime_dir: Path | None = None
    max_message_bytes: int = Field(default=1 * MiB, ge=4096, validation_alias="host_op_max_message_bytes")
    max_connections: int = Field(default=16, ge=1, validation_alias="host_op_max_connections")
    # Denials logged per plugin (backchannel/server.py, wire/log_limit.py): a plugin that keeps
    # calling ops it may not is refused every time, but only this burst of denials is logged at
    # once, then this many a second; the rest are counted in one "N more … suppressed" line.
    denials_logged_burst: int = Field(default=20, ge=1, validation_alias="host_op_denials_logged_burst")
    denials_logged_per_s: float = Field(default=1.0, gt=0, validation_alias="host_op_denials_logged_per_s")
    # Host ops one forwarded call may make (its grant's budget).
    grant_op_budget: int = Field(default=256, ge=1)
