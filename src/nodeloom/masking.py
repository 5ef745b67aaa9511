"""Masking secrets out of text another party wrote: a provider's error message, a
connection test's answer.

A provider that refuses a key often quotes it, and not always as it was sent: OpenAI quotes
it with its last characters replaced (``sk-proj-...AbCd``), others upper-case it, put it in a
JSON string inside their JSON (``\\u0073k-...``), or percent-encode it in a URL they
quote. Replacing the exact key missed all of these, and the message went on to the node's
error, the run record, its events and the database. So the text is compared with each
secret as the provider may have written it — JSON and percent escapes decoded, case
ignored — and every run of characters that belongs to a piece of the secret at least
``MIN_FRAGMENT`` long is replaced by ``***`` in the original text. A secret shorter than
that is masked only whole. Pure: no I/O; the text is short (a quoted message), the cost
linear in its length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
# The shortest piece of a secret that is masked. Shorter pieces are left: the common
# prefix of every key of a provider ("sk-proj-") is not this key, and 12 characters of a
# random key do not turn up by chance.
MIN_FRAGMENT = 12

_ESCAPE = re.compile(r"\\[uU]([0-9a-fA-F]{4})|\\([\"\\/bfnrt])|%([0-9A-Fa-f]{2})")
_SHORT = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _normalized(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` with escapes decoded and case folded, and for each of its characters where
    in ``text`` it starts and ends."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []

    def plain(upto: int, at: int) -> None:
        for j in range(at, upto):
            chars.append(text[j].lower()[:1])
            starts.append(j)
            ends.append(j + 1)

    at = 0
    for found in _ESCAPE.finditer(text):
        plain(found.start(), at)
        if found.group(1):
            char = chr(int(found.group(1), 16))
        elif found.group(2):
            char = _SHORT.get(found.group(2), found.group(2))
        else:
            char = chr(int(found.group(3), 16))
        chars.append(char.lower()[:1])
        starts.append(found.start())
        ends.append(found.end())
        at = found.end()
    plain(len(text), at)
    return "".join(chars), starts, ends


def mask(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret of ``secrets``, and every piece of one at least
    ``MIN_FRAGMENT`` long, in any case and escaped or not, replaced by ``***``."""
    wanted = [s.lower() for s in secrets if s]
    if not wanted or not text:
        return text
    norm, starts, ends = _normalized(text)
    hidden = [False] * len(norm)
    for secret in wanted:
        size = min(len(secret), MIN_FRAGMENT)
        pieces = {secret[k : k + size] for k in range(len(secret) - size + 1)}
        for i in range(len(norm) - size + 1):
            if norm[i : i + size] in pieces:
                hidden[i : i + size] = [True] * size
    if not any(hidden):
        return text
    out: list[str] = []
    kept_from = 0
    i = 0
    while i < len(norm):
        if not hidden[i]:
            i += 1
            continue
        j = i
        while j < len(norm) and hidden[j]:
            j += 1
        out.append(text[kept_from : starts[i]])
        out.append(MASK)
        kept_from = ends[j - 1]
        i = j
    out.append(text[kept_from:])
    return "".join(out)
