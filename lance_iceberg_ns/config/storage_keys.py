"""Storage option names: which Lance storage options are safe to show a caller, and how an
Iceberg catalog's storage properties are named for Lance. The configuration reads ``storage.*``
and pyiceberg's storage properties with them; ``storage.options`` and ``storage.credentials`` apply
them to the options the bridge uses and answers with."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from lance_namespace.errors import InvalidInputError

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


# Lance (object_store) options that say where and how to connect, never who connects.
SHOWN_STATIC_OPTIONS = frozenset(
    {
        # where
        "region",
        "aws_region",
        "aws_default_region",
        "endpoint",
        "aws_endpoint",
        "endpoint_url",
        "aws_endpoint_url",
        "bucket",
        "aws_bucket",
        "bucket_name",
        "google_bucket",
        "google_bucket_name",
        "account_name",
        "azure_storage_account_name",
        "azure_endpoint",
        "azure_storage_endpoint",
        "container_name",
        "azure_container_name",
        "google_project_id",
        # how
        "allow_http",
        "aws_allow_http",
        "allow_invalid_certificates",
        "virtual_hosted_style_request",
        "aws_virtual_hosted_style_request",
        "s3_express",
        "aws_s3_express",
        "unsigned_payload",
        "aws_unsigned_payload",
        "checksum_algorithm",
        "aws_checksum_algorithm",
        "skip_signature",
        "aws_skip_signature",
        "request_payer",
        "aws_request_payer",
        "server_side_encryption",
        "aws_server_side_encryption",
        "sse_kms_key_id",
        "aws_sse_kms_key_id",
        "sse_bucket_key_enabled",
        "aws_sse_bucket_key_enabled",
        "use_emulator",
        "azure_storage_use_emulator",
        "use_fabric_endpoint",
        "azure_use_fabric_endpoint",
        "timeout",
        "connect_timeout",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "http1_only",
        "http2_only",
        "user_agent",
        "client_max_retries",
        "client_retry_timeout",
        "download_retry_count",
        "block_size",
        "expires_at_millis",
    }
)


def shown_to_callers(key: str, value: str) -> bool:
    """Whether a static option may be shown to a caller: its name is known to hold no secret, and
    its value names no user (``http://user:pass@host``, ``http://TOKEN@host``, with or without a
    scheme) and has no query (``https://host/?sig=...``, where signatures travel). Such a value is
    withheld whole rather than shown without those parts: it is the bridge's own way in, where a
    caller without those credentials would only be refused."""
    return key.lower() in SHOWN_STATIC_OPTIONS and "@" not in value and "?" not in value


def url_user_info(value: str) -> list[str]:
    """The secrets a URL carries before its ``@``: ``user:pass`` whole and the password, or the
    user alone when it stands without a password (``http://TOKEN@host``); none for other values."""
    if "@" not in value or "://" not in value:
        return []
    try:
        parts = urlsplit(value)
        user, password = parts.username, parts.password
    except ValueError:  # an unparsable URL: everything between the scheme and the last @
        return [value.split("://", 1)[1].rsplit("@", 1)[0]]
    if password:
        return [parts.netloc.rsplit("@", 1)[0], password]
    return [user] if user else []


ENDPOINT_OPTIONS = frozenset(
    {"endpoint", "aws_endpoint", "endpoint_url", "aws_endpoint_url", "azure_endpoint", "azure_storage_endpoint"}
)
_ALLOW_HTTP_OPTIONS = frozenset({"allow_http", "aws_allow_http", "azure_allow_http", "google_allow_http"})


def refuse_plain_http_unallowed(storage_options: Mapping[str, str]) -> None:
    """InvalidInputError for an ``http://`` endpoint without ``allow_http=true``: the object store
    refuses every request to it, and each would fail as the store being unreachable (a retry
    never helps), long after the configuration was read."""
    plain = sorted(key for key in ENDPOINT_OPTIONS if str(storage_options.get(key, "")).lower().startswith("http://"))
    allowed = any(str(storage_options.get(key, "")).strip().lower() == "true" for key in _ALLOW_HTTP_OPTIONS)
    if plain and not allowed:
        raise InvalidInputError(
            f"storage.{plain[0]} is a plain http:// URL, which the object store refuses unless "
            "storage.allow_http=true is set too"
        )


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


# Lance storage option (and object_store's shorter alias) → pyiceberg FileIO property: the files
# pyiceberg writes for the bridge (a managed table's manifest lists) reach the same store, with the
# same settings, as the Lance data.
LANCE_TO_ICEBERG = {
    "aws_access_key_id": "s3.access-key-id",
    "access_key_id": "s3.access-key-id",
    "aws_secret_access_key": "s3.secret-access-key",
    "secret_access_key": "s3.secret-access-key",
    "aws_session_token": "s3.session-token",
    "session_token": "s3.session-token",
    "aws_endpoint": "s3.endpoint",
    "endpoint": "s3.endpoint",
    "aws_region": "s3.region",
    "region": "s3.region",
    "google_storage_token": "gcs.oauth2.token",
    "google_project_id": "gcs.project-id",
    "azure_storage_account_name": "adls.account-name",
    "account_name": "adls.account-name",
    "azure_storage_account_key": "adls.account-key",
    "azure_storage_access_key": "adls.account-key",
    "azure_storage_master_key": "adls.account-key",
    "account_key": "adls.account-key",
    "access_key": "adls.account-key",
    "master_key": "adls.account-key",
    "azure_storage_sas_token": "adls.sas-token",
    "azure_storage_sas_key": "adls.sas-token",
    "sas_token": "adls.sas-token",
    "sas_key": "adls.sas-token",
}
# A service principal: pyiceberg takes the three together or not at all (object_store also takes a
# client id alone, for a managed identity, which pyiceberg's FileIO finds by itself).
AZURE_CLIENT_SECRET_CREDENTIAL = {
    "adls.client-id": ("azure_storage_client_id", "azure_client_id", "client_id"),
    "adls.client-secret": ("azure_storage_client_secret", "azure_client_secret", "client_secret"),
    "adls.tenant-id": (
        "azure_storage_tenant_id",
        "azure_storage_authority_id",
        "azure_tenant_id",
        "azure_authority_id",
        "tenant_id",
        "authority_id",
    ),
}
AZURE_ENDPOINT_OPTIONS = ("azure_storage_endpoint", "azure_endpoint", "endpoint")
ARROW_FILE_IO = "pyiceberg.io.pyarrow.PyArrowFileIO"


def file_io_properties(storage_options: Mapping[str, str]) -> dict[str, str]:
    """pyiceberg FileIO properties for the bridge's ``storage.*`` options, so that one
    configuration reaches every file the bridge writes (``iceberg.*`` given explicitly wins)."""
    properties = {LANCE_TO_ICEBERG[key]: value for key, value in storage_options.items() if key in LANCE_TO_ICEBERG}
    virtual_hosted = str(storage_options.get("aws_virtual_hosted_style_request", "")).lower()
    if virtual_hosted == "false" or (properties.get("s3.endpoint") and virtual_hosted != "true"):
        # an endpoint of one's own (MinIO, SeaweedFS, a proxy) is addressed by path, as Lance does
        properties["s3.path-style-access"] = "true"
    properties |= _azure_credential(storage_options) | _azure_authorities(storage_options, properties)
    if any(key.startswith("adls.") for key in properties):
        # pyiceberg prefers fsspec's FileIO for abfss://, which needs adlfs and reads none of the
        # authorities: pyarrow's reads what is derived here, as it reads it for s3:// and gs://
        properties["py-io-impl"] = ARROW_FILE_IO
    return properties


def _azure_credential(storage_options: Mapping[str, str]) -> dict[str, str]:
    given = {
        prop: next((storage_options[name] for name in names if storage_options.get(name)), "")
        for prop, names in AZURE_CLIENT_SECRET_CREDENTIAL.items()
    }
    return given if all(given.values()) else {}


def _azure_authorities(storage_options: Mapping[str, str], properties: Mapping[str, str]) -> dict[str, str]:
    """pyarrow's Azure file system addresses ``<scheme>://<authority>/<account>/`` (an emulator,
    path style) or ``<scheme>://<account><authority>/`` (an authority starting with a dot), where
    object_store puts the container after its endpoint: an endpoint of either form becomes the
    same authority and scheme, another form stays unmapped (``iceberg.adls.*`` then says it)."""
    account = properties.get("adls.account-name")
    endpoint = next((storage_options[name] for name in AZURE_ENDPOINT_OPTIONS if storage_options.get(name)), "")
    if not account or not endpoint:
        return {}
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
    except ValueError:
        return {}
    if parts.scheme not in ("http", "https") or not host or parts.query or parts.username is not None:
        return {}
    path = parts.path.strip("/")
    if path == account:  # http://127.0.0.1:10000/devstoreaccount1
        blob = dfs = parts.netloc
    elif not path and parts.netloc.startswith(f"{account}."):  # https://lake.blob.core.windows.net
        blob = parts.netloc[len(account) :]
        dfs = blob.replace(".blob.", ".dfs.", 1) if ".blob." in blob else ""
    else:
        return {}
    authorities = {"adls.blob-storage-authority": blob, "adls.blob-storage-scheme": parts.scheme}
    if dfs:
        authorities |= {"adls.dfs-storage-authority": dfs, "adls.dfs-storage-scheme": parts.scheme}
    return authorities
