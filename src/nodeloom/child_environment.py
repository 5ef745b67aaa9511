"""The environment of every process that runs or imports node code (the sandbox's fork
server and its children, the import probe of node packages): an allow-list of the server's
variables, so no ``NODELOOM_*`` setting, secret or database address reaches package code.

It stands apart from the sandbox so that the node packages' import probe (nodes/packages.py)
uses the same list without importing the sandbox, which imports the nodes.
"""

from __future__ import annotations

import os

_ENV_ALLOWED = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)
# One thread per library pool: a node's process is sized by its budget, and each extra
# thread reserves address space (stack, malloc arena) that would count against it.
_ENV_SET = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def sandbox_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _ENV_ALLOWED or k.startswith("LC_")}
    env.update(_ENV_SET)
    return env
