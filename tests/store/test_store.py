"""Store functions and migrations on both databases (kept in lockstep)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.auth.authenticate import authenticate
from nodeloom.auth.tokens import new_api_key
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.errors import Unauthorized
from nodeloom.settings import Settings
from nodeloom.store import Record, accounts, api_keys, workflows
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
        account = await db.write(
            lambda c: accounts.create(
                c, email="a@example.com", password_hash="h", plan="pro", credits=50
            )
        )
        await db.write(lambda c: accounts.grant(c, account.id, 25, note="top-up"))
        fresh = await db.read(lambda c: accounts.by_id(c, account.id))
        ledger = await db.read(
            lambda c: c.execute(
                sa.text("select sum(amount) from credit_ledger where account_id = :a"),
                {"a": account.id},
            ).scalar()
        )
        assert fresh is not None and fresh.credits_balance == 75
        assert ledger == 75

    async def test_balance_cannot_go_negative(self, db: Database) -> None:
        account = await db.write(
            lambda c: accounts.create(
                c, email="a@example.com", password_hash="h", plan="pro", credits=10
            )
        )
        with pytest.raises(ValueError):
            await db.write(lambda c: accounts.grant(c, account.id, -11, note="too much"))
        fresh = await db.read(lambda c: accounts.by_id(c, account.id))
        assert fresh is not None and fresh.credits_balance == 10
        # The refused grant left no ledger row behind.
        rows = await db.read(
            lambda c: c.execute(
                sa.text("select count(*) from credit_ledger where account_id = :a"),
                {"a": account.id},
            ).scalar()
        )
        assert rows == 1

    async def test_email_is_unique(self, db: Database) -> None:
        def create(c: Connection) -> Record:
            return accounts.create(
                c, email="a@example.com", password_hash="h", plan="pro", credits=0
            )

        await db.write(create)
        with pytest.raises(sa.exc.IntegrityError):
            await db.write(create)
        assert await db.read(accounts.count) == 1


class TestApiKeys:
    async def test_lookup_and_revoke(self, db: Database) -> None:
        secret = b"s" * 40
        new = new_api_key(secret)
        usage = KeyUsage(db)

        def create(c: Connection) -> tuple[Record, Record]:
            account = accounts.create(
                c, email="a@example.com", password_hash="h", plan="business", credits=0
            )
            key = api_keys.create(
                c, account_id=account.id, name="k", prefix=new.prefix, key_hash=new.key_hash
            )
            return account, key

        account, key = await db.write(create)
        principal = await authenticate(db, secret, usage, new.key)
        assert principal.account_id == account.id and principal.plan == "business"
        assert principal.api_key_id == key.id
        with pytest.raises(Unauthorized):
            await authenticate(db, secret, usage, new_api_key(secret).key)
        assert not await db.write(lambda c: api_keys.revoke(c, "someone-else", key.id))
        await authenticate(db, secret, usage, new.key)  # still valid
        assert await db.write(lambda c: api_keys.revoke(c, account.id, key.id))
        with pytest.raises(Unauthorized):
            await authenticate(db, secret, usage, new.key)
        await usage.close()


class TestWorkflows:
    async def test_page_scoping_and_soft_delete(self, db: Database) -> None:
        def two_accounts(c: Connection) -> tuple[Record, Record]:
            return tuple(  # type: ignore[return-value]
                accounts.create(
                    c, email=f"{n}@example.com", password_hash="h", plan="pro", credits=0
                )
                for n in "ab"
            )

        a, b = await db.write(two_accounts)
        made = []
        for i in range(5):
            row = await db.write(
                lambda c, i=i: workflows.create(
                    c, account_id=a.id, name=f"w{i}", graph_json=text_graph()
                )
            )
            made.append(row.id)
        await db.write(
            lambda c: workflows.create(c, account_id=b.id, name="b's", graph_json=text_graph())
        )
        first = await db.read(lambda c: workflows.page(c, a.id, 2, None))
        assert [r.id for r in first] == made[::-1][:3]
        after = encode_cursor(first[1].created_at, first[1].id)
        second = await db.read(lambda c: workflows.page(c, a.id, 2, after))
        assert [r.id for r in second] == made[::-1][2:5]
        row = await db.read(lambda c: workflows.get(c, a.id, made[0]))
        assert row is not None and row.graph_json == text_graph()
        assert await db.read(lambda c: workflows.get(c, b.id, made[0])) is None
        assert not await db.write(lambda c: workflows.soft_delete(c, b.id, made[0]))
        assert await db.write(lambda c: workflows.soft_delete(c, a.id, made[0]))
        assert await db.read(lambda c: workflows.get(c, a.id, made[0])) is None
        assert not await db.write(lambda c: workflows.soft_delete(c, a.id, made[0]))
        assert len(await db.read(lambda c: workflows.page(c, a.id, 50, None))) == 4


class TestWriteGroups:
    async def test_a_failing_write_in_a_group_rolls_back_alone(self, db: Database) -> None:
        """Writes submitted together share a transaction (SQLite group commit); one that
        raises must leave the others committed and nothing of its own behind."""

        def create(n: int) -> Callable[[Connection], Record]:
            return lambda c: accounts.create(
                c, email=f"u{n}@example.com", password_hash="h", plan="pro", credits=5
            )

        def create_then_fail(c: Connection) -> None:
            accounts.create(c, email="ghost@example.com", password_hash="h", plan="pro", credits=0)
            raise ValueError("changed my mind")

        results = await asyncio.gather(
            db.write(create(1)),
            db.write(create_then_fail),
            db.write(create(2)),
            return_exceptions=True,
        )
        assert isinstance(results[1], ValueError)
        assert {r.email for r in results if not isinstance(r, BaseException)} == {
            "u1@example.com",
            "u2@example.com",
        }
        assert await db.read(lambda c: accounts.by_email(c, "ghost@example.com")) is None
        assert await db.read(accounts.count) == 2
