"""Vended storage credentials: from what an Iceberg catalog answers to what Lance's object store reads.

A ``loadTable`` answer carries ``config`` and ``storage-credentials`` (each a ``prefix`` and a
``config``). The credential whose prefix is the longest match for the table location wins, and its
values win over ``config``, as the Iceberg REST spec orders them. The Iceberg property names are
then mapped to Lance storage options, and the expiry to ``expires_at_millis``, which tells pylance
when to ask the namespace again (``describe_table`` with ``vend_credentials=true``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Iceberg storage property → Lance (object_store) storage option.
ICEBERG_TO_LANCE = {
    "s3.access-key-id": "aws_access_key_id",
    "s3.secret-access-key": "aws_secret_access_key",
    "s3.session-token": "aws_session_token",
    "s3.endpoint": "aws_endpoint",
    "s3.region": "aws_region",
    "client.region": "aws_region",
    "gcs.oauth2.token": "google_storage_token",
    "gcs.project-id": "google_project_id",
}
# Expiry properties (milliseconds since the epoch) → expires_at_millis.
EXPIRY_KEYS = ("s3.session-token-expires-at-ms", "gcs.oauth2.token-expires-at")
ADLS_SAS_TOKEN = "adls.sas-token."  # adls.sas-token.<account host>
ADLS_SAS_EXPIRY = "adls.sas-token-expires-at-ms."


def best_credential(storage_credentials: Iterable[Mapping[str, Any]], location: str) -> dict[str, str]:
    """The config of the storage credential with the longest prefix that the location starts with."""
    best: Mapping[str, Any] | None = None
    for credential in storage_credentials:
        prefix = str(credential.get("prefix", ""))
        if location.startswith(prefix) and (best is None or len(prefix) > len(str(best.get("prefix", "")))):
            best = credential
    return {str(k): str(v) for k, v in (best or {}).get("config", {}).items()}


def lance_storage_options(iceberg_properties: Mapping[str, str]) -> dict[str, str]:
    """Lance storage options for Iceberg storage properties (unknown keys are left out)."""
    options: dict[str, str] = {}
    for key, value in iceberg_properties.items():
        if key in ICEBERG_TO_LANCE:
            options[ICEBERG_TO_LANCE[key]] = value
        elif key.startswith(ADLS_SAS_TOKEN):
            options["azure_storage_account_name"] = key[len(ADLS_SAS_TOKEN) :].split(".", 1)[0]
            options["azure_storage_sas_token"] = value
    if iceberg_properties.get("s3.path-style-access", "").lower() == "true":
        options["aws_virtual_hosted_style_request"] = "false"
    if options.get("aws_endpoint", "").startswith("http://"):
        options["allow_http"] = "true"
    expiries = [int(v) for k, v in iceberg_properties.items() if k in EXPIRY_KEYS or k.startswith(ADLS_SAS_EXPIRY)]
    if expiries:
        options["expires_at_millis"] = str(min(expiries))
    return options


def vended_storage_options(
    config: Mapping[str, str], storage_credentials: Iterable[Mapping[str, Any]], location: str
) -> dict[str, str]:
    """Lance storage options from a ``loadTable`` answer's ``config`` and ``storage-credentials``."""
    return lance_storage_options({**config, **best_credential(storage_credentials, location)})
