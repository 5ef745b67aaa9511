"""The ``nodeloom`` command through its installed entry point, in a subprocess whose output is
a pipe (not a terminal), against the package's real server."""

from __future__ import annotations

import json
import os
import pty
import re
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nodeloom.client import Client, errors
from nodeloom.version import __version__
from tests.client.conftest import NODELOOM, Account, Live, cli
from tests.runs_helpers import e, g, n

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Env = dict[str, str | None]
PROGRESS_LINE = re.compile(r"^\[\s*\d+\.\ds\] (run|node) \S")


@pytest.fixture(scope="module")
def user(live: Live, tmp_path_factory: pytest.TempPathFactory) -> tuple[Account, Env]:
    """An account and the environment of its user after ``nodeloom login`` (the password read
    from stdin), shared by this module's tests (each CLI call costs a process start)."""
    account = live.account()
    env: Env = {"NODELOOM_CONFIG_DIR": str(tmp_path_factory.mktemp("cli-config"))}
    done = cli(
        "login",
        "--url",
        live.url,
        "--email",
        account.email,
        "--password-stdin",
        env=env,
        stdin=account.password + "\n",
    )
    assert done.returncode == 0, done.stderr
    assert "logged in" in done.stderr
    return account, env


@pytest.fixture
def logged_in(user: tuple[Account, Env]) -> Env:
    return user[1]


