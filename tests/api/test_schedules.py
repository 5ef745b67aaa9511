"""Schedules over HTTP on SQLite and PostgreSQL: management and its refusals, firing (a
cron every second with a fast tick: no clock travel, no minutes of sleep), the missed-firing
policy, daylight-saving time, plans and credits."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.db.models import Schedule
from nodeloom.engine.schedules import next_after
from tests.api.test_auth import assert_problem
from tests.api.test_webhooks import set_credits, set_plan
from tests.conftest import User, text_graph
from tests.runs_helpers import create_workflow, wait_for_run

EVERY_SECOND = "* * * * * *"  # six fields: croniter's last one is seconds


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {
        "rate_limit_api_key": 100_000,
        "rate_limit_jwt": 100_000,
        "schedule_tick_seconds": 0.2,
        "schedule_min_interval_seconds": 1,
    }


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def make_schedule(
    client: httpx.AsyncClient, user: User, workflow_id: str, **body: Any
) -> dict[str, Any]:
    r = await client.post(
        f"/api/v1/workflows/{workflow_id}/schedules",
        json={"name": "nightly", "cron": "0 3 * * *", **body},
        headers=user.headers,
    )
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


async def runs_of(client: httpx.AsyncClient, user: User, workflow_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workflows/{workflow_id}/runs", headers=user.headers)
    assert r.status_code == 200, r.text
    runs: list[dict[str, Any]] = r.json()
    return runs


async def wait_until(condition: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def loop_went_round(client: httpx.AsyncClient, user: User, firings: int = 2) -> None:
    """A positive sign that the schedule loop has gone round since now, and so had every
    chance to fire anything due: a schedule made now, firing every second, has fired
    ``firings`` times (it is paused again after)."""
    wf = await create_workflow(client, user, text_graph(), name="clock")
    clock = await make_schedule(client, user, wf, cron=EVERY_SECOND)

    async def fired() -> bool:
        runs = await runs_of(client, user, wf)
        return sum(r["trigger"] == "schedule" for r in runs) >= firings

    await wait_until(fired)
    url = f"/api/v1/workflows/{wf}/schedules/{clock['id']}"
    r = await client.patch(url, json={"active": False}, headers=user.headers)
    assert r.status_code == 200, r.text


@pytest.fixture
async def business(app: FastAPI, owner: User) -> User:
    await set_plan(app, owner, "business")
    return owner


class TestManage:
    async def test_create_list_get_update_delete(
        self, client: httpx.AsyncClient, business: User
    ) -> None:
        wf = await create_workflow(client, business, text_graph())
        created = await make_schedule(
            client,
            business,
            wf,
            cron="0 9 * * *",
            timezone="Europe/Berlin",
            input={"text": "morning"},
        )
        assert created["active"] is True
        assert created["timezone"] == "Europe/Berlin"
        assert created["input"] == {"text": "morning"}
        assert created["last_run_id"] is None and created["last_error"] is None
        # 09:00 on Berlin's wall clock: 08:00Z in winter (CET), 07:00Z in summer (CEST).
        nxt = ts(created["next_run_at"])
        assert nxt > datetime.now(UTC)
        assert (nxt.hour, nxt.minute) in ((8, 0), (7, 0))
        base = f"/api/v1/workflows/{wf}/schedules"
        listed = (await client.get(base, headers=business.headers)).json()
        assert [s["id"] for s in listed] == [created["id"]]
        one = await client.get(f"{base}/{created['id']}", headers=business.headers)
        assert one.status_code == 200 and one.json() == created

        paused = await client.patch(
            f"{base}/{created['id']}", json={"active": False}, headers=business.headers
        )
        assert paused.status_code == 200, paused.text
        assert paused.json()["active"] is False and paused.json()["next_run_at"] is None
        resumed = await client.patch(
            f"{base}/{created['id']}",
            json={"active": True, "cron": "30 6 * * 1", "timezone": "UTC"},
            headers=business.headers,
        )
        body = resumed.json()
        assert body["cron"] == "30 6 * * 1"
        nxt = ts(body["next_run_at"])
        assert (nxt.weekday(), nxt.hour, nxt.minute) == (0, 6, 30)

        r = await client.delete(f"{base}/{created['id']}", headers=business.headers)
        assert r.status_code == 204
        r = await client.get(f"{base}/{created['id']}", headers=business.headers)
        assert_problem(r, 404, "not_found")

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"cron": "not a cron"}, "/cron"),
            ({"cron": "61 * * * *"}, "/cron"),
            ({"cron": "* * *"}, "/cron"),
            ({"cron": "0 3 * * *", "timezone": "Mars/Olympus_Mons"}, "/timezone"),
            ({"cron": "0 3 * * *", "timezone": "../../etc/passwd"}, "/timezone"),
            ({"cron": "0 3 * * *", "input": "not an object"}, "/input"),
        ],
    )
    async def test_bad_input_is_400_with_a_pointer(
        self, client: httpx.AsyncClient, business: User, body: dict[str, Any], pointer: str
    ) -> None:
        wf = await create_workflow(client, business, text_graph())
        r = await client.post(
            f"/api/v1/workflows/{wf}/schedules",
            json={"name": "x", **body},
            headers=business.headers,
        )
        problem = assert_problem(r, 400, "invalid_request")
        assert pointer in [e["pointer"] for e in problem["errors"]], problem

    async def test_bad_update_is_400(self, client: httpx.AsyncClient, business: User) -> None:
        wf = await create_workflow(client, business, text_graph())
        s = await make_schedule(client, business, wf)
        url = f"/api/v1/workflows/{wf}/schedules/{s['id']}"
        for body, pointer in (
            ({"timezone": "Nowhere/Never"}, "/timezone"),
            ({"cron": "nope"}, "/cron"),
            ({"active": None}, "/active"),
        ):
            r = await client.patch(url, json=body, headers=business.headers)
            problem = assert_problem(r, 400, "invalid_request")
            assert pointer in [e["pointer"] for e in problem["errors"]], problem
        assert (await client.get(url, headers=business.headers)).json() == s

    async def test_too_frequent_is_refused(
        self, client: httpx.AsyncClient, app: FastAPI, business: User
    ) -> None:
        app.state.ctx.settings.schedule_min_interval_seconds = 60
        wf = await create_workflow(client, business, text_graph())
        r = await client.post(
            f"/api/v1/workflows/{wf}/schedules",
            json={"name": "x", "cron": "*/10 * * * * *"},
            headers=business.headers,
        )
        problem = assert_problem(r, 400, "invalid_request")
        assert problem["errors"][0]["pointer"] == "/cron"

    async def test_plans_and_other_accounts(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        await set_plan(app, owner, "free")
        r = await client.post(
            f"/api/v1/workflows/{wf}/schedules",
            json={"name": "x", "cron": "0 3 * * *"},
            headers=owner.headers,
        )
        assert_problem(r, 403, "plan_upgrade_required")
        await set_plan(app, owner, "business")
        s = await make_schedule(client, owner, wf)
        await set_plan(app, other, "business")
        for method, url in (
            ("GET", f"/api/v1/workflows/{wf}/schedules"),
            ("GET", f"/api/v1/workflows/{wf}/schedules/{s['id']}"),
            ("PATCH", f"/api/v1/workflows/{wf}/schedules/{s['id']}"),
            ("DELETE", f"/api/v1/workflows/{wf}/schedules/{s['id']}"),
        ):
            r = await client.request(method, url, json={}, headers=other.headers)
            assert_problem(r, 404, "not_found")


class TestFiring:
    async def test_a_schedule_fires_with_its_input_and_records_its_trigger(
        self, client: httpx.AsyncClient, business: User
    ) -> None:
        wf = await create_workflow(client, business, text_graph())
        s = await make_schedule(client, business, wf, cron=EVERY_SECOND, input={"text": "tick"})

        async def fired() -> list[dict[str, Any]]:
            return [r for r in await runs_of(client, business, wf) if r["trigger"] == "schedule"]

        runs = await wait_until(fired)
        run = await wait_for_run(client, business, wf, runs[-1]["id"])
        assert run["status"] == "completed"
        assert run["input"] == {"text": "tick"}
        url = f"/api/v1/workflows/{wf}/schedules/{s['id']}"

        async def recorded() -> dict[str, Any] | None:
            # A firing is claimed (last_fired_at), its run accepted, then the run recorded
            # on the schedule (last_run_id): three commits, the last one after the run is
            # visible. Settled once the newest scheduled run, started after the latest
            # claim, is the one recorded.
            body: dict[str, Any] = (await client.get(url, headers=business.headers)).json()
            newest = (await fired())[0]
            if body["last_run_id"] == newest["id"] and ts(newest["created_at"]) >= ts(
                body["last_fired_at"]
            ):
                return body
            return None

        shown = await wait_until(recorded)
        assert shown["last_error"] is None
        r = await client.patch(url, json={"active": False}, headers=business.headers)
        assert r.status_code == 200 and r.json()["next_run_at"] is None
        # A firing claimed before the pause committed may still be starting its run: wait
        # for it to be recorded. Then paused: no more runs.
        await wait_until(recorded)
        count = len(await fired())
        await loop_went_round(client, business)
        assert len(await fired()) == count

    async def test_missed_firings_run_once_then_skip_ahead(
        self, client: httpx.AsyncClient, app: FastAPI, business: User
    ) -> None:
        """As after a week of downtime: next_run_at long past. One run, and the next time
        is in the future (not the backlog)."""
        wf = await create_workflow(client, business, text_graph())
        s = await make_schedule(client, business, wf, cron="0 3 * * *", input={"text": "late"})
        week_ago = datetime.now(UTC) - timedelta(days=7)
        table = Schedule.__table__
        await app.state.ctx.db.write(
            lambda c: c.execute(
                sa.update(table).where(table.c.id == s["id"]).values(next_run_at=week_ago)
            )
        )

        async def fired() -> list[dict[str, Any]]:
            return [r for r in await runs_of(client, business, wf) if r["trigger"] == "schedule"]

        await wait_until(fired)
        await loop_went_round(client, business)  # the backlog had its chances: no more runs
        assert len(await fired()) == 1
        url = f"/api/v1/workflows/{wf}/schedules/{s['id']}"
        shown = (await client.get(url, headers=business.headers)).json()
        nxt = ts(shown["next_run_at"])
        assert datetime.now(UTC) < nxt <= datetime.now(UTC) + timedelta(days=1)
        assert (nxt.hour, nxt.minute) == (3, 0)

    async def test_no_credits_records_a_failed_start_and_goes_on(
        self, client: httpx.AsyncClient, app: FastAPI, business: User
    ) -> None:
        wf = await create_workflow(client, business, text_graph())
        await set_credits(app, business, 0)
        s = await make_schedule(client, business, wf, cron=EVERY_SECOND)
        url = f"/api/v1/workflows/{wf}/schedules/{s['id']}"

        async def refused() -> dict[str, Any] | None:
            body: dict[str, Any] = (await client.get(url, headers=business.headers)).json()
            return body if body["last_error"] else None

        shown = await wait_until(refused)
        assert shown["last_error"]["code"] == "insufficient_credits"
        assert shown["last_run_id"] is None
        assert ts(shown["next_run_at"]) > ts(shown["last_fired_at"])
        assert await runs_of(client, business, wf) == []
        # Credits again: the next firing starts a run.
        await set_credits(app, business, 1000)

        async def started() -> dict[str, Any] | None:
            body: dict[str, Any] = (await client.get(url, headers=business.headers)).json()
            return body if body["last_run_id"] else None

        shown = await wait_until(started)
        assert shown["last_error"] is None

    async def test_downgraded_plan_starts_nothing(
        self, client: httpx.AsyncClient, app: FastAPI, business: User
    ) -> None:
        wf = await create_workflow(client, business, text_graph())
        s = await make_schedule(client, business, wf, cron=EVERY_SECOND)
        await set_plan(app, business, "free")
        url = f"/api/v1/workflows/{wf}/schedules/{s['id']}"

        async def refused() -> dict[str, Any] | None:
            r = await app.state.ctx.db.read(
                lambda c: c.execute(
                    sa.select(Schedule.__table__.c.last_error).where(
                        Schedule.__table__.c.id == s["id"]
                    )
                ).scalar()
            )
            return r  # type: ignore[no-any-return]

        error = await wait_until(refused)
        assert error["code"] == "plan_upgrade_required"
        assert url  # management itself now needs the plan back
        assert await runs_of(client, business, wf) == []


class TestDaylightSaving:
    """The next time is computed on the zone's wall clock by croniter."""

    def test_nine_o_clock_in_new_york_moves_an_hour_in_utc_across_the_change(self) -> None:
        before = datetime(2027, 3, 13, 12, tzinfo=UTC)
        first = next_after("0 9 * * *", "America/New_York", before)
        second = next_after("0 9 * * *", "America/New_York", first)
        assert first == datetime(2027, 3, 13, 14, tzinfo=UTC)  # EST, UTC-5
        assert second == datetime(2027, 3, 14, 13, tzinfo=UTC)  # EDT, UTC-4

    def test_a_time_skipped_by_spring_forward_fires_once_after_the_gap(self) -> None:
        before = datetime(2027, 3, 28, 0, 0, tzinfo=UTC)  # Berlin: clocks 02:00 -> 03:00
        nxt = next_after("30 2 * * *", "Europe/Berlin", before)
        assert nxt == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # 03:00 CEST
        after = next_after("30 2 * * *", "Europe/Berlin", nxt)
        assert after == datetime(2027, 3, 29, 0, 30, tzinfo=UTC)  # 02:30 CEST next day

    def test_a_time_repeated_by_fall_back_fires_once(self) -> None:
        before = datetime(2027, 10, 30, 22, 0, tzinfo=UTC)  # Berlin: 03:00 -> 02:00 on the 31st
        nxt = next_after("30 2 * * *", "Europe/Berlin", before)
        again = next_after("30 2 * * *", "Europe/Berlin", nxt)
        assert nxt.date() == datetime(2027, 10, 31).date()
        assert again.date() == datetime(2027, 11, 1).date()


