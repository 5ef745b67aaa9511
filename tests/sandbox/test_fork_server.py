"""The sandbox's fork server (sandbox/zygote.py) as a process: it goes away quietly when the
server that started it is gone, whenever that happens."""

from __future__ import annotations

import socket
import subprocess
import sys

from nodeloom.child_environment import sandbox_environment


def test_a_fork_server_whose_server_left_before_it_was_ready_exits_quietly() -> None:
    """A server that stops at once (SIGTERM right after start) closes the control socket
    before the fork server has imported the nodes and said it is ready: the fork server
    must then exit cleanly, not print a BrokenPipeError traceback into the server's log."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeloom.sandbox.zygote", str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        env=sandbox_environment(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    theirs.close()
    ours.close()  # gone before the fork server can answer
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 0, stderr.decode(errors="replace")
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
