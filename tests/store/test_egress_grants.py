"""The owner's egress entries in PostgreSQL (migration 023): canonical entries, `private` as
`allow_private` names the host, refusals in one sentence, the per-plugin cap, and the purge."""

from __future__ import annotations

import pytest
from inline_snapshot import snapshot

from mcp_host.errors import InvalidArguments
from mcp_host.store import MAX_OWNER_EGRESS, EgressGrants, OwnerEgress, PgPool, uninstall

pytestmark = pytest.mark.anyio


async def test_entries_are_stored_canonical_and_private_names_their_hosts(pool: PgPool) -> None:
    grants = EgressGrants(pool)
    assert await grants.entries("npm.fetch") == OwnerEgress()
    await grants.allow("npm.fetch", "API.Example.com", private=False, by="owner-1")
    await grants.allow("npm.fetch", "db.internal:5432", private=True, by="owner-1")
    await grants.allow("npm.fetch", "[::1]:8080", private=True, by="owner-1")
    after = await grants.allow("npm.fetch", "*.example.org:8443", private=False, by="owner-1")
    await grants.allow("other", "169.254.169.254", private=True, by="owner-1")  # the metadata address itself

    assert after == OwnerEgress(
        entries=("*.example.org:8443", "[::1]:8080", "api.example.com", "db.internal:5432"),
        private=("[::1]", "db.internal"),
    )
    assert await grants.entries("npm.fetch") == after
    assert await grants.all() == {
        "npm.fetch": after,
        "other": OwnerEgress(entries=("169.254.169.254",), private=("169.254.169.254",)),
    }
    rows = await pool.fetch("SELECT plugin_id, entry, private, added_by FROM mcp_host.plugin_egress ORDER BY 1, 2")
    assert [tuple(r) for r in rows] == snapshot(
        [
            ("npm.fetch", "*.example.org:8443", False, "owner-1"),
            ("npm.fetch", "[::1]:8080", True, "owner-1"),
            ("npm.fetch", "api.example.com", False, "owner-1"),
            ("npm.fetch", "db.internal:5432", True, "owner-1"),
            ("other", "169.254.169.254", True, "owner-1"),
        ]
    )


async def test_allowing_again_replaces_private_and_remove_takes_any_spelling(pool: PgPool) -> None:
    grants = EgressGrants(pool)
    await grants.allow("p", "db.internal:5432", private=True, by="o")
    assert await grants.allow("p", "DB.internal.:5432", private=False, by="o") == OwnerEgress(
        entries=("db.internal:5432",)
    )
    assert await grants.remove("p", "Db.Internal:5432") is True
    assert await grants.remove("p", "db.internal:5432") is False
    assert await grants.entries("p") == OwnerEgress()


@pytest.mark.parametrize(
    ("entry", "private", "message"),
    [
        ("http://example.com", False, "host: 'http://example.com' is not host, host:port, *.domain or *.domain:port"),
        ("example.com:70000", False, "host: 'example.com:70000': the port must be 1 to 65535"),
        ("*.com", False, "host: '*.com': a wildcard names a domain of at least two labels, like *.example.com"),
        (
            "*.example.com",
            True,
            "host: *.example.com is a wildcard; private reach is named one host at a time (allow each host --private)",
        ),
        (
            "metadata.google.internal",
            True,
            "host: metadata.google.internal is a link-local or cloud-metadata host; it is reached only when the"
            " address itself is named (allow that address --private)",
        ),
    ],
)
async def test_a_bad_entry_or_a_private_the_rules_never_honour_is_refused(
    pool: PgPool, entry: str, private: bool, message: str
) -> None:
    with pytest.raises(InvalidArguments) as refused:
        await EgressGrants(pool).allow("p", entry, private=private, by="o")
    assert refused.value.message == message
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.plugin_egress") == 0


async def test_a_plugin_holds_at_most_the_cap_and_an_entry_it_has_may_be_allowed_again(pool: PgPool) -> None:
    grants = EgressGrants(pool)
    for n in range(MAX_OWNER_EGRESS):
        await grants.allow("p", f"h{n}.example.com", private=False, by="o")
    with pytest.raises(InvalidArguments) as refused:
        await grants.allow("p", "one-more.example.com", private=False, by="o")
    assert refused.value.message == f"p has {MAX_OWNER_EGRESS} egress entries already; remove one first"
    await grants.allow("p", "h0.example.com", private=True, by="o")  # already there: replaced, not added
    await grants.allow("q", "one-more.example.com", private=False, by="o")  # another plugin's count
    assert len((await grants.entries("p")).entries) == MAX_OWNER_EGRESS


async def test_a_purge_deletes_the_plugins_entries_only(pool: PgPool) -> None:
    grants = EgressGrants(pool)
    await grants.allow("gone", "a.example.com", private=False, by="o")
    await grants.allow("gone", "b.example.com", private=False, by="o")
    await grants.allow("kept", "a.example.com", private=False, by="o")
    done = await uninstall(pool, "capability", "gone")
    assert done.egress_entries_deleted == 2
    assert await grants.all() == {"kept": OwnerEgress(entries=("a.example.com",))}
