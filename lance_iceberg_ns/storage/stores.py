"""How the bridge reaches an object store: an obstore store (Lance's own object_store) for a
bucket, configured from Lance's storage options the way Lance reads them. ``files`` does the
reading and writing through it."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

from obstore.exceptions import GenericError, UnknownConfigurationKeyError
from obstore.store import ObjectStore, from_url

KEPT_STORES = 64  # stores (and their connection pools) kept, one per bucket and set of options

# Lance storage options that object_store takes as client options; the rest are the store's own
# configuration (the same names in Lance and in object_store), but for Lance's own bookkeeping.
_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "timeout",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "user_agent",
        "http1_only",
        "http2_only",
    }
)
_LANCE_ONLY_OPTIONS = frozenset({"expires_at_millis", "client_max_retries", "client_retry_timeout"})
DEFAULT_MAX_RETRIES = 3  # as Lance's client_max_retries: an unreachable store fails in seconds
DEFAULT_RETRY_TIMEOUT_SECONDS = 30.0


def object_store(location: str, storage_options: Mapping[str, str]) -> tuple[ObjectStore, str]:
    """An obstore store for the bucket (or container) of ``location``, and the key of ``location``
    in it, configured with the Lance storage options as Lance reads them: an option the store
    does not know is left out, an alias given beside its name is taken once, Lance's retry options
    bound the retries, and an S3 store without keys finds them as boto3 does (profiles, SSO).
    Stores are kept (the most recently used few) so that their connections are reused."""
    scheme, rest = location.split("://", 1)
    bucket, _, key = rest.partition("/")
    return _store(scheme, bucket, tuple(sorted(storage_options.items()))), unquote(key).strip("/")


@functools.lru_cache(maxsize=KEPT_STORES)
def _store(scheme: str, bucket: str, options: tuple[tuple[str, str], ...]) -> ObjectStore:
    storage_options = dict(options)
    client = {k: v for k, v in storage_options.items() if k in _CLIENT_OPTIONS}
    config = {k: v for k, v in storage_options.items() if k not in _CLIENT_OPTIONS | _LANCE_ONLY_OPTIONS}
    retry = {
        "max_retries": int(storage_options.get("client_max_retries") or DEFAULT_MAX_RETRIES),
        "retry_timeout": timedelta(
            seconds=float(storage_options.get("client_retry_timeout") or DEFAULT_RETRY_TIMEOUT_SECONDS)
        ),
    }
    extra: dict[str, Any] = {}
    keys_given = {_plain_option(name) for name in config} & {"access_key_id", "skip_signature"}
    if scheme in ("s3", "s3a") and not keys_given and not os.environ.get("AWS_ACCESS_KEY_ID"):
        extra["credential_provider"] = _boto3_credentials()
    for _ in range(len(config) + 1):
        try:
            return from_url(  # type: ignore[call-overload,no-any-return]
                f"{scheme}://{bucket}", config=config, client_options=client, retry_config=retry, **extra
            )
        except UnknownConfigurationKeyError as exc:  # another store's option, or Lance's alone
            unknown = _UNKNOWN_KEY.search(str(exc))
            if unknown is None or unknown[1] not in config:
                raise
            config.pop(unknown[1])
        except GenericError as exc:  # an option given by its name and by an alias
            duplicate = _DUPLICATE_KEY.search(str(exc))
            twins = [k for k in config if duplicate and _plain_option(k) == _plain_option(duplicate[1])]
            if len(twins) < 2:
                raise
            config.pop(twins[-1])
    raise AssertionError("unreachable: every pass drops an option or returns")


_UNKNOWN_KEY = re.compile(r"Configuration key: '([^']+)' is not valid")
_DUPLICATE_KEY = re.compile(r"Duplicate key (\S+) provided")


def _plain_option(name: str) -> str:
    """An option's name without its store prefix or ``_url`` (``aws_endpoint_url`` is ``endpoint``)."""
    for prefix in ("aws_", "google_", "azure_storage_", "azure_"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name.removesuffix("_url")


@functools.lru_cache(maxsize=1)
def _boto3_credentials() -> Any:
    """boto3's credential chain (profiles, SSO, containers), as Lance finds credentials; None
    without boto3, and obstore then reads the environment and the instance's metadata."""
    try:
        from obstore.auth.boto3 import Boto3CredentialProvider

        return Boto3CredentialProvider()
    except (ImportError, ValueError):  # no boto3, or no credentials it can find
        return None
