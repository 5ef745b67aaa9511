"""Masking a secret out of text another party wrote (a provider's error message): the
secret as it is, and any long enough piece of it in the forms providers echo it in."""

from __future__ import annotations

import json

import pytest

from nodeloom.masking import MASK, MIN_FRAGMENT, mask

KEY = "sk-proj-Q9wErTy7UiOp3AsDfGhJkL2zXcVbNm"


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


@pytest.mark.parametrize(
    "echoed",
    [
        KEY,
        KEY[:-4],  # "Incorrect API key provided: sk-proj-...VbNm" style cuts
        KEY[:-1],
        KEY[6:],
        KEY[3 : 3 + MIN_FRAGMENT],
        KEY.upper(),
        KEY.lower(),
        json.dumps(KEY)[1:-1].replace("-", "\\u002d"),
        _escaped(KEY),
        _escaped(KEY[:-5]).upper(),
        KEY.replace("/", "\\/"),
        "".join(f"%{b:02X}" for b in KEY.encode()),
    ],
)
def test_any_long_piece_in_any_form_is_masked(echoed: str) -> None:
    text = f"Incorrect API key provided: {echoed}. You can find your key at example.com."
    masked = mask(text, (KEY,))
    assert masked.startswith("Incorrect API key provided: " + MASK)
    assert masked.endswith(". You can find your key at example.com.")
    lowered = masked.lower()
    for k in range(len(KEY) - MIN_FRAGMENT + 1):
        assert KEY[k : k + MIN_FRAGMENT].lower() not in lowered


def test_text_without_the_secret_is_unchanged() -> None:
    text = "Rate limit reached for gpt-4o-mini in organization org-abc on tokens per min."
    assert mask(text, (KEY,)) == text
    assert mask(text, ()) == text
    assert mask(text, ("",)) == text


def test_a_short_secret_is_masked_whole_only() -> None:
    assert mask("token abc123 and ABC123", ("abc123",)) == f"token {MASK} and {MASK}"
    assert mask("token abc12", ("abc123",)) == "token abc12"


def test_short_common_pieces_are_kept() -> None:
    # "sk-proj-" alone (8 characters) is every OpenAI key's prefix, not this key.
    assert mask("keys look like sk-proj-...", (KEY,)) == "keys look like sk-proj-..."


def test_several_secrets_and_several_places() -> None:
    other = "r8_Zx1Cv2Bn3Mq4Wl5Ek6Rj7Th8Yg9"
    text = f"a {KEY} b {other.upper()} c {KEY[:20]}"
    assert mask(text, (KEY, other)) == f"a {MASK} b {MASK} c {MASK}"
