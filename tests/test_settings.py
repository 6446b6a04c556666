"""Settings are grouped, and every `MCP_HOST_*` variable an operator may have set still works:
each is read into its group (`MCP_HOST_CHILD_IDLE_TIMEOUT_S` → `settings.children.idle_timeout_s`),
so is the same flat name given to `Settings(...)`, and a bad value is reported under its name."""

from __future__ import annotations

from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from mcp_host.settings import ChildrenSettings, SandboxSettings, Settings, default_data_dir, flat_names

# Every variable (after `MCP_HOST_`), the setting it lands in, a value to set, what that reads as.
# The values pass the checks across settings (tmpfs within memory, per-client caps below totals).
VARIABLES: list[tuple[str, str, str, Any]] = [
    ("HOST", "host", "0.0.0.0", "0.0.0.0"),
    ("PORT", "port", "9999", 9999),
    ("DATA_DIR", "data_dir", "/var/lib/h", Path("/var/lib/h")),
    ("PLUGINS", "plugins", "/a:/b", [Path("/a"), Path("/b")]),
    ("BUILTIN_DIR", "builtin_dir", "/opt/caps", Path("/opt/caps")),
    ("PUBLIC_URL", "public_url", "https://mcp.example.org", "https://mcp.example.org"),
    ("ALLOWED_HOSTS", "allowed_hosts", "a.example, b.example", ["a.example", "b.example"]),
    ("REPLICA_URL", "replica_url", "http://10.0.0.5:8765", "http://10.0.0.5:8765"),
    ("METRICS_TOKEN", "metrics_token", "m-token", SecretStr("m-token")),
    ("LOG_FORMAT", "log_format", "json", "json"),
    ("PARENT_URL", "parent_url", "https://main.example.org", "https://main.example.org"),
    ("PARENT_TOKEN", "parent_token", "mcpn_x", SecretStr("mcpn_x")),
    ("META_MAX_KEYS", "wire.meta_max_keys", "33", 33),
    ("META_MAX_DEPTH", "wire.meta_max_depth", "9", 9),
    ("META_MAX_BYTES", "wire.meta_max_bytes", "8193", 8193),
    ("MAX_BODY_BYTES", "http.max_body_bytes", "8388609", 8388609),
    ("MAX_REST_BODY_BYTES", "http.max_rest_body_bytes", "131073", 131073),
    ("HTTP_HEADER_TIMEOUT_S", "http.header_timeout_s", "20.5", 20.5),
    ("HTTP_MAX_HEAD_BYTES", "http.max_head_bytes", "131073", 131073),
    ("HTTP_BODY_TIMEOUT_S", "http.body_timeout_s", "60.5", 60.5),
    ("HTTP_REQUEST_TIMEOUT_S", "http.request_timeout_s", "45.5", 45.5),
    ("HTTP_BODY_MIN_BYTES_PER_S", "http.body_min_bytes_per_s", "2048", 2048),
    ("HTTP_BODY_RATE_WINDOW_S", "http.body_rate_window_s", "2.5", 2.5),
    ("HTTP_MAX_CONNECTIONS", "http.max_connections", "2000", 2000),
    ("HTTP_KEEP_ALIVE_S", "http.keep_alive_s", "11", 11),
    ("HTTP_MAX_CONNECTIONS_PER_CLIENT", "http.max_connections_per_client", "63", 63),
    ("HTTP_RESERVED_SHARE", "http.reserved_share", "0.5", 0.5),
    ("HTTP_RESERVED_PER_CLIENT", "http.reserved_per_client", "8", 8),
    ("DRAIN_TIMEOUT_S", "http.drain_timeout_s", "40.5", 40.5),
    ("SESSION_MAX_PROTOCOL_SESSIONS", "principals.session_protocol_sessions", "8", 8),
    ("PRINCIPAL_MAX_PROTOCOL_SESSIONS", "principals.protocol_sessions", "300", 300),
    ("PROTOCOL_SESSIONS_MAX", "principals.max_protocol_sessions", "20000", 20000),
    ("SESSION_MAX_TASKS", "principals.session_tasks", "32", 32),
    ("PRINCIPAL_MAX_TASKS", "principals.tasks", "200", 200),
    ("MAX_TASKS", "principals.max_tasks", "20000", 20000),
    ("PROTOCOL_SESSION_IDLE_S", "protocol_sessions.idle_s", "600.5", 600.5),
    ("PROTOCOL_SESSION_REST_S", "protocol_sessions.rest_s", "30.5", 30.5),
    ("DATABASE_URL", "database.url", "postgresql://u@db/h", SecretStr("postgresql://u@db/h")),
    ("DATABASE_RESTART_ATTEMPTS", "database.restart_attempts", "11", 11),
    ("DATABASE_RESTART_BACKOFF_S", "database.restart_backoff_s", "1.0", 1.0),
    ("DATABASE_RESTART_BACKOFF_MAX_S", "database.restart_backoff_max_s", "10.5", 10.5),
    ("DATABASE_RETRY_AFTER_S", "database.retry_after_s", "5", 5),
    ("READINESS_TIMEOUT_S", "database.readiness_timeout_s", "2.5", 2.5),
    ("STORE_MAX_DOC_BYTES", "store.max_doc_bytes", "524289", 524289),
    ("STORE_MAX_DOC_DEPTH", "store.max_doc_depth", "65", 65),
    ("STORE_MAX_QUERY_LIMIT", "store.max_query_limit", "1001", 1001),
    ("SANDBOX", "sandbox.mode", "off", "off"),
    ("CHILD_MEMORY_BYTES", "sandbox.memory_bytes", "536870912", 536870912),
    ("CHILD_MAX_PROCESSES", "sandbox.max_processes", "129", 129),
    ("CHILD_MAX_OPEN_FILES", "sandbox.max_open_files", "513", 513),
    ("CHILD_CPU_SECONDS", "sandbox.cpu_seconds", "7201", 7201),
    ("CHILD_MAX_FILE_BYTES", "sandbox.max_file_bytes", "536870913", 536870913),
    ("CHILD_TMP_BYTES", "sandbox.tmp_bytes", "33554432", 33554432),
    ("CHILD_SHM_BYTES", "sandbox.shm_bytes", "8388608", 8388608),
    ("CGROUP_ROOT", "sandbox.cgroup_root", "/cg", Path("/cg")),
    ("CHILD_MEMORY_CGROUP_BYTES", "sandbox.memory_cgroup_bytes", "134217728", 134217728),
    ("EGRESS_HOSTS_FILE", "egress.hosts_file", "/etc/mcp-host/hosts", Path("/etc/mcp-host/hosts")),
    ("EGRESS_CONNECTIONS", "egress.connections", "8", 8),
    ("EGRESS_MB_PER_MINUTE", "egress.mb_per_minute", "50", 50),
    ("EGRESS_IDLE_S", "egress.idle_s", "30", 30.0),
    ("CALL_TIMEOUT_S", "children.call_timeout_s", "60.5", 60.5),
    ("LIST_TIMEOUT_S", "children.list_timeout_s", "10.5", 10.5),
    ("READY_LISTS_WAIT_S", "children.ready_lists_wait_s", "0", 0.0),
    ("INPUT_TIMEOUT_S", "children.input_timeout_s", "1200.5", 1200.5),
    ("INPUT_BUDGET", "children.input_budget", "33", 33),
    ("CHILD_START_TIMEOUT_S", "children.start_timeout_s", "20.5", 20.5),
    ("CHILD_IDLE_TIMEOUT_S", "children.idle_timeout_s", "1200.5", 1200.5),
    ("CHILD_MAX_LINE_BYTES", "children.max_line_bytes", "16777217", 16777217),
    ("CHILD_RESTART_BACKOFF_BASE_S", "children.restart_backoff_base_s", "1.0", 1.0),
    ("CHILD_RESTART_BACKOFF_MAX_S", "children.restart_backoff_max_s", "60.5", 60.5),
    ("CHILD_STABLE_AFTER_S", "children.stable_after_s", "60.5", 60.5),
    ("CHILD_CRASH_LOOP_THRESHOLD", "children.crash_loop_threshold", "11", 11),
    ("CHILD_TIMEOUTS_BEFORE_RECYCLE", "children.timeouts_before_recycle", "7", 7),
    ("MAX_CHILDREN", "children.max_running", "129", 129),
    ("CHILD_SESSION_IDLE_TIMEOUT_S", "children.session_idle_timeout_s", "600.5", 600.5),
    ("MAX_SESSION_INSTANCES", "principals.max_session_instances", "65", 65),
    ("PRINCIPAL_SESSION_INSTANCES", "principals.session_instances", "9", 9),
    ("PRINCIPAL_INSTANCE_STARTS_PER_MINUTE", "principals.instance_starts_per_minute", "25", 25),
    ("PRINCIPAL_PUBLIC_SESSIONS_PER_MINUTE", "principals.public_sessions_per_minute", "90", 90),
    ("PRINCIPAL_TURNS_PER_MINUTE", "principals.turns_per_minute", "90", 90),
    ("PRINCIPAL_REQUESTS_PER_S", "principals.requests_per_s", "5.5", 5.5),
    ("PRINCIPAL_REQUESTS_BURST", "principals.requests_burst", "30", 30),
    ("PRINCIPAL_REQUEST_WAIT_S", "principals.request_wait_s", "0.5", 0.5),
    ("TURN_MAX_BYTES", "principals.turn_max_bytes", "131072", 131072),
    ("SESSION_MAX_TURNS", "principals.session_turns", "99", 99),
    ("SESSION_MAX_TURN_BYTES", "principals.session_turn_bytes", "1048576", 1048576),
    ("TURN_MAX_RECEIPTS", "principals.turn_receipts", "77", 77),
    ("SESSION_MAX_PENDING_HOLDS", "principals.session_holds", "7", 7),
    ("PRINCIPAL_MAX_PENDING_HOLDS", "principals.principal_holds", "70", 70),
    ("PRESTART_CHILDREN", "children.prestart", "false", False),
    ("CHILD_STDERR_LINES_PER_S", "child_logs.stderr_lines_per_s", "41", 41),
    ("CHILD_STDERR_LINE_BYTES", "child_logs.stderr_line_bytes", "4097", 4097),
    ("CHILD_LOG_KEEP_LINES", "child_logs.keep_lines", "300", 300),
    ("CHILD_ERRORS_LOGGED_PER_S", "child_logs.errors_logged_per_s", "2.5", 2.5),
    ("CHILD_ERRORS_LOGGED_BURST", "child_logs.errors_logged_burst", "21", 21),
    ("AUTH_CACHE_TTL_S", "access.auth_cache_ttl_s", "2.5", 2.5),
    ("AUTH_OUTAGE_GRACE_S", "access.auth_outage_grace_s", "120.5", 120.5),
    ("ACCESS_FAILURES_FREE", "access.failures_free", "11", 11),
    ("ACCESS_FAILURE_WINDOW_S", "access.failure_window_s", "600.5", 600.5),
    ("ACCESS_FAILURE_DELAY_S", "access.failure_delay_s", "1.0", 1.0),
    ("ACCESS_FAILURE_DELAY_MAX_S", "access.failure_delay_max_s", "8.5", 8.5),
    ("ACCESS_FAILURE_CLIENTS_MAX", "access.failure_clients_max", "20001", 20001),
    ("SECRET_KEY", "connectors.secret_key", "a2V5", SecretStr("a2V5")),
    ("CAN_PERFORM_TTL_S", "connectors.can_perform_ttl_s", "60.5", 60.5),
    ("CONNECTIONS_TTL_S", "connectors.connections_ttl_s", "2.5", 2.5),
    ("PIN_TOOLS", "policy.pin_tools", "false", False),
    ("APP_MAX_BYTES", "policy.app_max_bytes", "1048576", 1048576),
    ("HOLD_DESTRUCTIVE_TOOLS", "policy.hold_destructive_tools", "false", False),
    ("HOLD_TTL_S", "policy.hold_ttl_s", "7200.5", 7200.5),
    ("QUOTA_LIMIT_TTL_S", "policy.quota_limit_ttl_s", "2.5", 2.5),
    ("PUBLIC_SESSION_IDLE_S", "retention.public_session_idle_s", "3600.5", 3600.5),
    ("TURN_RETENTION_DAYS", "retention.turn_days", "7.5", 7.5),
    ("RECEIPT_RETENTION_DAYS", "retention.receipt_days", "0", 0.0),
    ("AUDIT_RETENTION_DAYS", "retention.audit_days", "90", 90.0),
    ("HOLD_RETENTION_DAYS", "retention.hold_days", "14", 14.0),
    ("SESSION_RETENTION_DAYS", "retention.session_days", "60", 60.0),
    ("OAUTH_GRANT_RETENTION_DAYS", "retention.oauth_grant_days", "7", 7.0),
    ("OAUTH_CLIENT_DOCUMENTS", "oauth.client_documents", "false", False),
    ("RETENTION_SWEEP_INTERVAL_S", "retention.sweep_interval_s", "60.5", 60.5),
    ("RETENTION_SWEEP_BATCH", "retention.sweep_batch", "1000", 1000),
    ("RUNTIME_DIR", "backchannel.runtime_dir", "/run/h", Path("/run/h")),
    ("HOST_OP_MAX_MESSAGE_BYTES", "backchannel.max_message_bytes", "2097153", 2097153),
    ("HOST_OP_MAX_CONNECTIONS", "backchannel.max_connections", "33", 33),
    ("HOST_OP_DENIALS_LOGGED_BURST", "backchannel.denials_logged_burst", "41", 41),
    ("HOST_OP_DENIALS_LOGGED_PER_S", "backchannel.denials_logged_per_s", "2.5", 2.5),
    ("GRANT_OP_BUDGET", "backchannel.grant_op_budget", "513", 513),
]

