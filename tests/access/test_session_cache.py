"""The token cache in front of the session store: hits, misses, expiry, ending, revocation,
and the grace a recently verified token gets during a database outage."""

from __future__ import annotations

import anyio
import asyncpg
import pytest

from mcp_host.access.session_cache import CachedSessionStore
from mcp_host.access.sessions import InMemorySessionStore, Session, Subject, public_role
from mcp_host.errors import DatabaseUnavailable

pytestmark = pytest.mark.anyio


class CountingStore(InMemorySessionStore):
    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    async def authenticate(self, session_id: str, token: str) -> Session | None:
        self.checks += 1
        return await super().authenticate(session_id, token)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _open(store: CachedSessionStore) -> tuple[Session, str]:
    return await store.open(owner_id="o1", mode="public", visitor=None, role=public_role())


async def test_a_verified_token_is_answered_from_the_cache_until_it_expires() -> None:
    backing, clock = CountingStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=1.0, clock=clock)
    session, token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    assert await cache.authenticate(session.id, token) == session
    assert backing.checks == 1
    clock.now += 1.5
    assert await cache.authenticate(session.id, token) == session
    assert backing.checks == 2


async def test_wrong_tokens_are_never_cached() -> None:
    backing = CountingStore()
    cache = CachedSessionStore(backing, ttl_s=1.0, clock=Clock())
    session, token = await _open(cache)
    other, other_token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    for _ in range(2):
        assert await cache.authenticate(session.id, other_token) is None
        assert await cache.authenticate(session.id, token + "x") is None
    assert backing.checks == 5


async def test_ending_a_session_drops_it_from_the_cache_at_once() -> None:
    cache = CachedSessionStore(CountingStore(), ttl_s=5.0, clock=Clock())
    session, token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    assert await cache.end(session.id) is True
    assert await cache.authenticate(session.id, token) is None


async def test_ttl_zero_asks_the_store_every_time() -> None:
    backing = CountingStore()
    cache = CachedSessionStore(backing, ttl_s=0, clock=Clock())
    session, token = await _open(cache)
    for _ in range(3):
        assert await cache.authenticate(session.id, token) == session
    assert backing.checks == 3


async def test_cache_is_bounded() -> None:
    backing = CountingStore()
    cache = CachedSessionStore(backing, ttl_s=10.0, max_entries=2, clock=Clock())
    opened = [await _open(cache) for _ in range(3)]
    for session, token in opened:
        await cache.authenticate(session.id, token)
    first, first_token = opened[0]
    await cache.authenticate(first.id, first_token)  # evicted by the third: asks again
    assert backing.checks == 4


async def test_a_wrong_token_never_drops_the_right_ones_entry() -> None:
    backing = CountingStore()
    cache = CachedSessionStore(backing, ttl_s=10.0, clock=Clock())
    session, token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    assert await cache.authenticate(session.id, "not-the-token") is None
    assert await cache.authenticate(session.id, token) == session
    assert backing.checks == 2  # the wrong one asked the store; the right one is still cached


async def test_an_entry_is_dropped_once_no_check_may_use_it_even_with_no_check_coming() -> None:
    """Issue 26, defect 7: an abandoned session costs nothing here once its grace is over."""
    backing, clock = CountingStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=1.0, outage_grace_s=60.0, clock=clock)
    for session, token in [await _open(cache) for _ in range(3)]:
        await cache.authenticate(session.id, token)
    assert len(cache) == 3
    clock.now += 60.0
    async with anyio.create_task_group() as tg:
        tg.start_soon(cache.expire, 0.01)
        with anyio.fail_after(5):
            while len(cache):  # noqa: ASYNC110 - `expire` runs on its own timer
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


async def test_the_sessions_it_answers_equal_the_stores_and_share_one_role_snapshot() -> None:
    cache = CachedSessionStore(CountingStore(), ttl_s=10.0, clock=Clock())
    (first, first_token), (second, second_token) = await _open(cache), await _open(cache)
    for _ in range(2):  # the store's answer, then the cache's
        answers = [await cache.authenticate(first.id, first_token), await cache.authenticate(second.id, second_token)]
        assert answers == [first, second]
    assert answers[0] is not None and answers[1] is not None
    assert answers[0].role is answers[1].role


