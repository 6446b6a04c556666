"""The host's settings: one `BaseSettings`, the only code that reads the environment.

Every limit the host enforces is a named setting here, so a test can pin its default and an
operator can tune it (`MCP_HOST_<NAME>`). The command line overrides the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["Settings", "default_data_dir"]

MiB = 1024 * 1024


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/mcp-host`, else `~/.local/share/mcp-host`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mcp-host"


def _default_builtin_dir() -> Path | None:
    candidate = Path(__file__).resolve().parent.parent / "capabilities"
    return candidate if candidate.is_dir() else None


class Settings(BaseSettings):
    """Host settings; environment prefix `MCP_HOST_`."""

    model_config = SettingsConfigDict(env_prefix="MCP_HOST_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: SecretStr | None = None
    plugins: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # The builtin plugins; by default the `capabilities/` folder beside the package.
    builtin_dir: Path | None = Field(default_factory=lambda: _default_builtin_dir())
    sandbox: Literal["on", "off"] = "on"
    # The URL visitors are told to use; derived from host and port when unset.
    public_url: str | None = None
    # Extra Host header values the HTTP endpoints accept (DNS-rebinding protection).
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Children
    call_timeout_s: float = Field(default=30.0, gt=0)
    list_timeout_s: float = Field(default=5.0, gt=0)
    # How long a visitor's client may take to answer a child's elicitation or sampling request
    # (the call's own timeout waits meanwhile), and how long a 2026-07-28 call stays parked
    # between input rounds.
    input_timeout_s: float = Field(default=600.0, gt=0)
    # Elicitation, sampling and roots requests (and inference.generate ops) one call may put to
    # its visitor's client: sampling spends the visitor's model tokens.
    input_budget: int = Field(default=16, ge=1)
    child_start_timeout_s: float = Field(default=10.0, gt=0)
    child_idle_timeout_s: float = Field(default=600.0, gt=0)
    child_max_line_bytes: int = Field(default=8 * MiB, ge=1024)
    child_stderr_lines_per_s: int = Field(default=20, ge=1)
    child_stderr_line_bytes: int = Field(default=2048, ge=80)
    child_restart_backoff_max_s: float = Field(default=30.0, ge=0)
    child_crash_loop_threshold: int = Field(default=5, ge=1)
    child_timeouts_before_recycle: int = Field(default=3, ge=1)
    max_children: int = Field(default=64, ge=1)
    # Start the children every session can see (acl: always) when the host starts, so the
    # first visitor does not wait for Python children to boot (~0.8 s of CPU each).
    prestart_children: bool = True

    # Sandbox resource limits (per child)
    child_memory_bytes: int = Field(default=1024 * MiB, ge=64 * MiB)
    child_max_processes: int = Field(default=64, ge=4)
    child_max_open_files: int = Field(default=256, ge=32)
    child_cpu_seconds: int = Field(default=3600, ge=1)
    child_max_file_bytes: int = Field(default=256 * MiB, ge=MiB)
    # Where the cgroup file systems are mounted; each sandbox gets a pids cgroup of
    # `child_max_processes` tasks and a memory cgroup of `child_memory_cgroup_bytes` when
    # usable there (mcp_host/sandbox_cgroup.py, `SandboxCgroups`).
    cgroup_root: Path = Path("/sys/fs/cgroup")

    # The back-channel (host ops). Each plugin that names ops gets one unix socket under
    # `runtime_dir` (a fresh private folder under the system temp dir when unset: socket
    # paths must stay under 108 bytes, so not under a deep data dir).
    runtime_dir: Path | None = None
    host_op_max_message_bytes: int = Field(default=1 * MiB, ge=4096)
    host_op_max_connections: int = Field(default=16, ge=1)
    # Back-channel denials logged per plugin (backchannel.py, log_limit.py): a plugin that keeps
    # calling ops it may not is refused every time, but only this burst of denials is logged at
    # once, then this many a second; the rest are counted in one "N more … suppressed" line.
    host_op_denials_logged_burst: int = Field(default=20, ge=1)
    host_op_denials_logged_per_s: float = Field(default=1.0, gt=0)
    # Host ops one forwarded call may make (its grant's budget).
    grant_op_budget: int = Field(default=256, ge=1)
    # How long a quota limit read for a visitor's list or call is reused; the write that
    # would pass the cap always reads it afresh (quota.py).
    quota_limit_ttl_s: float = Field(default=1.0, ge=0, le=60)
    # Connectors. The host key that seals connector secrets: base64 of 32 bytes, shared by
    # replicas; unset, a key file in the data dir is made at first start.
    secret_key: SecretStr | None = None
    # How long a connector's `can_perform` answer and an owner's connected categories are
    # reused (connecting or disconnecting on this replica drops them at once).
    can_perform_ttl_s: float = Field(default=30.0, ge=0)
    connections_ttl_s: float = Field(default=1.0, ge=0)
    # The plugin store
    store_max_doc_bytes: int = Field(default=256 * 1024, ge=1024)
    store_max_doc_depth: int = Field(default=32, ge=2)
    store_max_query_limit: int = Field(default=500, ge=1)

    # Tool pinning (pins.py, SECURITY.md E8): a plugin tool whose definition the owner has not
    # approved is hidden from visitors. Off shows every safe tool as its child lists it.
    pin_tools: bool = True

    # Holds (holds.py, SECURITY.md E11, E16): a visitor's call to a tool annotated
    # `destructiveHint: true` (and not `readOnlyHint: true`) waits for the owner's approval;
    # a hold not used within `hold_ttl_s` of its creation expires.
    hold_destructive_tools: bool = True
    hold_ttl_s: float = Field(default=3600.0, gt=0)

    # How long a verified session token is trusted without asking the database again
    # (see session_cache.py); 0 asks every time.
    auth_cache_ttl_s: float = Field(default=1.0, ge=0, le=10)

    # Visitor input caps
    max_body_bytes: int = Field(default=4 * MiB, ge=64 * 1024)
    max_rest_body_bytes: int = Field(default=64 * 1024, ge=1024)
    meta_max_keys: int = Field(default=16, ge=1)
    meta_max_depth: int = Field(default=4, ge=1)
    meta_max_bytes: int = Field(default=4096, ge=256)

    # -- Access: slowing down wrong codes and keys at POST /v1/sessions (throttle.py) ------
    # Per client address, within a sliding window: the first `access_failures_free`
    # failures are answered at once; each later one waits `access_failure_delay_s`, doubling,
    # capped at `access_failure_delay_max_s`. At most `access_failure_clients_max` clients
    # are remembered (per replica).
    access_failures_free: int = Field(default=5, ge=0)
    access_failure_window_s: float = Field(default=300.0, gt=0)
    access_failure_delay_s: float = Field(default=0.25, ge=0)
    access_failure_delay_max_s: float = Field(default=4.0, ge=0, le=60)
    access_failure_clients_max: int = Field(default=10_000, ge=1)
    # -- end of Access ---------------------------------------------------------------------

    # -- Database outages (database_watch.py, health.py) ----------------------------------
    # An embedded PostgreSQL that dies is restarted at once, then after
    # `database_restart_backoff_s` doubling to `database_restart_backoff_max_s`, at most
    # `database_restart_attempts` times per outage; then the host stops (for its supervisor
    # to restart). Meanwhile, and while a server by URL is away, requests that need the
    # database get `unavailable` (HTTP 503, `Retry-After: database_retry_after_s`).
    database_restart_attempts: int = Field(default=5, ge=1)
    database_restart_backoff_s: float = Field(default=0.25, ge=0)
    database_restart_backoff_max_s: float = Field(default=5.0, ge=0)
    database_retry_after_s: int = Field(default=2, ge=1)
    # /readyz (and the outage probe) waits at most this long for the database's SELECT 1.
    readiness_timeout_s: float = Field(default=1.0, gt=0, le=30)
    # During an outage, a session token verified within this many seconds is still accepted
    # (session_cache.py), so known visitors reach tools that do not need the database; 0: never.
    auth_outage_grace_s: float = Field(default=60.0, ge=0, le=600)
    # -- end of Database outages -------------------------------------------------------------

    # -- Protocol sessions: 2025-11-25 `Mcp-Session-Id`s on both MCP endpoints ----------------
    # (protocol_sessions.py). At most `protocol_sessions_per_principal` per visitor session (or
    # the owner) and `protocol_sessions_per_client` per client address; past either, the least
    # recently used idle one is closed to make room, or the new one refused (429) when every
    # one is busy. One that had no request in flight for `protocol_session_idle_s` is closed.
    # `protocol_sessions_max` is the SDK's host-wide cap per endpoint (503 past it); one client
    # address can never reach it (per_client must be below it).
    protocol_sessions_per_principal: int = Field(default=16, ge=1)
    protocol_sessions_per_client: int = Field(default=256, ge=1)
    protocol_sessions_max: int = Field(default=10_000, ge=2)
    protocol_session_idle_s: float = Field(default=300.0, gt=0)
    # -- end of Protocol sessions ----------------------------------------------------------

    # -- HTTP connections (http_server.py: the uvicorn config of `serve` and the tests) -----
    # A connection whose request head (request line and headers) is not complete within
    # `http_header_timeout_s` of its start, or is over `http_max_head_bytes`, is answered 408 /
    # 431 and closed. A request body that sends nothing for `http_body_timeout_s` (per read) is
    # answered 408 and closed. Past `http_max_connections` open connections (or requests in
    # progress) every new request is answered 503 (uvicorn's `limit_concurrency`). An idle
    # keep-alive connection is closed after `http_keep_alive_s`.
    http_header_timeout_s: float = Field(default=10.0, gt=0)
    http_max_head_bytes: int = Field(default=64 * 1024, ge=4096)
    http_body_timeout_s: float = Field(default=30.0, gt=0)
    http_max_connections: int = Field(default=1000, ge=2)
    http_keep_alive_s: int = Field(default=5, ge=1)
    # Past `http_max_connections_per_client` connections open from one client address, a new
    # one is answered 503 and closed before it is read, so one address cannot hold the
    # host-wide cap (it must be below it). 64: a browser opens at most 6 per host, an MCP client
    # 2-3 (a GET stream, a POST or two), so a NAT of some 20 clients fits, while filling the
    # host-wide cap takes 16 addresses. Addresses uvicorn trusts as proxies (its
    # FORWARDED_ALLOW_IPS, by default 127.0.0.1 and ::1) are not capped per address.
    http_max_connections_per_client: int = Field(default=64, ge=1)
    # -- end of HTTP connections -----------------------------------------------------------

    # -- Sandbox memory and crash loops (sandbox.py `Limits`, children.py) -------------------
    # A sandbox's tmpfs: its private /tmp and /dev/shm (the rest of its file system is
    # read-only). Both are part of `child_memory_bytes`: its RLIMIT_AS is what they leave.
    child_tmp_bytes: int = Field(default=64 * MiB, ge=MiB)
    child_shm_bytes: int = Field(default=16 * MiB, ge=MiB)
    # A child's consecutive failures (crashes, failed starts) delay its next start: none after
    # the first, then `child_restart_backoff_base_s` doubling up to the max above. Only an
    # answered tools/call or `child_stable_after_s` of uptime resets the count (a restarted
    # child answering initialize or tools/list proves nothing).
    child_restart_backoff_base_s: float = Field(default=0.25, ge=0)
    child_stable_after_s: float = Field(default=30.0, gt=0)
    # -- end of Sandbox memory and crash loops -----------------------------------------------

    # -- Child logs (child_stderr.py, issue 12) ----------------------------------------------
    # Each plugin's last stderr, exception and error-result lines, kept for the owner's
    # `capability_logs`; and the exceptions (one line per traceback) and error results logged
    # per plugin and second after a burst, apart from `child_stderr_lines_per_s`.
    child_log_keep_lines: int = Field(default=200, ge=1, le=10_000)
    child_errors_logged_per_s: float = Field(default=1.0, gt=0)
    child_errors_logged_burst: int = Field(default=10, ge=1)
    # -- end of Child logs -------------------------------------------------------------------

    # -- Sandbox memory cgroup (sandbox_cgroup.py) -------------------------------------------
    # Each sandbox's memory cgroup, where the host has a memory controller: a cap on all the
    # RAM its processes hold together, swap included, so also the memfd and tmpfs pages they
    # write (RLIMIT_AS does not see those) and page cache. Unset: `child_memory_bytes`, the
    # same budget RLIMIT_AS and the tmpfs caps split per process, now held by the sandbox as
    # a whole. At the cap a write fails or the kernel's OOM killer kills in the sandbox.
    child_memory_cgroup_bytes: int | None = Field(default=None, ge=64 * MiB)
    # -- end of Sandbox memory cgroup --------------------------------------------------------

    @field_validator("plugins", mode="before")
    @classmethod
    def _split_paths(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p) for p in value.split(os.pathsep) if p]
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip() for h in value.split(",") if h.strip()]
        return value

    @model_validator(mode="after")
    def _tmpfs_within_child_memory(self) -> Settings:
        # Sandbox memory: the tmpfs caps come out of the child's budget and must leave some.
        if self.child_tmp_bytes + self.child_shm_bytes >= self.child_memory_bytes:
            raise ValueError("child_tmp_bytes + child_shm_bytes must be below child_memory_bytes (they are part of it)")
        return self

    @model_validator(mode="after")
    def _protocol_session_caps_nest(self) -> Settings:
        # Protocol sessions: one client address must not be able to fill the host-wide cap.
        if not self.protocol_sessions_per_principal <= self.protocol_sessions_per_client < self.protocol_sessions_max:
            raise ValueError(
                "protocol_sessions_per_principal <= protocol_sessions_per_client < protocol_sessions_max must hold"
            )
        return self

    @model_validator(mode="after")
    def _connection_caps_nest(self) -> Settings:
        # HTTP connections: one client address must not be able to fill the host-wide cap.
        if self.http_max_connections_per_client >= self.http_max_connections:
            raise ValueError("http_max_connections_per_client must be below http_max_connections")
        return self

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")