# Each setting's default, as the flat `Settings` of before the groups had it.
DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8765,
    "plugins": [],
    "public_url": None,
    "allowed_hosts": [],
    "replica_url": None,
    "metrics_token": None,
    "log_format": "text",
    "parent_url": None,
    "parent_token": None,
    "meta_max_keys": 16,
    "meta_max_depth": 4,
    "meta_max_bytes": 4096,
    "max_body_bytes": 4194304,
    "max_rest_body_bytes": 65536,
    "http_header_timeout_s": 10.0,
    "http_max_head_bytes": 65536,
    "http_body_timeout_s": 30.0,
    "http_request_timeout_s": 30.0,
    "http_body_min_bytes_per_s": 1024,
    "http_body_rate_window_s": 5.0,
    "http_max_connections": 1000,
    "http_keep_alive_s": 65,
    "http_max_connections_per_client": 64,
    "http_reserved_share": 0.25,
    "http_reserved_per_client": 4,
    "drain_timeout_s": 25.0,
    "session_max_protocol_sessions": 16,
    "principal_max_protocol_sessions": 256,
    "protocol_sessions_max": 10000,
    "session_max_tasks": 64,
    "principal_max_tasks": 128,
    "max_tasks": 10000,
    "protocol_session_idle_s": 300.0,
    "protocol_session_rest_s": 60.0,
    "database_url": None,
    "database_restart_attempts": 5,
    "database_restart_backoff_s": 0.25,
    "database_restart_backoff_max_s": 5.0,
    "database_retry_after_s": 2,
    "readiness_timeout_s": 1.0,
    "store_max_doc_bytes": 262144,
    "store_max_doc_depth": 32,
    "store_max_query_limit": 500,
    "sandbox": "on",
    "child_memory_bytes": 1073741824,
    "child_max_processes": 64,
    "child_max_open_files": 256,
    "child_cpu_seconds": 3600,
    "child_max_file_bytes": 268435456,
    "child_tmp_bytes": 67108864,
    "child_shm_bytes": 16777216,
    "cgroup_root": Path("/sys/fs/cgroup"),
    "child_memory_cgroup_bytes": None,
    "egress_hosts_file": None,
    "egress_connections": 32,
    "egress_mb_per_minute": 600,
    "egress_idle_s": 300.0,
    "call_timeout_s": 30.0,
    "list_timeout_s": 5.0,
    "ready_lists_wait_s": 30.0,
    "input_timeout_s": 600.0,
    "input_budget": 16,
    "child_start_timeout_s": 10.0,
    "child_idle_timeout_s": 600.0,
    "child_max_line_bytes": 8388608,
    "child_restart_backoff_base_s": 0.25,
    "child_restart_backoff_max_s": 30.0,
    "child_stable_after_s": 30.0,
    "child_crash_loop_threshold": 5,
    "child_timeouts_before_recycle": 3,
    "max_children": 64,
    "child_session_idle_timeout_s": 300.0,
    "max_session_instances": 32,
    "principal_session_instances": 4,
    "principal_instance_starts_per_minute": 4,
    "principal_public_sessions_per_minute": 60,
    "principal_turns_per_minute": 60,
    "principal_requests_per_s": 20.0,
    "principal_requests_burst": 100,
    "principal_request_wait_s": 2.0,
    "turn_max_bytes": 65536,
    "session_max_turns": 1000,
    "session_max_turn_bytes": 4194304,
    "turn_max_receipts": 1000,
    "session_max_pending_holds": 20,
    "principal_max_pending_holds": 100,
    "prestart_children": True,
    "child_stderr_lines_per_s": 20,
    "child_stderr_line_bytes": 2048,
    "child_log_keep_lines": 200,
    "child_errors_logged_per_s": 1.0,
    "child_errors_logged_burst": 10,
    "auth_cache_ttl_s": 1.0,
    "auth_outage_grace_s": 60.0,
    "access_failures_free": 5,
    "access_failure_window_s": 300.0,
    "access_failure_delay_s": 0.25,
    "access_failure_delay_max_s": 4.0,
    "access_failure_clients_max": 10000,
    "secret_key": None,
    "can_perform_ttl_s": 30.0,
    "connections_ttl_s": 1.0,
    "pin_tools": True,
    "app_max_bytes": 4 * 1024 * 1024,
    "hold_destructive_tools": True,
    "hold_ttl_s": 3600.0,
    "quota_limit_ttl_s": 1.0,
    "public_session_idle_s": 86400.0,
    "turn_retention_days": 30.0,
    "receipt_retention_days": 30.0,
    "audit_retention_days": 365.0,
    "hold_retention_days": 30.0,
    "session_retention_days": 30.0,
    "oauth_grant_retention_days": 30.0,
    "oauth_client_documents": True,
    "retention_sweep_interval_s": 300.0,
    "retention_sweep_batch": 5000,
    "runtime_dir": None,
    "host_op_max_message_bytes": 1048576,
    "host_op_max_connections": 16,
    "host_op_denials_logged_burst": 20,
    "host_op_denials_logged_per_s": 1.0,
    "grant_op_budget": 256,
}


