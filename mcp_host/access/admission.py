"""Access: who may open a session, under which role, and the owner's side of that.

Above: the sessions endpoint (`POST /v1/sessions`, which calls `open_with_code`,
`open_with_key` or `open_public`; the front desk calls the same), the one visitor URL (`/mcp`:
`key_session`) and the owner door (roles, codes, keys, host settings).
Below: `roles`, `credentials`, `sessions` (the session is opened with its role frozen into
a `RoleSnapshot`) and asyncpg (table `mcp_host.host_settings`, migration 003).

A session opens in one of three ways: with an access code (mode `code`, subject the code's
id), with an API key (mode `api_key`, subject the key's id), or with neither — a public
session under the owner's public role, only while the owner's `public_sessions` is on. The
role is read when the session opens and frozen into it: editing the role later changes new
sessions only. A refusal does not say what was wrong (unknown, expired, used up, revoked).

Revoking a code or key reaches its live sessions through authentication
(`sessions.authenticate` reports `credential_revoked`); `on_revoked` lets the composition
root drop this replica's cached authentications of that subject at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import anyio
import asyncpg
from pydantic import BaseModel, ConfigDict

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Plugin, Registry
from mcp_host.store import ConfigBackend

from .credentials import AccessCode, ApiKey, CredentialBook
from .roles import PUBLIC_ROLE_ID, CapabilityConfig, Role, RoleBook, grantable
from .sessions import RoleSnapshot, Session, SessionMode, SessionStore, Subject, Visitor

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = ["Access", "DeskEmail", "HostSettings", "OnRevoked"]

logger = logging.getLogger(__name__)

# Told (owner id, subject) after a code or key was revoked.
OnRevoked = Callable[[str, Subject], None]
# The default tool search threshold, and the highest one (migration 016 checks the same bounds).
TOOL_SEARCH_THRESHOLD = 40
MAX_TOOL_SEARCH_THRESHOLD = 100_000
# How long giving a use back to a code may take when its session could not be opened.
_GIVE_BACK_S = 5.0


DeskEmail = Literal["off", "optional", "required"]


class HostSettings(BaseModel):
    """An owner's host settings: whether sessions open without a credential, and their role;
    how many tools a session may see before it lists through tool search (`visitor.tool_search`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    public_sessions: bool = True
    public_role: str = PUBLIC_ROLE_ID
    tool_search_threshold: int = TOOL_SEARCH_THRESHOLD
    desk_email: DeskEmail = "optional"
    """Whether the front desk asks a visitor's email: not at all, optionally, or as a must."""


def _ignore(owner_id: str, subject: Subject) -> None:
    """No cache to tell."""


class Access:
    """The owner's roles, codes, keys and host settings, and opening sessions with them."""

    def __init__(
        self,
        pool: PgPool,
        config: ConfigBackend,
        plugins: Sequence[Plugin],
        sessions: SessionStore,
        *,
        on_revoked: OnRevoked = _ignore,
    ) -> None:
        self._pool = pool
        self._plugins = plugins if isinstance(plugins, Registry) else tuple(plugins)  # the registry: live
        self._sessions = sessions
        self._on_revoked = on_revoked
        self.roles = RoleBook(pool, config, plugins)
        self.credentials = CredentialBook(pool, config, plugins, self.roles)

    async def ensure_defaults(self, owner_id: str) -> None:
        """Give `owner_id` a `public` role granting nothing and default host settings (public
        sessions on) unless it has them; idempotent and safe when replicas start at once."""
        await self.roles.ensure_public(owner_id)
        await self._pool.execute(
            "INSERT INTO mcp_host.host_settings (owner_id) VALUES ($1) ON CONFLICT DO NOTHING", owner_id
        )

    # -- the owner's side -------------------------------------------------------------------

    def grantable(self) -> tuple[str, ...]:
        """The capabilities a role may be given (see `roles.not_grantable_because`)."""
        return grantable(self._plugins)

    async def put_role(
        self, owner_id: str, role_id: str, capabilities: Sequence[str], config: CapabilityConfig | None = None
    ) -> Role:
        """Create or replace a role (see `RoleBook.put`); raises `InvalidArguments`."""
        return await self.roles.put(owner_id, role_id, capabilities, config)

    async def list_roles(self, owner_id: str) -> list[Role]:
        return await self.roles.list(owner_id)

    async def create_code(
        self,
        owner_id: str,
        role: str,
        config: CapabilityConfig | None = None,
        *,
        expires_at: datetime | None = None,
        max_uses: int | None = None,
    ) -> tuple[str, AccessCode]:
        """A new access code: its text (shown once) and the code; raises `InvalidArguments`."""
        return await self.credentials.create_code(owner_id, role, config, expires_at=expires_at, max_uses=max_uses)

    async def list_codes(self, owner_id: str) -> list[AccessCode]:
        return await self.credentials.list_codes(owner_id)

    async def revoke_code(self, owner_id: str, code: str) -> bool:
        """Revoke a code given by its text or its id; True if this call revoked it.

        Its live sessions lose their tools at their next request (at once on this replica,
        within the authentication cache's TTL on others); it opens no new session.
        """
        code_id = await self.credentials.revoke_code(owner_id, code)
        if code_id is None:
            return False
        logger.info("access code %s revoked", code_id)
        self._on_revoked(owner_id, Subject(kind="code", id=code_id))
        return True

    async def create_api_key(
        self, owner_id: str, role: str, config: CapabilityConfig | None = None
    ) -> tuple[str, ApiKey]:
        """A new API key: its text (shown once) and the key; raises `InvalidArguments`."""
        return await self.credentials.create_api_key(owner_id, role, config)

    async def list_api_keys(self, owner_id: str) -> list[ApiKey]:
        return await self.credentials.list_api_keys(owner_id)

    async def revoke_api_key(self, owner_id: str, key_id: str) -> bool:
        """Revoke a key by its id; True if this call revoked it (see `revoke_code`)."""
        if not await self.credentials.revoke_api_key(owner_id, key_id):
            return False
        logger.info("API key %s revoked", key_id)
        self._on_revoked(owner_id, Subject(kind="api_key", id=key_id))
        return True

    async def host_settings(self, owner_id: str) -> HostSettings:
        """`owner_id`'s host settings (the defaults when none are stored)."""
        row = await self._pool.fetchrow(
            "SELECT public_sessions, public_role, tool_search_threshold, desk_email FROM mcp_host.host_settings"
            " WHERE owner_id = $1",
            owner_id,
        )
        return HostSettings() if row is None else HostSettings.model_validate(dict(row))

    async def tool_search_threshold(self, owner_id: str) -> int:
        """How many tools a session of `owner_id` may see before it lists through tool search."""
        return (await self.host_settings(owner_id)).tool_search_threshold

    async def set_host_settings(
        self,
        owner_id: str,
        *,
        public_sessions: bool | None = None,
        public_role: str | None = None,
        tool_search_threshold: int | None = None,
        desk_email: DeskEmail | None = None,
    ) -> HostSettings:
        """Change the given settings (None leaves one as it is); return them all.

        Raises `InvalidArguments` for a `public_role` that is no role of the owner's, or a
        threshold outside 0..`MAX_TOOL_SEARCH_THRESHOLD`.
        """
        if public_sessions is not None and not isinstance(public_sessions, bool):
            raise InvalidArguments("public_sessions: must be true or false")
        threshold = tool_search_threshold
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int)
            or not 0 <= threshold <= MAX_TOOL_SEARCH_THRESHOLD
        ):
            raise InvalidArguments(f"tool_search_threshold: must be an integer from 0 to {MAX_TOOL_SEARCH_THRESHOLD}")
        if desk_email is not None and desk_email not in ("off", "optional", "required"):
            raise InvalidArguments("desk_email: must be off, optional or required")
        if public_role is not None and not await self.roles.exists(owner_id, public_role):
            raise InvalidArguments(f"public_role: no role {public_role!r:.80}")
        try:
            row = await self._pool.fetchrow(
                """
                INSERT INTO mcp_host.host_settings AS h
                    (owner_id, public_sessions, public_role, tool_search_threshold, desk_email)
                VALUES ($1, COALESCE($2, true), COALESCE($3, 'public'), COALESCE($4::integer, $5::integer),
                    COALESCE($6, 'optional'))
                ON CONFLICT (owner_id) DO UPDATE SET public_sessions = COALESCE($2, h.public_sessions),
                    public_role = COALESCE($3, h.public_role),
                    tool_search_threshold = COALESCE($4::integer, h.tool_search_threshold),
                    desk_email = COALESCE($6, h.desk_email), updated_at = now()
                RETURNING public_sessions, public_role, tool_search_threshold, desk_email
                """,
                owner_id,
                public_sessions,
                public_role,
                threshold,
                TOOL_SEARCH_THRESHOLD,
                desk_email,
            )
        except asyncpg.ForeignKeyViolationError:
            raise InvalidArguments(f"public_role: no role {public_role!r:.80}") from None
        assert row is not None  # INSERT … RETURNING of one row
        return HostSettings.model_validate(dict(row))

    # -- opening sessions -------------------------------------------------------------------

    async def open_with_code(self, owner_id: str, code: str, visitor: Visitor | None) -> tuple[Session, str] | None:
        """Redeem `code` and open a code session; None when the code is not accepted.

        The use is given back if the session cannot be opened after all.
        """
        redeemed = await self.credentials.redeem_code(owner_id, code)
        if redeemed is None:
            return None
        subject = Subject(kind="code", id=redeemed.id)
        try:
            return await self._open(owner_id, "code", subject, redeemed.role, visitor)
        except BaseException:
            with anyio.move_on_after(_GIVE_BACK_S, shield=True):
                try:
                    await self.credentials.give_back(redeemed.id)
                except Exception:
                    logger.exception("access code %s: a use could not be given back", redeemed.id)
            raise

    async def open_with_key(self, owner_id: str, key: str, visitor: Visitor | None) -> tuple[Session, str] | None:
        """Open an API-key session; None when the key is not accepted."""
        verified = await self.credentials.verify_api_key(owner_id, key)
        if verified is None:
            return None
        return await self._open(owner_id, "api_key", Subject(kind="api_key", id=verified.id), verified.role, visitor)

    async def key_session(self, owner_id: str, key: str) -> Session | None:
        """The session an API key uses at the one visitor URL (`/mcp`), where a client shows
        the key on every request and names no session: the key's oldest live session without
        visitor fields, opened as `open_with_key` opens one when there is none. None when the
        key is not accepted. Two first requests at once may open two; both then use the older."""
        verified = await self.credentials.verify_api_key(owner_id, key)
        if verified is None:
            return None
        subject = Subject(kind="api_key", id=verified.id)
        kept = await self._sessions.live_of(owner_id, subject)
        if kept is not None:
            return kept
        opened, _ = await self._open(owner_id, "api_key", subject, verified.role, None)
        logger.info("session %s opened for API key %s at the one visitor URL", opened.id, verified.id)
        return await self._sessions.live_of(owner_id, subject) or opened

    async def withdraw(self, session: Session) -> None:
        """End `session`, opened for a sign-in that did not complete after all (the front desk's
        request was decided elsewhere meanwhile), and give its access code's use back."""
        await self._sessions.end(session.id)
        if session.subject is not None and session.subject.kind == "code":
            await self.credentials.give_back(session.subject.id)

    async def open_public(self, owner_id: str, visitor: Visitor | None) -> tuple[Session, str] | None:
        """Open a public session under the owner's public role; None while public sessions are off."""
        settings = await self.host_settings(owner_id)
        if not settings.public_sessions:
            return None
        return await self._open(owner_id, "public", None, settings.public_role, visitor)

    async def _open(
        self, owner_id: str, mode: SessionMode, subject: Subject | None, role_id: str, visitor: Visitor | None
    ) -> tuple[Session, str]:
        role = await self.roles.get(owner_id, role_id)
        if role is None:  # the schema's foreign keys keep this from happening; fail closed if it does
            logger.warning("role %r is missing; the %s session gets no role_granted capability", role_id, mode)
            snapshot = RoleSnapshot(id=role_id, capabilities=(), config={})
        else:
            snapshot = role.snapshot()
        return await self._sessions.open(owner_id=owner_id, mode=mode, visitor=visitor, subject=subject, role=snapshot)
