"""``If-Match`` on workflow saves (RFC 9110, section 13.1.1): the lost-update guard.

A client that read version 3 (``ETag: "v3"``) sends ``If-Match: "v3"`` with its update; if
another save made version 4 meanwhile, the update is refused with 412 and nothing is
saved. The header is optional: without it an update overwrites, as it always did.

Decisions (docs/versions.md):

* ``If-Match: *`` matches any current workflow (it only asks that the workflow exists).
* A list of entity-tags matches when one of them equals the current ETag by *strong*
  comparison, as RFC 9110 requires for If-Match: a weak tag (``W/"v3"``) never matches.
* A value that is not ``*`` nor a list of entity-tags (``v3`` without quotes, say) is a
  malformed request: 400 ``invalid_request`` naming the header, not 412. A 412 tells a
  client to read again and retry, which can never help a request it cannot form right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeloom.errors import FieldError, InvalidRequest

# entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE ; etagc = %x21 / %x23-7E / obs-text
_TAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*')
IF_MATCH_DOC = (
    'The ETag of the version you read (GET returns it), such as "v3": the save is refused '
    "with 412 when another save came first. Optional; * matches any version."
)


@dataclass(frozen=True)
class IfMatch:
    any: bool
    strong: frozenset[str]  # the opaque tags (quoted) of the strong entity-tags listed

    def matches(self, etag: str) -> bool:
        return self.any or etag in self.strong


def parse_if_match(value: str | None) -> IfMatch | None:
    """The parsed header, None when absent, or InvalidRequest when malformed."""
    if value is None:
        return None
    if value.strip() == "*":
        return IfMatch(any=True, strong=frozenset())
    strong: set[str] = set()
    rest = value
    seen = False
    while rest.strip():
        match = _TAG.match(rest)
        if match is None:
            raise _malformed()
        if match.group(1) is None:
            strong.add(f'"{match.group(2)}"')
        seen = True
        rest = rest[match.end() :]
        if rest and not rest.startswith(","):
            raise _malformed()
        rest = rest[1:]
        while rest.lstrip().startswith(","):  # empty list elements are allowed (RFC 9110 5.6.1)
            rest = rest.lstrip()[1:]
    if not seen:
        raise _malformed()
    return IfMatch(any=False, strong=frozenset(strong))


def _malformed() -> InvalidRequest:
    message = 'If-Match must be * or a list of entity-tags such as "v3" (quotes included)'
    return InvalidRequest(f"{message}.", errors=[FieldError("header:If-Match", message)])
