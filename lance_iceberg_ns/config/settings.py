"""Namespace properties, parsed once into typed settings.

Every property, its parser, default and meaning is one entry of ``properties.PROPERTIES``
(docs/configuration.md shows that table); ``Settings`` holds what they parse to, with the
``storage.*`` and ``iceberg.*`` families split off, and keeps secrets out of what it shows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lance_iceberg_ns.config.properties import (
    ICEBERG_PREFIX,
    KNOWN_KEYS,
    PROPERTIES,
    STORAGE_PREFIX,
    default_of,
    integer,
    parse_properties,
)
from lance_iceberg_ns.config.storage_keys import (
    file_io_properties,
    refuse_plain_http_unallowed,
    shown_to_callers,
    url_user_info,
)

__all__ = ["ICEBERG_PREFIX", "KNOWN_KEYS", "STORAGE_PREFIX", "Settings", "looks_secret"]

logger = logging.getLogger(__name__)

# a URL's user and password, whoever gave them (a caller's location, a catalog's answer); every part
# bounded, so that a long message (a megabyte of "a.a.a…") costs one pass, not one per position
_USER_INFO = re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]{0,31}://)[^/\s@'\"]{1,1024}@")

# Keys whose values are never shown: in repr, logs or error messages.
_SECRET_KEY_WORDS = (
    "token",
    "secret",
    "credential",
    "password",
    "passwd",
    "access_key",
    "access-key",
    "accesskey",
    "account_key",
    "private_key",
    "api_key",
    "api-key",
    "apikey",
    "sas",
    "signature",
    "master_key",
    "assertion",
    "connection_string",
    "private",
)
# Settings fields the table marks secret: never in repr.
_SECRET_FIELDS = frozenset(entry.settings_field for entry in PROPERTIES if entry.secret)
_PAGE_SIZE = integer(1)  # iceberg.rest-page-size: a page of 0 never ends


def looks_secret(key: str, value: object = None) -> bool:
    """True for a property or option that holds a secret: by its name, or (given its value) a URL
    with a user or password in it."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_KEY_WORDS) or (isinstance(value, str) and bool(url_user_info(value)))


def _plain(value: str) -> bool:
    """A boolean or a number: no secret, and replacing it would garble every message."""
    text = value.strip().lower()
    return text in ("", "true", "false", "yes", "no") or text.lstrip("+-").replace(".", "", 1).isdigit()


