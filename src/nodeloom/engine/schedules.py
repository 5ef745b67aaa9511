"""Schedules: cron triggers of a workflow, fired by exactly one process.

Time. A schedule is a cron expression read in an IANA time zone; croniter computes the
next time on the zone's wall clock, so daylight-saving changes are the library's business,
not ours: ``0 9 * * *`` in ``Europe/Berlin`` is 08:00Z in winter and 07:00Z in summer; a
wall-clock time that does not exist on the day the clocks go forward (02:30 in most of
Europe and America) fires at the first instant after the gap; one that happens twice when
they go back fires once, at the first (unless the expression fires every hour). Five
fields as usual; a sixth, croniter's, is seconds.

Exactly once. Every server process runs a ``ScheduleFirer``. Each tick it reads the active
schedules whose ``next_run_at`` has passed, and for each moves ``next_run_at`` on with a
conditional UPDATE naming the value it read. Of any number of processes (replicas on one
PostgreSQL database, processes sharing one SQLite file) only the one whose UPDATE changed
the row fires that time; the others find the row moved and skip it. The claim is committed
before the run is accepted, so a crash in between loses that firing rather than doubling
it (at most once).

Missed firings. After downtime (or a pause longer than the interval) the schedule fires
*once*, as soon as a process sees it, then skips to the next time in the future: a nightly
job that missed three nights runs once, not three times.

A firing starts a run like a webhook does, through the same acceptor: the owner's plan must
allow triggers (pro or higher), the estimate is held from the owner's credits. A firing that
cannot start a run (no credits, plan, a graph that no longer validates) is recorded on the
schedule (``last_error``) and the schedule goes on to its next time: never a retry loop.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import zoneinfo
from datetime import UTC, datetime, timedelta

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

from nodeloom import background
from nodeloom.auth.plans import require_webhook_trigger
from nodeloom.auth.principal import account_rate_key
from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.engine.run_request import RunRequest
from nodeloom.engine.submit import Acceptor
from nodeloom.errors import FieldError, InvalidRequest, ProblemError, RateLimited
from nodeloom.ratelimit import RateLimiter
from nodeloom.settings import Settings
from nodeloom.store import schedules as store

log = logging.getLogger("nodeloom.schedules")

BATCH = 50
_CHECKED_GAPS = 5
_CRON_ERRORS = (
    CroniterBadCronError,
    CroniterBadDateError,
    CroniterNotAlphaError,
    ValueError,
    KeyError,
)


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone, or 400 pointing at ``/timezone``."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        message = f"unknown IANA time zone {name!r} (for example Europe/Berlin or UTC)"
        raise InvalidRequest(message, errors=[FieldError("/timezone", message)]) from exc


def next_after(cron: str, timezone: str, after: datetime) -> datetime:
    """The first firing time strictly after ``after``, in UTC.

    When the clocks go back, a wall-clock time happens twice; an expression with fixed
    hours fires at the first of the two only (as cron does), one that fires every hour
    (hour field ``*``) keeps firing through both."""
    tz = zone(timezone)
    fields = cron.split()
    every_hour = len(fields) >= 2 and fields[1] == "*"
    it = croniter(cron, after.astimezone(tz))
    for _ in range(4):
        nxt: datetime = it.get_next(datetime)
        local = nxt.astimezone(tz)
        if every_hour or local.fold == 0:
            break
    return nxt.astimezone(UTC)


def check(cron: str, timezone: str, min_interval: float) -> None:
    """400 with pointers unless the expression parses, the zone exists and the expression
    leaves at least ``min_interval`` seconds between firings."""
    tz = zone(timezone)
    fields = cron.split()
    problem = None
    if len(fields) not in (5, 6):
        problem = f"a cron expression has 5 fields (6 with seconds), not {len(fields)}"
    elif not croniter.is_valid(cron):
        problem = f"{cron!r} is not a valid cron expression"
    if problem is None:
        try:
            it = croniter(cron, datetime.now(tz))
            times = [it.get_next(datetime) for _ in range(_CHECKED_GAPS + 1)]
        except _CRON_ERRORS as exc:
            problem = f"{cron!r} never fires: {exc}"
        else:
            gap = min((b - a).total_seconds() for a, b in itertools.pairwise(times))
            if gap < min_interval:
                problem = (
                    f"{cron!r} fires every {gap:g} s; this server allows schedules at most "
                    f"every {min_interval:g} s"
                )
    if problem is not None:
        raise InvalidRequest(problem, errors=[FieldError("/cron", problem)])


class ScheduleFirer:
    """The background loop of one server process (api/app.py starts it)."""

    def __init__(
        self, settings: Settings, db: Database, acceptor: Acceptor, limiter: RateLimiter
    ) -> None:
        self.settings = settings
        self.db = db
        self.acceptor = acceptor
        self.limiter = limiter
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="schedules")

    async def stop(self) -> None:
        await background.cancel_and_wait(self._task)

    async def _forever(self) -> None:
        seconds = self.settings.schedule_tick_seconds
        await background.every(seconds, self.tick, log, "schedule pass failed; trying again")

    async def tick(self) -> int:
        """Fire what is due now; how many firings this process won."""
        now = utcnow()
        due = await self.db.read(lambda c: store.due(c, now, BATCH))
        fired = 0
        for row in due:
            try:
                following: datetime | None = next_after(row.cron, row.timezone, now)
            except (InvalidRequest, *_CRON_ERRORS):  # the zone left the tz database
                following = None
            claim = functools.partial(
                store.claim,
                schedule_id=row.id,
                was=row.next_run_at,
                following=following,
                now=now,
            )
            won = await self.db.write(claim)
            if won:
                fired += 1
                await self._fire(row, now)
        return fired

    async def _fire(self, row: store.DueSchedule, now: datetime) -> None:
        run_id: str | None = None
        error: dict[str, str] | None = None
        try:
            require_webhook_trigger(row.plan)
            await self._count(row.account_id)
            accepted = await self.acceptor.accept(
                RunRequest(
                    account_id=row.account_id,
                    workflow_id=row.workflow_id,
                    run_input=row.input,
                    use_cache=True,
                    plan=row.plan,
                    trigger="schedule",
                    callback_url=row.callback_url,
                )
            )
            run_id = accepted.answer["run_id"]
        except ProblemError as exc:
            error = {"code": exc.code, "message": exc.detail}
        except Exception as exc:
            log.warning("schedule %s: firing failed", row.id, exc_info=True)
            error = {"code": "internal_error", "message": type(exc).__name__}
        if error is not None:
            log.info("schedule %s started no run: %s", row.id, error["message"])
        await self.db.write(lambda c: store.record_firing(c, row.id, now, run_id, error))

    async def _count(self, account_id: str) -> None:
        """A firing is a request of the account: it counts in the account's window
        (``rate_limit_jwt``, shared by all its credentials), and over it starts nothing,
        so schedules cannot start more runs than the account could request itself."""
        window = self.settings.rate_limit_window_seconds
        limit = self.settings.rate_limit_jwt
        decision = await self.limiter.hit(account_rate_key(account_id), limit, window)
        if not decision.allowed:
            raise RateLimited(
                f"More than {limit} requests in {window} s for this account; this firing "
                "started no run."
            )


def first_run_at(cron: str, timezone: str, active: bool) -> datetime | None:
    """``next_run_at`` of a schedule created or changed now (None while paused)."""
    if not active:
        return None
    return next_after(cron, timezone, utcnow() - timedelta(microseconds=1))
