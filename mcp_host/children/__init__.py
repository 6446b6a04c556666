"""A child's life (start, reuse, idle stop, restart with backoff, failing), its stderr, which
call a child's server-to-client request belongs to, the factory that makes a plugin's child, and
the host's OAuth sign-ins to remote plugins' servers (`RemoteSignIns`). The guard a remote
child's requests pass (`RemoteGuard`) is also how `oauth` fetches a client's metadata document.
Below: `sandbox`. Above: access, `oauth` and the doors.
"""

from .backoff import RunOfFailures
from .call_routing import InFlight
from .changes import Changed, ListChange, PromptsChanged, ResourceContentChanged, ResourcesChanged, ToolsChanged
from .factory import ChildFactory, ChildSource, OnCall, SocketPaths
from .instances import InstanceShares
from .lifecycle import ChildLimits, ChildState
from .mcp_session import Answer, Child
from .once_open import OnceOpen
from .parent import PARENT_KIND, ParentLink, granted_by_parent, parent_plugins
from .pool import ChildPool
from .remote_guard import MemoryResolver, RemoteGuard, Resolver, SystemResolver
from .remote_sign_in import CALLBACK_PATH, CLIENT_DOCUMENT_PATH, VISITOR_PATH, RemoteSignIns, SignInOutcome
from .stderr import LogKind

__all__ = [
    "Answer",
    "CALLBACK_PATH",
    "CLIENT_DOCUMENT_PATH",
    "VISITOR_PATH",
    "PARENT_KIND",
    "Child",
    "ChildFactory",
    "ChildLimits",
    "ChildPool",
    "ChildSource",
    "ChildState",
    "InFlight",
    "InstanceShares",
    "Changed",
    "ListChange",
    "PromptsChanged",
    "ResourceContentChanged",
    "ResourcesChanged",
    "ToolsChanged",
    "ParentLink",
    "LogKind",
    "MemoryResolver",
    "OnCall",
    "OnceOpen",
    "RemoteGuard",
    "RemoteSignIns",
    "Resolver",
    "SystemResolver",
    "RunOfFailures",
    "SignInOutcome",
    "SocketPaths",
    "granted_by_parent",
    "parent_plugins",
]