@dataclass(frozen=True)
class Settings:
    """The namespace's configuration; secrets are kept out of ``repr``."""

    # One field per entry of properties.PROPERTIES (its ``settings_field``); a field's default is
    # the table's, parsed (``default_of``), so that there is no second list of defaults.
    endpoint: str
    root: str | None = default_of("root")  # None: no root (``location_mode`` is then ``catalog``)
    location_mode: str = default_of("location_mode")  # "root" or "catalog"
    auth_token: str | None = default_of("auth_token")
    credential: str | None = default_of("credential")
    scope: str | None = default_of("scope")
    oauth2_server_uri: str | None = default_of("oauth2-server-uri")
    connect_timeout_ms: int = default_of("connect_timeout")
    read_timeout_ms: int = default_of("read_timeout")
    max_retries: int = default_of("max_retries")
    table_type_cache_seconds: float = default_of("table_type_cache_seconds")
    lookup_threads: int = default_of("lookup_threads")
    vend_credentials: bool = default_of("vend_credentials")
    oauth2_refresh_margin_seconds: float = default_of("oauth2_refresh_margin_seconds")
    soft_delete: bool = default_of("soft_delete")
    soft_delete_ttl_seconds: float = default_of("soft_delete_ttl")
    table_version_management: bool = default_of("table_version_management")
    commit_cache_seconds: float = default_of("commit_cache_seconds")
    read_consistency_interval: float | None = default_of("read_consistency_interval")  # None: every read asks
    allowed_locations: tuple[str, ...] = default_of("allowed_locations")
    warehouses: tuple[str, ...] = default_of("warehouses")
    default_namespace: tuple[str, ...] = default_of("default_namespace")
    share_static_credentials: bool = default_of("share_static_credentials")
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    catalog_properties: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Settings:
        """Parse and validate namespace properties by the table ``properties.PROPERTIES``; raises
        ``InvalidInputError`` on bad values. Unknown keys are logged (never their values) and ignored."""
        parsed = parse_properties(properties)
        storage_options: dict[str, str] = {}
        catalog_properties: dict[str, str] = {}
        for key, value in properties.items():
            if key.startswith(STORAGE_PREFIX) and len(key) > len(STORAGE_PREFIX):
                storage_options[key[len(STORAGE_PREFIX) :]] = str(value)
            elif key.startswith(ICEBERG_PREFIX) and len(key) > len(ICEBERG_PREFIX):
                catalog_properties[key[len(ICEBERG_PREFIX) :]] = str(value)
            elif key not in KNOWN_KEYS:
                logger.warning("Ignoring unknown namespace property %r", key)
        refuse_plain_http_unallowed(storage_options)
        page_size = f"{ICEBERG_PREFIX}rest-page-size"
        if properties.get(page_size) not in (None, ""):
            _PAGE_SIZE(properties[page_size], page_size, parsed)
        return cls(
            **{entry.settings_field: parsed[entry.key] for entry in PROPERTIES if entry.settings_field},
            storage_options=storage_options,
            catalog_properties=catalog_properties,
        )

    def secrets(self) -> list[str]:
        """Every configured value that must never be shown: the tokens, the client secret, what
        any URL carries before its ``@``, ``iceberg.*`` values that look secret, and every
        ``storage.*`` value but those callers may see (``storage_keys.shown_to_callers``: a
        list of safe names, not a guess at secret ones) and plain booleans and numbers."""
        values = [getattr(self, name) for name in sorted(_SECRET_FIELDS)]
        values += url_user_info(self.endpoint)
        if self.credential and ":" in self.credential:
            values.append(self.credential.split(":", 1)[1])
        values += [v for k, v in self.storage_options.items() if not shown_to_callers(k, v) and not _plain(v)]
        values += [v for k, v in self.catalog_properties.items() if looks_secret(k)]
        for value in (*self.storage_options.values(), *self.catalog_properties.values()):
            values += url_user_info(value)
        return [v for v in values if v]

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{each.name}={getattr(self, each.name)!r}"
            for each in fields(self)
            if each.repr and each.name not in _SECRET_FIELDS
        )
        return self.redact(f"Settings({shown})")

    def redact(self, text: str) -> str:
        """Replace every configured secret in ``text`` with ``***``, and whatever a URL in it
        carries before its ``@`` (a user, a password: any caller's too)."""
        for secret in sorted(self.secrets(), key=len, reverse=True):
            text = text.replace(secret, "***")
        return _USER_INFO.sub(r"\1***@", text)

    def connection_key(self) -> str:
        """A digest of everything that shapes the catalog connections (secrets included, never
        shown): namespaces with equal keys can share them."""
        import hashlib
        import json

        shaping = [
            self.endpoint,
            self.auth_token,
            self.credential,
            self.scope,
            self.oauth2_server_uri,
            self.connect_timeout_ms,
            self.read_timeout_ms,
            self.max_retries,
            self.lookup_threads,
            self.oauth2_refresh_margin_seconds,
            sorted(self.catalog_properties.items()),
            sorted(file_io_properties(self.storage_options).items()),  # the catalog's FileIO reaches storage with them
        ]
        return hashlib.sha256(json.dumps(shaping).encode()).hexdigest()

    def principal(self) -> str:
        """Who this namespace acts as, without revealing a secret: the OAuth2 client id, or a
        fingerprint of the bearer token."""
        if self.credential:
            return "client:" + self.credential.split(":", 1)[0]
        if self.auth_token:
            import hashlib

            return "token:" + hashlib.sha256(self.auth_token.encode()).hexdigest()[:12]
        return "anonymous"