@pytest.fixture(autouse=True)
def _no_host_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in flat_names():
        monkeypatch.delenv(f"MCP_HOST_{name.upper()}", raising=False)


def _read(settings: Settings, path: str) -> Any:
    return reduce(getattr, path.split("."), settings)


def test_the_table_names_every_setting_once() -> None:
    assert sorted(variable.lower() for variable, *_ in VARIABLES) == sorted(flat_names())
    assert sorted(flat_names()) == sorted([*DEFAULTS, "data_dir", "builtin_dir"])


@pytest.mark.parametrize(("variable", "path", "text", "value"), VARIABLES)
def test_every_variable_is_read_into_its_group(
    monkeypatch: pytest.MonkeyPatch, variable: str, path: str, text: str, value: Any
) -> None:
    monkeypatch.setenv(f"MCP_HOST_{variable}", text)
    assert _read(Settings(), path) == value


@pytest.mark.parametrize(("variable", "path", "text", "value"), VARIABLES)
def test_every_flat_keyword_is_read_into_its_group(variable: str, path: str, text: str, value: Any) -> None:
    assert _read(Settings(**{variable.lower(): value}), path) == value


def test_variable_names_are_case_insensitive_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("mcp_host_child_idle_timeout_s", "7")
    assert Settings().children.idle_timeout_s == 7.0


