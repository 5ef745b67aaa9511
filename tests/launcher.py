"""``nodeloom`` processes forked from one that has already imported them.

A ``nodeloom serve`` spends about 2 s of CPU importing its modules (FastAPI, SQLAlchemy,
Pillow, some 300 of ours) before it serves anything, and a CLI call about 0.4 s; the suite
starts over a hundred servers and makes over a hundred CLI calls, on two cores. So each
pytest process keeps one launcher: a process that imports what ``nodeloom serve``, ``nodeloom
worker`` and the CLI import, once, then forks a child for each command it is asked to run.
The child is the real command: it sets the environment and arguments it was given, takes the
stdin, stdout and stderr the test passed it (file descriptors, sent over a Unix socket) and
calls ``nodeloom.cli.main`` as the installed entry point does. Only the imports are skipped.

A test that needs a fresh interpreter (one that must see packages installed after the
launcher started, or checks what a start imports) starts ``sys.executable`` itself.

The launcher runs as ``python -m tests.launcher SOCKET`` and ends when the pytest process
that started it does. The test side's handle, ``Launched``, answers like ``subprocess.Popen``
(``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``returncode``); the exit status
comes back through a file the launcher writes when it reaps the child.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from nodeloom.sandbox.zygote import reaped

_HEADER = 65536  # the largest request: argv and a whole environment, as JSON


# -- the launcher process -------------------------------------------------------------------


def _preload() -> None:
    """What ``serve``, ``worker`` and the client commands import, lazily included."""
    import alembic.command  # noqa: F401
    import uvloop  # noqa: F401

    import nodeloom.api.serving
    import nodeloom.cli
    import nodeloom.db.migrate
    import nodeloom.engine.graph_cache
    import nodeloom.runtime  # noqa: F401


def _child(request: dict[str, Any], fds: list[int], listener: socket.socket) -> None:
    """In the forked child: become the command, then exit with its status."""
    code = 1
    try:
        listener.close()
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # As the installed entry point starts: its script as argv[0], and a __main__ that is
        # no package's (click names the program from both, in usage lines).
        sys.argv = [str(Path(sys.executable).parent / "nodeloom"), *request["args"]]
        main_module = sys.modules["__main__"]
        main_module.__package__ = None
        main_module.__spec__ = None
        # Fresh stdio objects on the new descriptors: the launcher's were not a terminal,
        # the test's may be, and click asks.
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        from nodeloom.cli import main

        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(exits: dict[int, str]) -> None:
    for pid, code in reaped():
        path = exits.pop(pid, None)
        if path is None:
            continue
        partial = f"{path}.partial"
        Path(partial).write_text(str(code))
        os.replace(partial, path)


def _serve(path: str) -> None:
    _preload()
    import gc

    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them on a collection
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    exits: dict[int, str] = {}
    print("ready", flush=True)
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                _accept(listener, exits)
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
        _reap(exits)


def _accept(listener: socket.socket, exits: dict[int, str]) -> None:
    conn, _ = listener.accept()
    with conn:
        message, fds, _, _ = socket.recv_fds(conn, _HEADER, 3)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            conn.close()  # the test waits for the launcher's end of it to close
            _child(request, fds, listener)
        for fd in fds:
            os.close(fd)
        exits[pid] = request["exit_path"]
        conn.sendall(json.dumps({"pid": pid}).encode())


# -- the test side --------------------------------------------------------------------------


class Launched:
    """A command the launcher forked: the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, pid: int, exit_path: Path, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._exit_path = exit_path

    def poll(self) -> int | None:
        if self.returncode is None and self._exit_path.exists():
            self.returncode = int(self._exit_path.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Launcher:
    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="nodeloom-launcher-"))
        self.socket_path = str(self.home / "socket")
        self.proc: subprocess.Popen[bytes] | None = None
        self._count = 0
        self._lock = threading.Lock()  # tests may start commands from several threads

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.launcher", self.socket_path],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the launcher did not start: {line!r}")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def spawn(
        self,
        args: list[str],
        env: dict[str, str],
        stdin: int,
        stdout: int,
        stderr: int,
        cwd: str | None = None,
    ) -> Launched:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            self._count += 1
            exit_path = self.home / f"exit-{self._count}"
        request = {"args": args, "env": env, "cwd": cwd or os.getcwd(), "exit_path": str(exit_path)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket_path)
            socket.send_fds(conn, [json.dumps(request).encode()], [stdin, stdout, stderr])
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
        return Launched(json.loads(answer)["pid"], exit_path, args)


_launcher = _Launcher()


def launch(
    args: list[str],
    env: dict[str, str],
    stdout: IO[Any] | int,
    stderr: IO[Any] | int | None = None,
    stdin: IO[Any] | int | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Launched:
    """``nodeloom ARGS`` with exactly ``env``, forked from this process's launcher.
    ``stderr`` None: into ``stdout``; ``stdin`` None: /dev/null."""

    def fd(stream: IO[Any] | int) -> int:
        return stream if isinstance(stream, int) else stream.fileno()

    with open(os.devnull, "rb") as null:
        out = fd(stdout)
        return _launcher.spawn(
            args,
            env,
            fd(stdin) if stdin is not None else null.fileno(),
            out,
            fd(stderr) if stderr is not None else out,
            str(cwd) if cwd is not None else None,
        )


def run(
    args: list[str],
    env: dict[str, str],
    stdin: str | None = None,
    timeout: float = 120,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``nodeloom ARGS`` to the end, its output captured (files, not a terminal), as
    ``subprocess.run(..., capture_output=True, text=True)`` answers."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryFile() as given,
    ):
        given.write((stdin or "").encode())
        given.seek(0)
        child = launch(args, env, out, err, given, cwd)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            args, code, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        )


if __name__ == "__main__":
    _serve(sys.argv[1])
