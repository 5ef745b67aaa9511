"""How a Nodeloom process logs, and the filter that keeps credentials out of every line.

Credentials travel in URLs where a client cannot send headers: the WebSocket and the
Server-Sent Events streams take ``?token=`` (a JWT or an API key; browsers cannot set
``Authorization`` on either), a signed artifact URL carries ``?sig=``, and a webhook's token
*is* its path (``/api/v1/webhooks/<token>``). Uvicorn logs each WebSocket with its full URL
(``"WebSocket /api/v1/ws?token=..." [accepted]``), its access log does the same for every
request, and our own handlers log request paths and tracebacks. Scrubbing at each call site
would miss the next one, and uvicorn's are not ours to edit, so the scrubbing is a
``logging.Filter`` (:class:`RedactSecrets`) on every handler the process writes through:
the root logger's (``configure``) and uvicorn's own (``uvicorn_log_config``). A filter on a
handler sees every record that reaches it, whichever logger it was logged on.

What is replaced by ``[redacted]``:

- the value of a credential-bearing query parameter (``token``, ``sig``, ``access_token``,
  ``api_key``, ``key``, ``secret``, ``password``), wherever a URL appears in a line;
- the path segment after ``/webhooks/`` (a webhook token, even a truncated one; not a
  webhook's UUID), and after ``/provider-hooks/<provider>/`` (the token of a provider's
  webhook URL), in any case and with any number of slashes;
- anything shaped like an API key (``nlk_...``) or a JWT (``eyJ...``.``...``.``...``), in
  any case, and the credential after ``Bearer``, so a credential logged outside a URL is
  caught too.

Text holding percent-escapes is looked at as the server reads it: decoded (repeatedly, so
double encoding too). Where the decoded text holds a credential, it is logged decoded and
scrubbed; otherwise as it was.

The message, its arguments, the text of an exception's traceback and the stack are
scrubbed; the record's other fields are left alone. A record is rewritten only when it
holds something to scrub, so the common case costs one regular-expression search.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any
from urllib.parse import unquote

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "[redacted]"

# Query parameters whose value is a credential somewhere in our API or commonly elsewhere.
SECRET_PARAMETERS = ("token", "sig", "access_token", "api_key", "key", "secret", "password")
# A webhook's id in /workflows/<id>/webhooks/<id> is a UUID, never a token: it is kept.
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_SEGMENT_END = r"(?:[/?#\s\"'<>]|$)"
_SECRET = re.compile(
    "|".join(
        [
            # ?token=... / &sig=... : the name is kept, the value (to the next & or the end
            # of the URL) goes. Case-insensitive: a client may send ?Token=.
            r"(?P<param>[?&;](?i:" + "|".join(SECRET_PARAMETERS) + r")=)[^&;#\s\"'<>]*",
            # The webhook trigger path: its one segment is the token. Any case, any number
            # of slashes: the router answers //webhooks/<token> too (404, 405), and the
            # access log prints the path as sent.
            r"(?P<hook>(?i:/+webhooks/+|/+provider-hooks/+[a-z]+/+))"
            r"(?!" + _UUID + _SEGMENT_END + r")[^/?#\s\"'<>]+",
            r"(?P<bearer>(?i:bearer)\s+)[^\s,;\"'<>]+",
            r"(?P<key>(?i:nlk_))[A-Za-z0-9_-]+",
            r"(?i:eyJ)[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
        ]
    )
)
# A run of text that holds a percent-escape: a URL, or a credential a client encoded.
_ESCAPED = re.compile(r"[^\s\"'<>]*%[0-9A-Fa-f]{2}[^\s\"'<>]*")
# Decoding stops here: more rounds than any client sends, few enough to stay cheap.
_DECODE_ROUNDS = 4


def _replace(match: re.Match[str]) -> str:
    kept = match.group("param") or match.group("hook") or match.group("bearer") or ""
    if match.group("key"):
        kept = "nlk_"
    return kept + REDACTED


def _decoded(text: str) -> str:
    """``text`` percent-decoded until nothing changes (double encoding included)."""
    for _ in range(_DECODE_ROUNDS):
        plain = unquote(text)
        if plain == text:
            break
        text = plain
    return text


def _redact_escaped(match: re.Match[str]) -> str:
    """An encoded run is scrubbed as the server reads it: decoded. The server decodes a
    query's names and values, so ``?%74oken=%6Elk_...`` authenticates as ``?token=nlk_...``
    would; matched still encoded, it was logged in clear. A run that decodes to nothing
    secret is kept as it was sent."""
    raw = match.group(0)
    plain = _decoded(raw)
    if _SECRET.search(plain) is None:
        return raw
    return _SECRET.sub(_replace, plain)


def redact(text: str) -> str:
    """``text`` with every credential the module docstring lists replaced."""
    if "%" in text:
        text = _ESCAPED.sub(_redact_escaped, text)
    if _SECRET.search(text) is None:
        return text
    return _SECRET.sub(_replace, text)


def _redact_value(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactSecrets(logging.Filter):
    """Scrubs credentials from a record before any handler formats it (module docstring).

    Arguments are scrubbed one by one, so formatters that read them (uvicorn's access log
    unpacks its five) keep working; only if the formatted message still holds a secret (an
    argument that is not a string, a URL object say) is the record reduced to its scrubbed
    text. The traceback is formatted here, scrubbed, and left in ``exc_text``, which every
    ``logging.Formatter`` prints instead of formatting the exception again.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        # The format string is scrubbed only as part of the formatted message: on its own,
        # "/api/v1/webhooks/%s" would lose its placeholder.
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(_redact_value(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _redact_value(v) for k, v in args.items()}
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: logging reports it itself
            message = None
        if message is not None and redact(message) != message:
            record.msg = redact(message)
            record.args = None
            record.__dict__.pop("color_message", None)  # uvicorn's coloured copy
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def protect(logger: logging.Logger) -> None:
    """Put the filter on each of ``logger``'s handlers (once)."""
    for handler in logger.handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def configure(level: str) -> None:
    """Logging for ``nodeloom serve`` (the supervisor and each of its children) and
    ``nodeloom worker``: one line per record on stderr, credentials scrubbed."""
    logging.basicConfig(level=level.upper(), format=FORMAT)
    protect(logging.getLogger())


def uvicorn_log_config() -> dict[str, Any]:
    """Uvicorn's own logging configuration (its formats, stdout and stderr) with
    :class:`RedactSecrets` on each of its handlers: uvicorn's loggers do not propagate to
    the root logger, so the root's filter never sees their records."""
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_secrets"] = {"()": RedactSecrets}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("redact_secrets")
    return config
