"""Assets: the shape shown, and the body of an update (rename, tags)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nodeloom.timestamps import Timestamp

AssetKind = Literal["image", "audio", "video"]
MAX_TAGS = 32
MAX_TAG = 64


class AssetOut(BaseModel):
    id: str
    name: str
    kind: AssetKind
    content_type: str = Field(description="image/png, audio/mpeg or video/mp4: what it became.")
    size_bytes: int = Field(description="Bytes of the stored file (after any conversion).")
    sha256: str = Field(description="Of the stored file: the same content is one asset.")
    source_format: str = Field(description="The format it was sent in (jpeg, wav, mov...).")
    source_sha256: str = Field(description="Of the bytes as they were sent.")
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    video_codec: str | None = None
    audio_codec: str | None = None
    tags: list[str]
    created_at: Timestamp
    download_url: str = Field(description="Signed, expiring URL of the file (no credential).")
    thumbnail_url: str | None = Field(
        default=None, description="Signed URL of a PNG of at most 256 px a side, or null."
    )


class AssetUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, min_length=1, max_length=255)
    tags: list[str] | None = Field(default=None, max_length=MAX_TAGS)

    @field_validator("tags")
    @classmethod
    def _clean_tags(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        cleaned: list[str] = []
        for tag in value:
            tag = tag.strip()
            if not tag or len(tag) > MAX_TAG:
                raise ValueError(f"a tag is 1 to {MAX_TAG} characters")
            if tag not in cleaned:
                cleaned.append(tag)
        return cleaned


class StorageOut(BaseModel):
    used_bytes: int
    quota_bytes: int
    file_bytes: int = Field(description="The largest file the account may upload.")


class TusUploadOut(BaseModel):
    """A resumable upload (tus): how far it is, and what it became."""

    id: str
    name: str | None
    length: int = Field(description="Upload-Length, the bytes declared at creation.")
    offset: int = Field(description="Bytes received and stored so far.")
    expires_at: Timestamp
    asset_id: str | None = Field(description="The asset made of it, once complete.")
    asset: AssetOut | None
    problem: dict[str, object] | None = Field(
        description="Why the complete file was refused (code, status, detail)."
    )
