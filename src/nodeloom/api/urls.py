"""The public address in the URLs the server hands out (webhook URLs, signed artifact URLs,
problem ``type`` links).

``NODELOOM_BASE_URL``, when set, is the answer: the operator knows the address clients use,
and a request cannot change it. Unset, the address is the one the request was sent to: its
scheme and its ``Host`` header, so a server started on port 8123 hands out URLs on port
8123 without being told. Behind a reverse proxy the request the server sees is the proxy's;
``ForwardedHeaders`` (api/middleware.py) rewrites the scheme and the Host from
``X-Forwarded-Proto`` and ``X-Forwarded-Host`` before this runs, but only for the proxies
``NODELOOM_FORWARDED_ALLOW_IPS`` names.

A Host header is whatever the client wrote, so a URL built from it goes back to that client
only (it is never stored); one that is not a plain ``host[:port]`` is not used.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.types import Scope

# A name (underscores allowed: container and service names have them) or an IP literal.
_HOST = re.compile(r"(?:[\w](?:[\w.-]*[\w])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?", re.ASCII)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def valid_host(value: str) -> bool:
    """``value`` is a host name or IP literal with an optional port, and nothing else."""
    return _HOST.fullmatch(value) is not None


def public_base(configured: str | None, scope: Scope) -> str:
    """``scheme://host[:port]`` (no trailing slash) for URLs in the answer to ``scope``."""
    if configured:
        return configured
    scheme = str(scope.get("scheme") or "http")
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    for name, value in scope.get("headers") or ():
        if name == b"host":
            host = value.decode("latin-1").strip()
            if valid_host(host):
                return f"{scheme}://{host}"
            break
    server = scope.get("server")
    if not server:
        return f"{scheme}://localhost"
    address, port = server[0], server[1]
    if ":" in address:
        address = f"[{address}]"
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{address}"
    return f"{scheme}://{address}:{port}"


_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})  # noqa: S104


def base_url_mismatch(base_url: str | None, host: str, port: int) -> str | None:
    """Why ``NODELOOM_BASE_URL`` looks wrong for a server on ``host:port``, or None.

    A base URL that names a port explicitly, or that names this very machine, should name
    the port the server listens on; if not, every webhook URL, signed URL and problem link
    it hands out leads elsewhere. A public name on the scheme's default port
    (``https://nodeloom.example.com``) is the usual address of a reverse proxy in front of
    the server, and is not questioned."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    try:
        explicit = parts.port
    except ValueError:
        return None
    effective = explicit or (443 if parts.scheme == "https" else 80)
    if effective == port:
        return None
    local = (parts.hostname or "") in _LOCAL_HOSTS | {host}
    if explicit is None and not local:
        return None
    return (
        f"NODELOOM_BASE_URL is {base_url} (port {effective}) but this server listens on port "
        f"{port}: webhook URLs, signed artifact URLs and problem links will use port "
        f"{effective}. Unless a proxy forwards that port here, fix NODELOOM_BASE_URL or unset "
        "it (URLs are then built from each request's address)."
    )