def test_defaults_are_those_of_the_flat_settings() -> None:
    settings = Settings()
    paths = {variable.lower(): path for variable, path, *_ in VARIABLES}
    assert {flat: _read(settings, paths[flat]) for flat in DEFAULTS} == DEFAULTS
    assert settings.data_dir == default_data_dir()
    assert settings.builtin_dir == Path(__file__).resolve().parent.parent / "capabilities"


def test_a_keyword_beats_the_variable_and_leaves_the_rest_of_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_HOST_SANDBOX", "off")
    monkeypatch.setenv("MCP_HOST_CHILD_MAX_PROCESSES", "9")
    monkeypatch.setenv("MCP_HOST_CHILD_IDLE_TIMEOUT_S", "5")
    settings = Settings(child_max_processes=40, children={"idle_timeout_s": 6})
    assert (settings.sandbox.mode, settings.sandbox.max_processes, settings.children.idle_timeout_s) == ("off", 40, 6)


def test_a_group_given_whole_beats_the_variables_of_that_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_HOST_SANDBOX", "off")
    monkeypatch.setenv("MCP_HOST_CALL_TIMEOUT_S", "3")
    settings = Settings(sandbox=SandboxSettings(max_processes=7))
    assert settings.sandbox == SandboxSettings(mode="on", max_processes=7)
    assert settings.children == ChildrenSettings(call_timeout_s=3)