async def test_forgetting_a_subject_drops_its_sessions_at_once_and_no_others() -> None:
    backing, clock = CountingStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=5.0, clock=clock)
    spring, other_code = Subject(kind="code", id="c_1"), Subject(kind="code", id="c_2")
    opened = [
        await cache.open(owner_id="o1", mode="code", visitor=None, subject=spring, role=public_role()),
        await cache.open(owner_id="o1", mode="code", visitor=None, subject=spring, role=public_role()),
        await cache.open(owner_id="o1", mode="code", visitor=None, subject=other_code, role=public_role()),
        await cache.open(owner_id="o2", mode="code", visitor=None, subject=spring, role=public_role()),
    ]
    for session, token in opened:
        assert await cache.authenticate(session.id, token) == session
    backing.revoke_subject("o1", spring)
    assert backing.checks == 4

    cache.forget_subject("o1", spring)

    answers = [await cache.authenticate(session.id, token) for session, token in opened]
    assert [a.credential_revoked if a else None for a in answers] == [True, True, False, False]
    assert backing.checks == 6  # only the two sessions of o1's revoked code asked the store again


class FlakyStore(InMemorySessionStore):
    """The in-memory store, with a database outage switched on and off by the test."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.failure: Exception | None = None

    async def authenticate(self, session_id: str, token: str) -> Session | None:
        if self.down:
            raise asyncpg.InterfaceError("connection is closed")  # what a dead pool connection says
        if self.failure is not None:
            raise self.failure
        return await super().authenticate(session_id, token)

    async def end(self, session_id: str) -> bool:
        if self.down:
            raise DatabaseUnavailable()
        return await super().end(session_id)


async def test_during_an_outage_a_recently_verified_token_is_accepted_for_the_grace_only() -> None:
    backing, clock = FlakyStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=1.0, outage_grace_s=60.0, clock=clock)
    session, token = await _open(cache)
    stranger, stranger_token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    backing.down = True
    clock.now += 59.0
    assert await cache.authenticate(session.id, token) == session
    with pytest.raises(asyncpg.InterfaceError):  # never verified here: the outage shows (HTTP 503)
        await cache.authenticate(stranger.id, stranger_token)
    with pytest.raises(asyncpg.InterfaceError):  # a wrong token gets no grace either
        await cache.authenticate(session.id, token + "x")
    clock.now += 1.0
    with pytest.raises(asyncpg.InterfaceError):
        await cache.authenticate(session.id, token)


async def test_a_session_ended_here_during_an_outage_gets_no_grace() -> None:
    backing, clock = FlakyStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=1.0, outage_grace_s=60.0, clock=clock)
    session, token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    backing.down = True
    with pytest.raises(DatabaseUnavailable):
        await cache.end(session.id)
    with pytest.raises(asyncpg.InterfaceError):
        await cache.authenticate(session.id, token)


async def test_without_a_grace_an_outage_fails_every_check_past_the_ttl() -> None:
    backing, clock = FlakyStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=1.0, clock=clock)
    session, token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    backing.down = True
    assert await cache.authenticate(session.id, token) == session  # within the TTL, as always
    clock.now += 1.0
    with pytest.raises(asyncpg.InterfaceError):
        await cache.authenticate(session.id, token)


async def test_a_query_error_that_is_no_outage_gets_no_grace() -> None:
    backing, clock = FlakyStore(), Clock()
    cache = CachedSessionStore(backing, ttl_s=1.0, outage_grace_s=60.0, clock=clock)
    session, token = await _open(cache)
    assert await cache.authenticate(session.id, token) == session
    backing.failure = asyncpg.exceptions.UndefinedTableError("relation does not exist")
    clock.now += 1.0
    with pytest.raises(asyncpg.exceptions.UndefinedTableError):
        await cache.authenticate(session.id, token)
