"""Storage options: what the bridge reaches a table's files with, and what a caller may see.

The bridge uses its static ``storage.*`` options with the catalog's vended credentials winning over
them. A caller (pylance, lancedb, a REST client) is answered with the vended credentials, which the
catalog issued for exactly this table, and of the static options only those whose names are known
to hold no secret (``SHOWN_STATIC_OPTIONS``): a list of what is safe, never a filter on names that
look secret, which a new kind of secret would pass. In process (``share_static_credentials``) the
caller is the bridge's own user and gets every static option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

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


@dataclass(frozen=True)
class StorageOptions:
    """The static ``storage.*`` options of one bridge, and whether callers may see all of them."""

    static: Mapping[str, str] = field(repr=False)
    share_static: bool = False

    def for_bridge(self, vended: Mapping[str, str] | None = None) -> dict[str, str]:
        """What the bridge reaches files with: the static options, vended values winning."""
        return {**self.static, **(vended or {})}

    def for_caller(self, vended: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a caller is answered with: the vended credentials, and the static options that are
        safe to show (all of them with ``share_static``)."""
        static = (
            dict(self.static)
            if self.share_static
            else {key: value for key, value in self.static.items() if shown_to_callers(key, value)}
        )
        return {**static, **(vended or {})}
