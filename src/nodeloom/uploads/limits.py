"""What an account may upload, by plan: the size of one file, the pixels of an image or a
video frame, the length of audio or video, and the bytes all its assets may take.

Defaults per plan are ``DEFAULTS``; ``NODELOOM_UPLOAD_LIMITS`` overrides any field per plan.
The server-wide media limits (``max_image_pixels``, ``max_media_seconds``) still cap every
plan: a plan cannot allow what no node could read.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeloom.settings import UploadLimitsOverride

MB = 1024 * 1024
GB = 1024 * MB


@dataclass(frozen=True)
class UploadLimits:
    file_bytes: int
    storage_bytes: int
    pixels: int
    seconds: float

    def override(self, limits: UploadLimitsOverride | None) -> UploadLimits:
        if limits is None:
            return self
        return UploadLimits(
            limits.file_bytes if limits.file_bytes is not None else self.file_bytes,
            limits.storage_bytes if limits.storage_bytes is not None else self.storage_bytes,
            limits.pixels if limits.pixels is not None else self.pixels,
            limits.seconds if limits.seconds is not None else self.seconds,
        )


DEFAULTS: dict[str, UploadLimits] = {
    "free": UploadLimits(file_bytes=50 * MB, storage_bytes=1 * GB, pixels=25_000_000, seconds=120),
    "pro": UploadLimits(file_bytes=500 * MB, storage_bytes=50 * GB, pixels=40_000_000, seconds=600),
    "business": UploadLimits(
        file_bytes=2 * GB, storage_bytes=500 * GB, pixels=40_000_000, seconds=3600
    ),
    "enterprise": UploadLimits(
        file_bytes=5 * GB, storage_bytes=5000 * GB, pixels=100_000_000, seconds=4 * 3600
    ),
}


def resolve(
    plan: str,
    overrides: dict[str, UploadLimitsOverride],
    *,
    max_image_pixels: int,
    max_media_seconds: float,
) -> UploadLimits:
    """The limits of an account on ``plan`` (an unknown plan gets the free plan's)."""
    base = DEFAULTS.get(plan, DEFAULTS["free"]).override(overrides.get(plan))
    return UploadLimits(
        base.file_bytes,
        base.storage_bytes,
        min(base.pixels, max_image_pixels),
        min(base.seconds, max_media_seconds),
    )
