"""What a file is, from its first bytes: never from its name or its declared type.

``sniff`` names the container format and the kind it would become, or refuses what we never
take (documents with active content, archives, executables). It is a first look only: the
ingest (nodes/ingest.py) then decodes the file for real, and a file that only starts like an
image is refused there (``media_unreadable``).
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_BYTES = 64

# Formats whose magic bytes we recognise and refuse, named in the answer.
_REFUSED: tuple[tuple[bytes, str], ...] = (
    (b"%PDF", "PDF"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x7fELF", "executable"),
    (b"MZ", "executable"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"Rar!", "RAR archive"),
)
_HEIF_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1", b"avif"}
_AUDIO_MP4_BRANDS = {b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "}


@dataclass(frozen=True)
class Sniffed:
    kind: str  # image, audio or video: what the file becomes
    format: str  # the container as sent: png, jpeg, gif, webp, tiff, wav, mp4, mov...


class Refused(Exception):
    """Not a file we take; the message says what it looks like."""


def sniff(head: bytes) -> Sniffed:
    """The kind and format of a file from its first ``HEAD_BYTES`` bytes, or Refused."""
    found = _image(head) or _audio(head) or _video(head)
    if found is not None:
        return found
    for magic, name in _REFUSED:
        if head.startswith(magic):
            raise Refused(f"the file is a {name}, not an image, audio or video")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<", b"\xff\xfe<", b"\xfe\xff\x00<")):
        raise Refused(
            "the file is markup (SVG, HTML or XML): documents that can carry scripts are "
            "not taken; export it as PNG"
        )
    raise Refused("the file's content is not an image, audio or video format we decode")


def _image(head: bytes) -> Sniffed | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("image", "png")
    if head.startswith(b"\xff\xd8\xff"):
        return Sniffed("image", "jpeg")
    if head.startswith((b"GIF87a", b"GIF89a")):
        return Sniffed("image", "gif")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Sniffed("image", "webp")
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return Sniffed("image", "tiff")
    if head.startswith(b"BM") and len(head) >= 26 and head[6:10] == b"\x00\x00\x00\x00":
        return Sniffed("image", "bmp")
    if head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS:
        return Sniffed("image", "heif")
    return None


def _audio(head: bytes) -> Sniffed | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return Sniffed("audio", "wav")
    if head.startswith(b"fLaC"):
        return Sniffed("audio", "flac")
    if head.startswith(b"ID3"):
        return Sniffed("audio", "mp3")
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return Sniffed("audio", "aac")  # ADTS: sync word, layer 00
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return Sniffed("audio", "mp3")  # an MPEG audio frame's sync word
    if head[4:8] == b"ftyp" and head[8:12] in _AUDIO_MP4_BRANDS:
        return Sniffed("audio", "m4a")
    if head.startswith(b"OggS"):
        return Sniffed("audio", "ogg")  # Ogg video (Theora) is told apart by the decode
    return None


def _video(head: bytes) -> Sniffed | None:
    if head[4:8] == b"ftyp":
        return Sniffed("video", "mov" if head[8:10] == b"qt" else "mp4")
    if head[4:8] in (b"moov", b"mdat", b"wide", b"free"):
        return Sniffed("video", "mov")
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return Sniffed("video", "webm" if b"webm" in head else "mkv")
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return Sniffed("video", "avi")
    return None