def test_a_flat_keyword_beats_the_same_setting_in_a_group_given_whole() -> None:
    settings = Settings(sandbox=SandboxSettings(max_processes=7), child_max_processes=8)
    assert settings.sandbox == SandboxSettings(max_processes=8)


def test_sandbox_is_the_mode_when_given_a_word_and_the_group_when_given_a_group() -> None:
    assert Settings(sandbox="off").sandbox == SandboxSettings(mode="off")
    assert Settings(sandbox={"sandbox": "off", "child_max_processes": 5}).sandbox == SandboxSettings(
        mode="off", max_processes=5
    )


def test_a_bad_value_is_reported_under_its_variable_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_HOST_CHILD_IDLE_TIMEOUT_S", "-1")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert [error["loc"] for error in raised.value.errors()] == [("children", "child_idle_timeout_s")]


def test_an_unknown_name_in_a_group_is_refused() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Settings(children={"idle_timeout": 6})


def test_the_checks_across_settings_name_the_variables() -> None:
    with pytest.raises(ValidationError, match="child_tmp_bytes [+] child_shm_bytes must be below child_memory_bytes"):
        Settings(child_memory_bytes=64 << 20, child_tmp_bytes=60 << 20, child_shm_bytes=4 << 20)
    with pytest.raises(ValidationError, match="http_max_connections_per_client must be below http_max_connections"):
        Settings(http_max_connections=64, http_max_connections_per_client=64)
    with pytest.raises(
        ValidationError,
        match="session_max_protocol_sessions <= principal_max_protocol_sessions < protocol_sessions_max must hold",
    ):
        Settings(principal_max_protocol_sessions=10_000)
    with pytest.raises(ValidationError, match="session_max_tasks <= principal_max_tasks < max_tasks must hold"):
        Settings(session_max_tasks=129)
    with pytest.raises(ValidationError, match="principal_session_instances must not be above max_session_instances"):
        Settings(max_session_instances=8, principal_session_instances=9)


def test_a_principals_share_of_instances_follows_the_host_wide_cap_unless_set() -> None:
    shares = [Settings(max_session_instances=cap).principals.session_instances for cap in (1, 3, 4, 32, 64, 100, 1000)]
    assert shares == [1, 3, 4, 4, 8, 12, 125]
    assert Settings(max_session_instances=64, principal_session_instances=2).principals.session_instances == 2


def test_settings_and_their_groups_are_frozen_and_copied_by_group() -> None:
    settings = Settings(secret_key=SecretStr("a2V5"))
    with pytest.raises(ValidationError):
        settings.children.idle_timeout_s = 1.0
    copied = settings.model_copy(update={"children": settings.children.model_copy(update={"idle_timeout_s": 1.0})})
    assert (copied.children.idle_timeout_s, copied.connectors, settings.children.idle_timeout_s) == (
        1.0,
        settings.connectors,
        600.0,
    )