def test_the_command_loads_no_server_or_media_library() -> None:
    """Most commands only talk to a server over HTTP: the command starts without the database
    stack, the web framework, the password and token libraries or PyAV and NumPy (each call
    pays for what it imports: 0.8 s of CPU with the media libraries, 0.65 s without)."""
    heavy = ("av", "numpy", "sqlalchemy", "alembic", "fastapi", "argon2", "jwt")
    probe = f"import sys, nodeloom.cli; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_version() -> None:
    """Through the installed entry point itself (the other tests fork the launcher)."""
    done = subprocess.run([NODELOOM, "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout == f"nodeloom {__version__}\n"


class TestAccounts:
    def test_read_commands_never_create_an_empty_database(self, tmp_path: Path) -> None:
        done = cli("accounts", "list", cwd=tmp_path, env={"NODELOOM_DATA_DIR": None})
        assert done.returncode == 1
        assert f"data directory {tmp_path / 'data'}" in done.stderr
        assert "no database at" in done.stderr
        assert not (tmp_path / "data").exists()
        done = cli(
            "accounts", "set", "--email", "a@example.com", "--plan", "pro",
            cwd=tmp_path, env={"NODELOOM_DATA_DIR": None},
        )  # fmt: skip
        assert done.returncode == 1 and not (tmp_path / "data").exists()

    def test_create_reads_the_password_from_stdin_and_list_shows_full_ids(
        self, tmp_path: Path
    ) -> None:
        env: Env = {"NODELOOM_DATA_DIR": str(tmp_path / "d"), "COLUMNS": "40"}
        done = cli(
            "accounts", "create", "--email", "Admin@Example.com", "--plan", "business",
            "--credits", "50", env=env, stdin="a long enough password\n",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        account_id = done.stdout.strip()
        uuid.UUID(account_id)
        assert "creating a new database" in done.stderr
        table = cli("accounts", "list", env=env)
        assert table.returncode == 0 and account_id in table.stdout
        assert "admin@example.com" in table.stdout and "business" in table.stdout
        listed = json.loads(cli("accounts", "list", "--json", env=env).stdout)
        assert listed[0]["id"] == account_id and listed[0]["credits_balance"] == 50

    def test_create_refuses_a_short_password(self, tmp_path: Path) -> None:
        env: Env = {"NODELOOM_DATA_DIR": str(tmp_path / "d")}
        done = cli("accounts", "create", "--email", "b@example.com", env=env, stdin="short\n")
        assert done.returncode == 2 and "8 to 128" in done.stderr


class TestAccountsOnALiveServer:
    def test_disable_enable_and_reset_password(self, live: Live, account: Account) -> None:
        env: Env = {"NODELOOM_DATA_DIR": str(live.data_dir)}
        base = ("accounts", "set", "--email", account.email)
        assert cli(*base, "--disabled", env=env).returncode == 0
        with Client(live.url, account.api_key) as client:
            with pytest.raises(errors.Unauthorized):
                client.me()
            assert cli(*base, "--enabled", env=env).returncode == 0
            assert client.me().email == account.email
        done = cli(*base, "--reset-password", env=env, stdin="a brand new password\n")
        assert done.returncode == 0, done.stderr
        with Client.login(live.url, account.email, "a brand new password") as session:
            assert session.me().email == account.email
        with pytest.raises(errors.InvalidCredentials):
            Client.login(live.url, account.email, account.password)


class TestLogin:
    def test_stores_a_key_readable_only_by_the_user(
        self, user: tuple[Account, Env], live: Live
    ) -> None:
        account, env = user
        path = Path(str(env["NODELOOM_CONFIG_DIR"])) / "credentials.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        stored = json.loads(path.read_text())
        assert stored["default"] == live.url
        assert stored["servers"][live.url]["email"] == account.email
        assert account.password not in path.read_text()

    def test_login_again_replaces_the_key_and_logout_revokes_it(
        self, live: Live, account: Account, tmp_path: Path
    ) -> None:
        env: Env = {"NODELOOM_CONFIG_DIR": str(tmp_path)}
        login = ("login", "--url", live.url, "--email", account.email, "--password-stdin")
        for _ in range(2):
            assert cli(*login, env=env, stdin=account.password + "\n").returncode == 0
        keys = json.loads(cli("keys", "list", "--json", env=env).stdout)
        cli_keys = [k for k in keys if k["name"].startswith("nodeloom-cli@")]
        assert [k["revoked_at"] is None for k in cli_keys] == [True, False]  # newest first
        stored = json.loads((tmp_path / "credentials.json").read_text())["servers"][live.url]
        done = cli("logout", env=env)
        assert done.returncode == 0 and "API key revoked" in done.stderr
        listed = cli(
            "workflows", "list", "--url", live.url, "--api-key", stored["api_key"], env=env
        )
        assert listed.returncode == 1 and "(unauthorized)" in listed.stderr

    def test_wrong_password_is_a_clear_error(self, live: Live, account: Account) -> None:
        done = cli(
            "login", "--url", live.url, "--email", account.email, "--password-stdin",
            stdin="not the password\n",
        )  # fmt: skip
        assert done.returncode == 1
        assert "Wrong e-mail or password. (invalid_credentials)" in done.stderr


class TestRootOptions:
    """``--url``, ``--api-key`` and ``--json`` given once, before the command; the same after
    the command (the form every command took before) still work, and win."""

    def test_before_the_command(self, live: Live, account: Account, tmp_path: Path) -> None:
        env: Env = {"NODELOOM_CONFIG_DIR": str(tmp_path)}  # no stored login
        root = ("--url", live.url, "--api-key", account.api_key, "--json")
        pushed = cli(*root, "workflows", "push", str(EXAMPLES / "greeting.json"), env=env)
        assert pushed.returncode == 0, pushed.stderr
        workflow_id = json.loads(pushed.stdout)["id"]  # --json reached the command
        listed = cli(*root, "workflows", "list", env=env)
        assert workflow_id in [w["id"] for w in json.loads(listed.stdout)]
        ran = cli(*root, "run", workflow_id, "-i", "text=root", "--wait", env=env)
        assert ran.returncode == 0 and json.loads(ran.stdout)["run"]["status"] == "completed"

    def test_after_the_command_wins(self, live: Live, logged_in: Env) -> None:
        nowhere = "http://127.0.0.1:9"
        done = cli("--url", nowhere, "workflows", "list", "--url", live.url, env=logged_in)
        assert done.returncode == 0, done.stderr
        done = cli("--url", live.url, "workflows", "list", "--url", nowhere, env=logged_in)
        assert done.returncode == 1 and "Is the server running?" in done.stderr

    def test_help_shows_them_once_at_the_root(self) -> None:
        root = cli("--help").stdout
        assert all(option in root for option in ("--url", "--api-key", "--json"))
        command = cli("workflows", "list", "--help").stdout
        assert "--limit" in command
        assert not any(option in command for option in ("--url", "--api-key", "--json"))


class TestWorkflowsAndRuns:
    def test_push_run_wait_download(self, logged_in: Env, tmp_path: Path) -> None:
        pushed = cli(
            "workflows", "push", str(EXAMPLES / "greeting.json"), "--name", "Hello CLI",
            env=logged_in,
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr
        workflow_id = pushed.stdout.strip()
        listed = json.loads(cli("workflows", "list", "--json", env=logged_in).stdout)
        assert (workflow_id, "Hello CLI") in [(w["id"], w["name"]) for w in listed]

        out = tmp_path / "out"
        done = cli(
            "run", "Hello CLI", "--input", "text=from the CLI", "--wait", "--download", str(out),
            env=logged_in,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stderr + done.stdout  # no colours or cursor moves in a pipe
        lines = done.stderr.splitlines()
        assert all(PROGRESS_LINE.match(line) for line in lines), lines
        assert lines[-1].endswith("run completed · 1 credit")
        assert any("node tpl (TextTemplate) completed" in line for line in lines)
        assert (out / "tpl.txt").read_text() == "Hello from the CLI!"
        assert re.search(
            rf"tpl\s+TextTemplate\s+text/plain\s+19\s+[0-9a-f-]{{36}}\s+{out}", done.stdout
        )

        as_json = cli("run", workflow_id, "-i", "text:=42", "--wait", "--json", env=logged_in)
        result = json.loads(as_json.stdout)
        assert result["run"]["status"] == "completed"
        assert result["outputs"]["tpl"]["size_bytes"] == len("Hello 42!")

        runs = json.loads(cli("runs", "list", "Hello CLI", "--json", env=logged_in).stdout)
        assert [r["id"] for r in runs][1:] != [] and all(r["status"] == "completed" for r in runs)
        shown = cli("runs", "show", workflow_id, runs[0]["id"], "--json", env=logged_in)
        assert [n["node_id"] for n in json.loads(shown.stdout)["node_runs"]] == ["in", "tpl"]
        events = cli("runs", "events", workflow_id, runs[-1]["id"], "--json", env=logged_in)
        parsed = [json.loads(line) for line in events.stdout.splitlines()]
        assert [ev["seq"] for ev in parsed] == list(range(1, 7))

    def test_in_a_terminal_the_view_is_a_live_table(self, logged_in: Env) -> None:
        pushed = cli(
            "workflows", "push", str(EXAMPLES / "greeting.json"), "--name", "Live", env=logged_in
        )
        assert pushed.returncode == 0, pushed.stderr
        env = {**os.environ, **{k: v for k, v in logged_in.items() if v is not None}}
        env.pop("NODELOOM_URL", None)
        env.pop("NODELOOM_API_KEY", None)
        leader, follower = pty.openpty()
        process = subprocess.Popen(
            [NODELOOM, "run", "Live", "--wait", "--no-cache"],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
        )
        os.close(follower)
        screen = b""
        while chunk := _read(leader):
            screen += chunk
        os.close(leader)
        assert process.wait(60) == 0, screen
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode())
        final = text.split("run ")[-1]  # the last frame of the live table
        assert final.startswith(tuple("0123456789abcdef")) and "· completed ·" in final
        assert re.search(r"tpl\s+│\s+TextTemplate\s+│\s+completed\s+│\s+█+ 100%", final)

    def test_pull_then_push_updates_the_same_workflow(self, logged_in: Env, tmp_path: Path) -> None:
        workflow_id = cli(
            "workflows", "push", str(EXAMPLES / "podcast-snippet.json"), env=logged_in
        ).stdout.strip()
        shown = cli("workflows", "show", workflow_id, env=logged_in)
        assert re.search(r"episode\s+AudioVolume\s+\(output\)", shown.stdout)
        pulled = tmp_path / "podcast.json"
        assert (
            cli("workflows", "pull", workflow_id, "-o", str(pulled), env=logged_in).returncode == 0
        )
        data = json.loads(pulled.read_text())
        assert data["id"] == workflow_id and data["name"] == "Podcast snippet"
        data["name"] = "Podcast, edited"
        pulled.write_text(json.dumps(data))
        again = cli("workflows", "push", str(pulled), env=logged_in)
        assert again.stdout.strip() == workflow_id and "updated" in again.stderr
        refused = cli("workflows", "delete", workflow_id, env=logged_in, stdin="")
        assert refused.returncode == 1 and "--yes" in refused.stderr
        assert cli("workflows", "delete", "Podcast, edited", "--yes", env=logged_in).returncode == 0
        names = [
            w["name"] for w in json.loads(cli("workflows", "list", "--json", env=logged_in).stdout)
        ]
        assert "Podcast, edited" not in names

    def test_pushing_a_file_again_updates_the_workflow_of_its_name(
        self, logged_in: Env, tmp_path: Path
    ) -> None:
        greeting = str(EXAMPLES / "greeting.json")
        first = cli("workflows", "push", greeting, "--name", "Pushed twice", env=logged_in)
        again = cli("workflows", "push", greeting, "--name", "Pushed twice", env=logged_in)
        assert first.returncode == 0 and again.returncode == 0, again.stderr
        assert again.stdout.strip() == first.stdout.strip() and "updated" in again.stderr
        assert cli("run", "Pushed twice", "--wait", env=logged_in).returncode == 0
        # --new makes a second one of that name: pushing by name is then ambiguous.
        copy = cli("workflows", "push", greeting, "--name", "Pushed twice", "--new", env=logged_in)
        assert copy.returncode == 0 and copy.stdout.strip() != first.stdout.strip()
        refused = cli("workflows", "push", greeting, "--name", "Pushed twice", env=logged_in)
        assert refused.returncode == 1
        assert "2 workflows are named 'Pushed twice'" in refused.stderr

    def test_errors_are_one_clear_message(self, logged_in: Env, tmp_path: Path) -> None:
        done = cli("run", "No such workflow", env=logged_in)
        assert done.returncode == 1
        assert done.stderr == "error: No workflow named 'No such workflow'. (not_found)\n"
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"name": "bad", "graph_json": {"nodes": [], "edges": []}}))
        done = cli("workflows", "push", str(bad), env=logged_in)
        assert (
            done.returncode == 1 and "  /graph_json/viewport: viewport is required" in done.stderr
        )
        unreachable = cli("workflows", "list", "--url", "http://127.0.0.1:9", env=logged_in)
        assert unreachable.returncode == 1 and "Is the server running?" in unreachable.stderr

    def test_cancel(self, logged_in: Env, tmp_path: Path) -> None:
        slow = tmp_path / "slow-cli.json"
        slow.write_text(
            json.dumps(g([n("in", "TextInput"), n("d", "Delay", seconds=30)], [e("in", "d")]))
        )
        workflow_id = cli("workflows", "push", str(slow), env=logged_in).stdout.strip()
        run_id = cli("run", "slow-cli", env=logged_in).stdout.strip()
        assert cli("runs", "cancel", workflow_id, run_id, env=logged_in).returncode == 0
        done = cli("runs", "events", workflow_id, run_id, env=logged_in)
        assert done.stdout.splitlines()[-1].split()[3] == "run.cancelled"
        assert '"code": "cancelled"' in done.stdout

    def test_retry(self, logged_in: Env, tmp_path: Path) -> None:
        failing = tmp_path / "retry-cli.json"
        graph = g(
            [
                n("in", "TextInput", text="x"),
                n("a", "TextTemplate", template="A {{ text }}"),
                n("bad", "TextTemplate", template="{{ 1 / 0 }}"),
            ],
            [e("in", "a"), e("a", "bad")],
        )
        failing.write_text(json.dumps(graph))
        workflow_id = cli("workflows", "push", str(failing), env=logged_in).stdout.strip()
        failed = cli("run", "retry-cli", "--wait", "--json", env=logged_in)
        assert failed.returncode == 1
        run_id = json.loads(failed.stdout)["run"]["id"]
        bad = cli("runs", "retry", workflow_id, run_id, "--set", "nodot", env=logged_in)
        assert bad.returncode == 1 and "--set takes node.param=value" in bad.stderr
        done = cli(
            "runs",
            "retry",
            workflow_id,
            run_id,
            "--set",
            "bad.template={{ text }}!",
            "--wait",
            "--json",
            env=logged_in,
        )
        assert done.returncode == 0, done.stderr
        run = json.loads(done.stdout)["run"]
        assert run["retried_from"] == run_id and run["status"] == "completed"
        assert [nr["cached"] for nr in run["node_runs"]] == [True, True, False]
        shown = json.loads(cli("runs", "show", workflow_id, run_id, "--json", env=logged_in).stdout)
        assert shown["retries"] == [run["id"]]
        table = cli("runs", "show", workflow_id, run["id"], env=logged_in)
        assert f"retry of run {run_id}" in table.stderr
        assert "bad" in table.stdout and "completed (cached)" in table.stdout
        again = cli("runs", "retry", workflow_id, run["id"], env=logged_in)
        assert again.returncode == 1 and "completed" in again.stderr


class TestWebhooksAndKeys:
    def test_webhooks(self, logged_in: Env) -> None:
        pushed = cli(
            "workflows", "push", str(EXAMPLES / "greeting.json"), "--name", "Hooked", env=logged_in
        )
        workflow_id = pushed.stdout.strip()
        created = cli("webhooks", "create", "Hooked", "--name", "orders", env=logged_in)
        url = created.stdout.strip()
        assert created.returncode == 0 and url.startswith("http://127.0.0.1:")
        hook_id = created.stderr.split()[2]
        assert cli("webhooks", "disable", workflow_id, hook_id, env=logged_in).returncode == 0
        hooks = json.loads(cli("webhooks", "list", workflow_id, "--json", env=logged_in).stdout)
        assert [(h["id"], h["url"], h["active"]) for h in hooks] == [(hook_id, url, False)]
        assert cli("webhooks", "enable", workflow_id, hook_id, env=logged_in).returncode == 0
        assert cli("webhooks", "delete", workflow_id, hook_id, env=logged_in).returncode == 0
        table = cli("webhooks", "list", workflow_id, env=logged_in)
        assert table.returncode == 0 and hook_id not in table.stdout

    def test_schedules_and_callbacks(self, logged_in: Env) -> None:
        pushed = cli(
            "workflows", "push", str(EXAMPLES / "greeting.json"), "--name", "Nightly", env=logged_in
        )
        workflow_id = pushed.stdout.strip()
        created = cli(
            "schedules",
            "create",
            "Nightly",
            "--name",
            "night",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Berlin",
            "--input",
            '{"text": "moon"}',
            "--json",
            env=logged_in,
        )
        assert created.returncode == 0, created.stderr
        schedule = json.loads(created.stdout)
        assert schedule["timezone"] == "Europe/Berlin" and schedule["input"] == {"text": "moon"}
        paused = cli("schedules", "pause", workflow_id, schedule["id"], env=logged_in)
        assert paused.returncode == 0 and "paused" in paused.stderr
        table = cli("schedules", "list", workflow_id, env=logged_in)
        assert schedule["id"] in table.stdout and "0 3 * * *" in table.stdout
        resumed = cli("schedules", "resume", workflow_id, schedule["id"], env=logged_in)
        assert "active" in resumed.stderr and "next run" in resumed.stderr
        bad = cli(
            "schedules", "update", workflow_id, schedule["id"], "--cron", "nope", env=logged_in
        )
        assert bad.returncode == 1 and "/cron" in bad.stderr
        assert (
            cli("schedules", "delete", workflow_id, schedule["id"], env=logged_in).returncode == 0
        )

        secret = cli("callbacks", "secret", "--rotate", env=logged_in)
        assert secret.returncode == 0 and secret.stdout.startswith("whsec_")
        shown = cli("callbacks", "secret", env=logged_in)
        assert shown.returncode == 0 and "whsec_" not in shown.stdout + shown.stderr
        refused = cli("run", "Nightly", "--callback-url", "http://192.168.1.1/x", env=logged_in)
        assert refused.returncode == 1 and "/callback_url" in refused.stderr
        started = cli("run", "Nightly", env=logged_in)
        log = cli("callbacks", "log", workflow_id, started.stdout.strip(), env=logged_in)
        assert log.returncode == 0 and "without a callback_url" in log.stderr

    def test_keys(self, logged_in: Env) -> None:
        created = cli("keys", "create", "ci", env=logged_in)
        assert created.returncode == 0 and created.stdout.startswith("nlk_")
        keys = json.loads(cli("keys", "list", "--json", env=logged_in).stdout)
        ci = next(k for k in keys if k["name"] == "ci")
        assert cli("keys", "revoke", ci["id"], env=logged_in).returncode == 0
        table = cli("keys", "list", env=logged_in).stdout
        assert re.search(rf"{ci['id']}\s+ci\s+{ci['prefix']}\s+\S+ \S+\s+\S+ \S+", table)
        with_key: Env = {**logged_in, "NODELOOM_API_KEY": created.stdout.strip()}
        assert cli("workflows", "list", env=with_key).returncode == 1


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the other end closed: the process has exited
        return b""


class TestBatches:
    def test_run_wait_shows_item_progress(self, logged_in: Env, tmp_path: Path) -> None:
        graph = {
            "nodes": [
                {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
                {"id": "each", "type": "ForEach", "position": {"x": 1, "y": 0}, "data": {}},
                {
                    "id": "up",
                    "type": "TextTransform",
                    "position": {"x": 2, "y": 0},
                    "data": {"operation": "upper"},
                },
                {"id": "all", "type": "Collect", "position": {"x": 3, "y": 0}, "data": {}},
            ],
            "edges": [
                {"id": "a", "source": "in", "target": "each"},
                {"id": "b", "source": "each", "target": "up"},
                {"id": "c", "source": "up", "target": "all"},
            ],
            "viewport": {"x": 0, "y": 0, "zoom": 1},
        }
        path = tmp_path / "batch.json"
        path.write_text(json.dumps({"name": "Batch CLI", "graph_json": graph}))
        assert cli("workflows", "push", str(path), env=logged_in).returncode == 0
        out = tmp_path / "out"
        done = cli(
            "run", "Batch CLI", "-i", "text=a\nb\nc", "--wait", "--download", str(out), "--all",
            env=logged_in,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert all(PROGRESS_LINE.match(line) for line in lines), lines
        items = [line for line in lines if "node up item" in line]
        assert len(items) == 3 and items[-1].endswith("completed · 3/3"), lines
        assert json.loads((out / "all.txt").read_text()) == ["A", "B", "C"]
        assert (out / "up.1.txt").read_text() == "B"


class TestRepeat:
    def test_run_wait_shows_iterations_not_items(self, logged_in: Env, tmp_path: Path) -> None:
        """A Repeat region's node runs are iterations (docs/repeat.md): the watch names them
        "iteration k/max" (max: the Repeat's max_iterations), never "item k · n/n"."""
        graph = g(
            [
                n("in", "TextInput"),
                n("rep", "Repeat", max_iterations=5),
                n("grow", "TextTemplate", template="{{ text }}x"),
                n("until", "Until", operator="contains", value="xx"),
                n("good", "TextTemplate", template="good: {{ text }}"),
            ],
            [
                e("in", "rep"),
                e("rep", "grow"),
                e("grow", "until"),
                {**e("until", "good"), "sourceHandle": "done"},
            ],
        )
        path = tmp_path / "repeat.json"
        path.write_text(json.dumps({"name": "Repeat CLI", "graph_json": graph}))
        assert cli("workflows", "push", str(path), env=logged_in).returncode == 0
        done = cli("run", "Repeat CLI", "-i", "text=a", "--wait", env=logged_in)
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert all(PROGRESS_LINE.match(line) for line in lines), lines
        assert not [line for line in lines if " item " in line], lines
        grown = [line.split("] ", 1)[1] for line in lines if "node grow iteration" in line]
        assert grown == [
            "node grow iteration 1/5 completed",
            "node grow iteration 2/5 completed",
        ], lines
        assert any("node until iteration 2/5 completed" in line for line in lines), lines
        assert any("node good (TextTemplate) completed" in line for line in lines), lines
