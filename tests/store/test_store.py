"""Store functions and migrations on both databases (SPEC §10: kept in lockstep)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from nodeloom.auth.authenticate import authenticate
from nodeloom.auth.tokens import new_api_key
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.errors import Unauthorized
from nodeloom.settings import Settings
from nodeloom.store import accounts, api_keys, workflows
from nodeloom.store.paging import encode_cursor
from tests.conftest import text_graph


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def db(settings: Settings) -> Database:
    database = Database(settings)
    yield database  # type: ignore[misc]
    await database.dispose()


class TestAccounts:
    async def test_create_grant_and_ledger(self, db: Database) -> None:
        async with db.write() as s:
            account = await accounts.create(
                s, email="a@example.com", password_hash="h", plan="pro", credits=50
            )
        async with db.write() as s:
            await accounts.grant(s, account.id, 25, note="top-up")
        async with db.read() as s:
            fresh = await accounts.by_id(s, account.id)
            ledger = await s.scalar(
                sa.text("select sum(amount) from credit_ledger where account_id = :a"),
                {"a": account.id},
            )
        assert fresh is not None and fresh.credits_balance == 75
        assert ledger == 75

    async def test_balance_cannot_go_negative(self, db: Database) -> None:
        async with db.write() as s:
            account = await accounts.create(
                s, email="a@example.com", password_hash="h", plan="pro", credits=10
            )
        with pytest.raises(ValueError):
            async with db.write() as s:
                await accounts.grant(s, account.id, -11, note="too much")
        async with db.read() as s:
            assert (await accounts.by_id(s, account.id)).credits_balance == 10  # type: ignore[union-attr]

    async def test_email_is_unique(self, db: Database) -> None:
        async with db.write() as s:
            await accounts.create(
                s, email="a@example.com", password_hash="h", plan="pro", credits=0
            )
        with pytest.raises(sa.exc.IntegrityError):
            async with db.write() as s:
                await accounts.create(
                    s, email="a@example.com", password_hash="h", plan="pro", credits=0
                )


class TestApiKeys:
    async def test_lookup_and_revoke(self, db: Database) -> None:
        secret = b"s" * 40
        new = new_api_key(secret)
        usage = KeyUsage(db)
        async with db.write() as s:
            account = await accounts.create(
                s, email="a@example.com", password_hash="h", plan="business", credits=0
            )
            key = await api_keys.create(
                s, account_id=account.id, name="k", prefix=new.prefix, key_hash=new.key_hash
            )
        principal = await authenticate(db, secret, usage, new.key)
        assert principal.account_id == account.id and principal.plan == "business"
        assert principal.api_key_id == key.id
        with pytest.raises(Unauthorized):
            await authenticate(db, secret, usage, new_api_key(secret).key)
        async with db.write() as s:
            assert await api_keys.revoke(s, account.id, key.id)
            assert not await api_keys.revoke(s, "someone-else", key.id)
        with pytest.raises(Unauthorized):
            await authenticate(db, secret, usage, new.key)
        await usage.close()


class TestWorkflows:
    async def test_page_scoping_and_soft_delete(self, db: Database) -> None:
        async with db.write() as s:
            a = await accounts.create(
                s, email="a@example.com", password_hash="h", plan="pro", credits=0
            )
            b = await accounts.create(
                s, email="b@example.com", password_hash="h", plan="pro", credits=0
            )
        made = []
        for i in range(5):
            async with db.write() as s:
                made.append(
                    (
                        await workflows.create(
                            s, account_id=a.id, name=f"w{i}", graph_json=text_graph()
                        )
                    ).id
                )
        async with db.write() as s:
            await workflows.create(s, account_id=b.id, name="b's", graph_json=text_graph())
        async with db.read_core() as conn:
            first = await workflows.page(conn, a.id, 2, None)
            assert [r.id for r in first] == made[::-1][:3]
            second = await workflows.page(
                conn, a.id, 2, encode_cursor(first[1].created_at, first[1].id)
            )
            assert [r.id for r in second] == made[::-1][2:5]
        async with db.read() as s:
            row = await workflows.get(s, a.id, made[0])
            assert row is not None and row.graph_json == text_graph()
            assert await workflows.get(s, b.id, made[0]) is None
        async with db.write() as s:
            row = await workflows.get(s, a.id, made[0])
            assert row is not None
            await workflows.soft_delete(s, row)
        async with db.read() as s:
            assert await workflows.get(s, a.id, made[0]) is None
        async with db.read_core() as conn:
            assert len(await workflows.page(conn, a.id, 50, None)) == 4
