"""Vended storage credentials (an S3-compatible server on loopback) and catalog auth (OAuth2
client credentials with short-lived tokens, bearer tokens), against the local catalog's switches."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace import DescribeTableRequest, ListNamespacesRequest
from lance_namespace.errors import UnauthenticatedError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.storage.credentials import best_credential, lance_storage_options, vended_storage_options
from lance_iceberg_ns.testing import LocalCatalog, VendedCredentials, local_catalog

from ..conftest import RequestCounter

VENDED_SECRET = "vended-SECRET-9f2c"
CLIENT_SECRET = "client-SECRET-41aa"


@pytest.fixture
def vending_catalog(s3_endpoint: str, tmp_path: Path) -> Iterator[LocalCatalog]:
    """A catalog that vends S3 credentials living three seconds."""
    vended = VendedCredentials(
        prefix="s3://lake/",
        config={
            "s3.access-key-id": "vended-AK",
            "s3.secret-access-key": VENDED_SECRET,
            "s3.session-token": "vended-session",
            "s3.endpoint": s3_endpoint,
            "s3.region": "us-east-1",
            "s3.path-style-access": "true",
        },
        lifetime_ms=3000,
    )
    with local_catalog(tmp_path / "catalog", prefix_style="defaults", vended_credentials=vended) as catalog:
        yield catalog


class CountingNamespace(IcebergLanceNamespace):
    """The bridge, counting the describe_table calls pylance makes (from Rust, to refresh)."""

    def __init__(self, **properties: str) -> None:
        super().__init__(**properties)
        self.describe_requests: list[Any] = []

    def describe_table(self, request: Any = None) -> Any:
        self.describe_requests.append(request)
        return super().describe_table(request)


def test_pylance_reads_and_writes_s3_with_vended_credentials_and_refreshes_them(vending_catalog: LocalCatalog) -> None:
    ns = CountingNamespace(endpoint=vending_catalog.endpoint, root="s3://lake/lance", vend_credentials="true")
    ns.create_namespace({"id": ["wh", "db"]})
    table_id = ["wh", "db", "events"]
    lance.write_dataset(
        pa.table({"id": list(range(5000))}), namespace_client=ns, table_id=table_id, max_rows_per_file=500
    )
    lance.write_dataset(pa.table({"id": [-1]}), namespace_client=ns, table_id=table_id, mode="append")

    described = ns.describe_table(DescribeTableRequest(id=table_id, vend_credentials=True))
    assert described.location is not None and described.location.startswith("s3://lake/lance/wh/db/events-")
    options = described.storage_options or {}
    assert options["aws_access_key_id"] == "vended-AK" and options["aws_virtual_hosted_style_request"] == "false"
    assert int(options["expires_at_millis"]) > time.time() * 1000

    dataset = lance.dataset(namespace_client=ns, table_id=table_id)
    ns.describe_requests.clear()
    rows, deadline = 0, time.monotonic() + 4.5  # longer than the credentials live
    while time.monotonic() < deadline:
        rows += sum(batch.num_rows for batch in dataset.to_batches(batch_size=1000))
        time.sleep(0.25)
    assert rows > 0 and rows % 5001 == 0
    refreshes = [r for r in ns.describe_requests if not isinstance(r, DescribeTableRequest)]
    assert refreshes, "pylance never asked for fresh credentials"
    assert all(dict(r).get("vend_credentials") for r in refreshes)  # pylance's own dict requests
    ns.close()


def test_without_vend_credentials_only_static_options_are_returned(vending_catalog: LocalCatalog) -> None:
    with IcebergLanceNamespace(
        endpoint=vending_catalog.endpoint, root="s3://lake/plain", **{"storage.region": "eu-1"}
    ) as ns:
        ns.create_namespace({"id": ["wh", "plain"]})
        ns.declare_table({"id": ["wh", "plain", "t"]})
        assert ns.describe_table({"id": ["wh", "plain", "t"]}).storage_options == {"region": "eu-1"}
        vended = ns.describe_table({"id": ["wh", "plain", "t"], "vend_credentials": True}).storage_options or {}
        assert vended["region"] == "eu-1" and vended["aws_secret_access_key"] == VENDED_SECRET


def test_credentials_endpoint_is_used_where_advertised(
    vending_catalog: LocalCatalog, request_counter: RequestCounter
) -> None:
    with IcebergLanceNamespace(endpoint=vending_catalog.endpoint, root="s3://lake/ep") as ns:
        ns.create_namespace({"id": ["wh", "ep"]})
        ns.declare_table({"id": ["wh", "ep", "t"]})
        request_counter.reset()
        ns.describe_table({"id": ["wh", "ep", "t"], "vend_credentials": True})
    assert any(url.endswith("/tables/t/credentials") for _, url in request_counter.requests)


def test_no_secret_in_logs_repr_errors_or_catalog_properties(
    vending_catalog: LocalCatalog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with IcebergLanceNamespace(endpoint=vending_catalog.endpoint, root="s3://lake/sec", vend_credentials="true") as ns:
        ns.create_namespace({"id": ["wh", "sec"]})
        # lancedb hands its storage options to declare_table as properties
        declared = ns.declare_table(
            {"id": ["wh", "sec", "t"], "properties": {"aws_secret_access_key": VENDED_SECRET, "owner": "ana"}}
        )
        described = ns.describe_table({"id": ["wh", "sec", "t"], "vend_credentials": True})
        texts = [caplog.text, repr(ns), ns.namespace_id(), json.dumps(described.properties), repr(declared.properties)]
    assert described.properties["owner"] == "ana"
    assert all(VENDED_SECRET not in text for text in texts)


# --- OAuth2 and bearer tokens ---------------------------------------------------------------


@pytest.fixture
def oauth_catalog(tmp_path: Path) -> Iterator[LocalCatalog]:
    """Tokens that really live one second, though the server says they live an hour."""
    with local_catalog(
        tmp_path / "catalog",
        prefix_style="defaults",
        oauth_clients={"spark-job": CLIENT_SECRET},
        token_lifetime_seconds=1,
        advertised_token_lifetime_seconds=3600,
    ) as catalog:
        yield catalog


def test_wrong_client_secret_is_unauthenticated(oauth_catalog: LocalCatalog, tmp_path: Path) -> None:
    ns = IcebergLanceNamespace(endpoint=oauth_catalog.endpoint, root=str(tmp_path), credential="spark-job:wrong")
    with pytest.raises(UnauthenticatedError) as caught:
        ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
    assert caught.value.code == 16
    assert "wrong" not in str(caught.value) and CLIENT_SECRET not in str(caught.value)


def test_no_token_at_all_is_unauthenticated(oauth_catalog: LocalCatalog, tmp_path: Path) -> None:
    with pytest.raises(UnauthenticatedError):
        IcebergLanceNamespace(endpoint=oauth_catalog.endpoint, root=str(tmp_path)).namespace_exists({"id": ["wh"]})


def test_expired_token_is_refreshed_transparently(
    oauth_catalog: LocalCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    credential = f"spark-job:{CLIENT_SECRET}"
    with IcebergLanceNamespace(endpoint=oauth_catalog.endpoint, root=str(tmp_path), credential=credential) as ns:
        ns.create_namespace({"id": ["wh", "db"]})
        ns.declare_table({"id": ["wh", "db", "t"]})
        time.sleep(1.3)  # the server now answers 419 to the token the client still trusts
        assert ns.describe_table({"id": ["wh", "db", "t"]}).location
        time.sleep(1.3)
        assert ns.list_namespaces(ListNamespacesRequest(id=["wh"])).namespaces == ["db"]
        texts = [caplog.text, repr(ns), ns.namespace_id()]
    assert all(CLIENT_SECRET not in text for text in texts)
    assert "client:spark-job" in texts[2]


def test_token_is_refreshed_before_it_expires(tmp_path: Path, request_counter: RequestCounter) -> None:
    with local_catalog(
        tmp_path / "catalog", prefix_style="defaults", oauth_clients={"app": CLIENT_SECRET}, token_lifetime_seconds=2
    ) as catalog:
        credential = f"app:{CLIENT_SECRET}"
        with IcebergLanceNamespace(
            endpoint=catalog.endpoint, root=str(tmp_path), credential=credential, oauth2_refresh_margin_seconds="1"
        ) as ns:
            ns.create_namespace({"id": ["wh", "db"]})
            request_counter.reset()
            for _ in range(3):
                time.sleep(0.8)
                ns.describe_namespace({"id": ["wh", "db"]})
    token_requests = [url for _, url in request_counter.requests if url.endswith("/oauth/tokens")]
    assert len(token_requests) >= 1  # a new token fetched ahead of expiry, without a failed request


def test_static_bearer_token(tmp_path: Path) -> None:
    with local_catalog(tmp_path / "catalog", prefix_style="defaults", auth_tokens=["static-token"]) as catalog:
        with IcebergLanceNamespace(endpoint=catalog.endpoint, root=str(tmp_path), auth_token="static-token") as ns:
            ns.create_namespace({"id": ["wh", "db"]})
        with pytest.raises(UnauthenticatedError):
            IcebergLanceNamespace(endpoint=catalog.endpoint, root=str(tmp_path), auth_token="other").namespace_exists(
                {"id": ["wh", "db"]}
            )


# --- the mapping ----------------------------------------------------------------------------


def test_longest_matching_prefix_wins() -> None:
    credentials = [
        {"prefix": "s3://lake/", "config": {"s3.access-key-id": "broad"}},
        {"prefix": "s3://lake/team/", "config": {"s3.access-key-id": "narrow"}},
        {"prefix": "s3://other/", "config": {"s3.access-key-id": "elsewhere"}},
    ]
    assert best_credential(credentials, "s3://lake/team/t")["s3.access-key-id"] == "narrow"
    assert best_credential(credentials, "s3://lake/x")["s3.access-key-id"] == "broad"
    assert best_credential(credentials, "gs://nowhere") == {}


def test_vended_values_win_over_config() -> None:
    options = vended_storage_options(
        {"s3.region": "us-east-1", "s3.access-key-id": "from-config"},
        [{"prefix": "s3://lake/", "config": {"s3.access-key-id": "from-credential"}}],
        "s3://lake/t",
    )
    assert options == {"aws_region": "us-east-1", "aws_access_key_id": "from-credential"}


def test_gcs_and_adls_properties_map_to_lance_options() -> None:
    gcs = lance_storage_options({"gcs.oauth2.token": "ya29", "gcs.oauth2.token-expires-at": "1700000000000"})
    assert gcs == {"google_storage_token": "ya29", "expires_at_millis": "1700000000000"}
    adls = lance_storage_options(
        {
            "adls.sas-token.acct.dfs.core.windows.net": "sv=2024&sig=x",
            "adls.sas-token-expires-at-ms.acct.dfs.core.windows.net": "1700000000001",
        }
    )
    assert adls == {
        "azure_storage_account_name": "acct",
        "azure_storage_sas_token": "sv=2024&sig=x",
        "expires_at_millis": "1700000000001",
    }


def test_serve_refuses_to_start_with_client_credentials_the_catalog_refuses(
    oauth_catalog: LocalCatalog, tmp_path: Path
) -> None:
    """It started, reported ready, and answered every request 401, as though the callers were at
    fault; now it stops before serving (exit 6), naming neither the secret nor the token URL."""
    import os
    import subprocess
    import sys

    from lance_iceberg_ns.cli.serving import check_own_credential
    from lance_iceberg_ns.config.settings import Settings

    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", oauth_catalog.endpoint]
    command += ["--root", str(tmp_path), "--port", "0", "--catalog-wait", "10"]
    environment = {**os.environ, "LANCE_ICEBERG_CREDENTIAL": "spark-job:wrong-secret-9"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, check=False)
    assert done.returncode == 6, done.stderr
    assert "refused this server's own client credentials" in done.stderr and "not serving" in done.stderr
    assert "wrong-secret-9" not in done.stderr + done.stdout and "/v1/oauth/tokens" not in done.stderr
    good = Settings.from_properties({"endpoint": oauth_catalog.endpoint, "credential": f"spark-job:{CLIENT_SECRET}"})
    check_own_credential(good)  # a token: nothing to refuse
