"""A real S3-protocol server on 127.0.0.1 for tests: moto's server mode, in a thread of the
test process (no outside service), with a fresh bucket per test."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.server import free_port

ACCESS_KEY = "nodeloom-test"
SECRET_KEY = "nodeloom-test-secret"


@dataclass(frozen=True)
class S3Server:
    url: str

    def new_bucket(self) -> str:
        name = f"nodeloom-{uuid.uuid4().hex[:16]}"
        boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        ).create_bucket(Bucket=name)
        return name

    def settings(self, bucket: str) -> dict[str, object]:
        return {
            "artifact_store": "s3",
            "s3_bucket": bucket,
            "s3_endpoint_url": self.url,
            "s3_access_key_id": ACCESS_KEY,
            "s3_secret_access_key": SECRET_KEY,
        }


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    port = free_port()
    # One log line per request would bury a failing test's own output.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.stop()
