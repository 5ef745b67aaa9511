"""S3 multipart uploads driven one request at a time, for resumable uploads that any
replica continues (uploads/tus_parts.py): the upload id and the parts' ETags live in the
database, not in a process.

obstore uploads in parts too, but only within one call of one process; it has no way to
add a part to an upload another process started. These few calls (create, upload part,
complete, abort, get, delete) are plain S3 REST requests over httpx, signed with AWS
Signature Version 4. Credentials are the ones the artifact store is configured with
(``NODELOOM_S3_ACCESS_KEY_ID`` / ``NODELOOM_S3_SECRET_ACCESS_KEY``), else the usual
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` environment.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

import httpx

from nodeloom.settings import Settings

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_UPLOAD_ID = re.compile(r"<UploadId>([^<]+)</UploadId>")


class S3RequestFailed(Exception):
    """The object store answered an error."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    session_token: str | None = None


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(
    method: str,
    url: httpx.URL,
    headers: dict[str, str],
    payload_sha256: str,
    credentials: Credentials,
    region: str,
    now: datetime,
) -> dict[str, str]:
    """``headers`` with the SigV4 ones added (``x-amz-date``, ``x-amz-content-sha256``,
    ``Authorization``): what S3 checks the request against."""
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    signed = {k.lower(): v.strip() for k, v in headers.items()}
    signed["host"] = url.netloc.decode()
    signed["x-amz-date"] = amz_date
    signed["x-amz-content-sha256"] = payload_sha256
    if credentials.session_token:
        signed["x-amz-security-token"] = credentials.session_token
    names = sorted(signed)
    query = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in url.params.multi_items()
    )
    canonical = "\n".join(
        [
            method,
            quote(url.path, safe="/-_.~"),
            "&".join(f"{k}={v}" for k, v in query),
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            payload_sha256,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(
        _hmac(_hmac(_hmac(f"AWS4{credentials.secret_key}".encode(), day), region), "s3"),
        "aws4_request",
    )
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {k: v for k, v in signed.items() if k != "host"}
    out["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out


def credentials_of(settings: Settings) -> Credentials:
    if settings.s3_access_key_id and settings.s3_secret_access_key is not None:
        return Credentials(
            settings.s3_access_key_id, settings.s3_secret_access_key.get_secret_value()
        )
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise ValueError(
            "Resumable uploads to S3 need NODELOOM_S3_ACCESS_KEY_ID and "
            "NODELOOM_S3_SECRET_ACCESS_KEY (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        )
    return Credentials(access, secret, os.environ.get("AWS_SESSION_TOKEN"))


class MultipartClient:
    """Multipart uploads into the artifact store's bucket, under its prefix."""

    def __init__(self, settings: Settings, http: httpx.AsyncClient | None = None) -> None:
        if not settings.s3_bucket:
            raise ValueError("NODELOOM_S3_BUCKET is required when NODELOOM_ARTIFACT_STORE=s3")
        self.region = settings.s3_region
        self.credentials = credentials_of(settings)
        if settings.s3_endpoint_url:
            self.base = f"{settings.s3_endpoint_url.rstrip('/')}/{settings.s3_bucket}"
        else:
            self.base = f"https://{settings.s3_bucket}.s3.{settings.s3_region}.amazonaws.com"
        self.prefix = settings.s3_prefix.strip("/")
        self.http = http or httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    async def _send(
        self,
        method: str,
        name: str,
        params: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        stream: bool = False,
        ok: tuple[int, ...] = (200,),
    ) -> httpx.Response:
        url = httpx.URL(f"{self.base}/{quote(self.key(name), safe='/-_.~')}", params=params)
        digest = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        headers = sign(method, url, {}, digest, self.credentials, self.region, datetime.now(UTC))
        request = self.http.build_request(method, url, headers=headers, content=body or None)
        response = await self.http.send(request, stream=stream)
        if response.status_code not in ok:
            text = (await response.aread())[:500].decode("utf-8", "replace")
            await response.aclose()
            raise S3RequestFailed(f"S3 {method} answered {response.status_code}: {text}")
        return response

    async def create(self, name: str) -> str:
        """A new multipart upload of the object ``name``: its upload id."""
        response = await self._send("POST", name, {"uploads": ""})
        found = _UPLOAD_ID.search(response.text)
        if found is None:
            raise S3RequestFailed("S3 answered a multipart upload without an UploadId")
        return found.group(1)

    async def upload_part(self, name: str, upload_id: str, number: int, data: bytes) -> str:
        """Part ``number`` (from 1): its ETag."""
        params = {"partNumber": str(number), "uploadId": upload_id}
        response = await self._send("PUT", name, params, data)
        etag = str(response.headers.get("etag") or "")
        if not etag:
            raise S3RequestFailed("S3 answered a part without an ETag")
        return etag

    async def complete(self, name: str, upload_id: str, etags: list[str]) -> None:
        parts = "".join(
            f"<Part><PartNumber>{i}</PartNumber><ETag>{etag}</ETag></Part>"
            for i, etag in enumerate(etags, start=1)
        )
        body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
        response = await self._send("POST", name, {"uploadId": upload_id}, body)
        # S3 may answer 200 and report the failure in the body.
        if "<Error>" in response.text:
            raise S3RequestFailed(f"S3 refused to complete the upload: {response.text[:500]}")

    async def abort(self, name: str, upload_id: str) -> None:
        await self._send("DELETE", name, {"uploadId": upload_id}, ok=(200, 204, 404))

    async def get(self, name: str) -> AsyncIterator[bytes]:
        response = await self._send("GET", name, stream=True)
        try:
            async for chunk in response.aiter_bytes(1 << 20):
                yield chunk
        finally:
            await response.aclose()

    async def delete(self, name: str) -> None:
        await self._send("DELETE", name, ok=(200, 204, 404))
