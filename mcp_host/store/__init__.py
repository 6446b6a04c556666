"""PostgreSQL: the embedded server or one by URL, the pool and migrations, outages; each plugin's
store and search; declared config; the host key; how long the host's own tables keep rows.
Below: `plugins`. Above: sandbox, children, access, and the edge (the protocol-session records).
"""

from .app_contents import AppContents, StoredApp
from .config import (
    SCOPES,
    ConfigBackend,
    ConfigScope,
    ConfigStore,
    ConfigUnset,
    OwnerEnv,
    check_value,
    check_values,
    declared,
    read_values,
)
from .database import Database, PgConnection, PgPool, open_database
from .egress_grants import MAX_OWNER_EGRESS, EgressGrants, OwnerEgress, owner_rule
from .node_grants import NodeGrantRow, NodeGrantStore
from .plugin_store import PluginStore, PluginStores, QuotaCheck, StoreLimits
from .protocol_records import ProtocolSessionRecords, SessionRecord, record_key
from .remote_sign_ins import SignInRecord, SignInState, SignInStore
from .replicas import MAX_NOTICE_BYTES, ChangeChannel, Replicas, new_replica_id
from .retention import Retention, RetentionPolicy, Swept
from .rules import CallCounter, RuleState, RuleStore
from .secrets_box import SealError, SecretBox, load_host_key
from .uninstall import Uninstalled, uninstall

__all__ = [
    "AppContents",
    "MAX_NOTICE_BYTES",
    "MAX_OWNER_EGRESS",
    "CallCounter",
    "ChangeChannel",
    "ConfigBackend",
    "ConfigScope",
    "ConfigStore",
    "ConfigUnset",
    "Database",
    "EgressGrants",
    "NodeGrantRow",
    "NodeGrantStore",
    "OwnerEgress",
    "OwnerEnv",
    "PgConnection",
    "PgPool",
    "PluginStore",
    "PluginStores",
    "ProtocolSessionRecords",
    "QuotaCheck",
    "Replicas",
    "Retention",
    "RetentionPolicy",
    "RuleState",
    "RuleStore",
    "SCOPES",
    "SealError",
    "SecretBox",
    "SessionRecord",
    "SignInRecord",
    "SignInState",
    "SignInStore",
    "StoreLimits",
    "StoredApp",
    "Swept",
    "Uninstalled",
    "check_value",
    "check_values",
    "declared",
    "load_host_key",
    "new_replica_id",
    "open_database",
    "owner_rule",
    "read_values",
    "record_key",
    "uninstall",
]