class TestCaps:
    """Schedules are capped per workflow and per account by plan, and the runs they start
    count against the account's request budget like any other request."""

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {
            "rate_limit_api_key": 100_000,
            "rate_limit_jwt": 100_000,
            "rate_limit_window_seconds": 3600,
            "schedule_tick_seconds": 0.2,
            "schedule_min_interval_seconds": 1,
            "schedules_per_workflow": {"business": 3},
            "schedules_per_account": {"business": 4},
        }

    async def test_creating_past_the_caps_is_409(
        self, client: httpx.AsyncClient, app: FastAPI, business: User
    ) -> None:
        first = await create_workflow(client, business, text_graph(), "first")
        second = await create_workflow(client, business, text_graph(), "second")
        for _ in range(3):
            await make_schedule(client, business, first)
        r = await client.post(
            f"/api/v1/workflows/{first}/schedules",
            json={"name": "one more", "cron": "0 3 * * *"},
            headers=business.headers,
        )
        problem = assert_problem(r, 409, "conflict")
        assert "3" in problem["detail"] and "workflow" in problem["detail"]
        await make_schedule(client, business, second)
        r = await client.post(
            f"/api/v1/workflows/{second}/schedules",
            json={"name": "one more", "cron": "0 3 * * *"},
            headers=business.headers,
        )
        problem = assert_problem(r, 409, "conflict")
        assert "4" in problem["detail"] and "account" in problem["detail"]
        # Deleting one makes room again.
        listed = (
            await client.get(f"/api/v1/workflows/{first}/schedules", headers=business.headers)
        ).json()
        assert len(listed) == 3
        r = await client.delete(
            f"/api/v1/workflows/{first}/schedules/{listed[0]['id']}", headers=business.headers
        )
        assert r.status_code == 204
        await make_schedule(client, business, second)

    async def test_fired_runs_count_against_the_account(
        self, client: httpx.AsyncClient, app: FastAPI, business: User
    ) -> None:
        ctx = app.state.ctx
        wf = await create_workflow(client, business, text_graph())
        s = await make_schedule(client, business, wf, cron=EVERY_SECOND)
        url = f"/api/v1/workflows/{wf}/schedules/{s['id']}"
        # The account's budget (every credential's requests count there) lowered to 10 an
        # hour: this test spent two of them already, so the schedule starts at most eight.
        ctx.settings.rate_limit_jwt = 10

        async def refused() -> Any:
            row = await ctx.db.read(
                lambda c: c.execute(
                    sa.select(Schedule.__table__.c.last_error).where(
                        Schedule.__table__.c.id == s["id"]
                    )
                ).scalar()
            )
            return row if row and row["code"] == "rate_limited" else None

        await wait_until(refused)
        ctx.settings.rate_limit_jwt = 100_000
        assert len(await runs_of(client, business, wf)) <= 8
        r = await client.get(url, headers=business.headers)
        assert r.status_code == 200
        assert r.json()["active"] is True
