"""The SigV4 signature of artifacts/s3_multipart.py is the one botocore computes for the
same request (the test server does not check signatures, so this is where they are
checked), and the multipart calls work against the S3-protocol test server."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from nodeloom.artifacts.s3_multipart import EMPTY_SHA256, Credentials, MultipartClient, sign
from nodeloom.settings import Settings
from tests.s3 import S3Server
from tests.s3 import s3_server as s3_server  # the fixture

NOW = datetime(2026, 11, 29, 12, 34, 56, tzinfo=UTC)


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("POST", "http://127.0.0.1:9000/bucket/prefix/uploads/abc?uploads=", b""),
        (
            "PUT",
            "http://127.0.0.1:9000/bucket/uploads/abc?partNumber=2&uploadId=x%2By%3D%3D",
            b"part bytes",
        ),
        ("GET", "https://bucket.s3.eu-west-1.amazonaws.com/uploads/a%20b", b""),
    ],
)
def test_the_signature_is_botocores(
    method: str, url: str, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda *a, **k: NOW)

    digest = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    ours = sign(method, httpx.URL(url), {}, digest, Credentials("AKID", "SECRET"), "eu-west-1", NOW)
    request = AWSRequest(method=method, url=url, data=body)
    request.headers["X-Amz-Content-SHA256"] = digest
    auth = S3SigV4Auth(BotoCredentials("AKID", "SECRET"), "s3", "eu-west-1")
    auth.add_auth(request)
    theirs = request.headers["Authorization"]
    assert ours["authorization"] == theirs


async def test_a_multipart_upload_round_trip(s3_server: S3Server, tmp_path: object) -> None:
    settings = Settings(data_dir=tmp_path, **s3_server.settings(s3_server.new_bucket()))  # type: ignore[arg-type]
    client = MultipartClient(settings)
    upload_id = await client.create("uploads/one")
    first = b"a" * (5 * 1024 * 1024)
    etags = [
        await client.upload_part("uploads/one", upload_id, 1, first),
        await client.upload_part("uploads/one", upload_id, 2, b"tail"),
    ]
    await client.complete("uploads/one", upload_id, etags)
    got = b"".join([chunk async for chunk in client.get("uploads/one")])
    assert got == first + b"tail"
    await client.delete("uploads/one")
    await client.abort("uploads/two", "no-such-upload")
    await client.http.aclose()
