"""The table of properties is the one source: ``Settings`` has a field for each entry and takes its
default from it, the known keys are its keys, and its secrets stay out of sight."""

from __future__ import annotations

from dataclasses import fields

import pytest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.config.properties import KNOWN_KEYS, PROPERTIES, Property, markdown_table
from lance_iceberg_ns.config.settings import Settings, looks_secret

ENDPOINT = {"endpoint": "http://catalog:8181"}
# The defaults as they were when each was written out in Settings and again in from_properties.
DEFAULTS = {
    "root": None,
    "location_mode": "catalog",
    "auth_token": None,
    "credential": None,
    "scope": None,
    "oauth2_server_uri": None,
    "connect_timeout_ms": 10_000,
    "read_timeout_ms": 30_000,
    "max_retries": 3,
    "table_type_cache_seconds": 30,
    "lookup_threads": 64,
    "vend_credentials": False,
    "oauth2_refresh_margin_seconds": 60,
    "soft_delete": True,
    "soft_delete_ttl_seconds": 7 * 86400,
    "table_version_management": False,
    "commit_cache_seconds": 2,
    "read_consistency_interval": None,
    "allowed_locations": (),
    "warehouses": (),
    "default_namespace": (),
    "share_static_credentials": True,
}
# A value each property refuses; the properties that take any text say so.
REFUSED = {
    "location_mode": "elsewhere",
    "endpoint": "ftp://catalog",
    "connect_timeout": "soon",
    "read_timeout": "0",
    "max_retries": "-1",
    "lookup_threads": "0",
    "soft_delete": "maybe",
    "soft_delete_ttl": "later",
    "table_version_management": "si",
    "commit_cache_seconds": "-1",
    "read_consistency_interval": "nan",
    "table_type_cache_seconds": "1y",
    "vend_credentials": "2",
    "oauth2_refresh_margin_seconds": "inf",
    "share_static_credentials": "perhaps",
    "default_namespace": "wh",  # a warehouse alone is no namespace inside one
}
ANY_TEXT = {
    "auth_token",
    "credential",
    "scope",
    "oauth2-server-uri",
    "root",
    "warehouses",
    "allowed_locations",
    "delimiter",
}


def test_keys_are_unique_and_are_the_known_keys() -> None:
    keys = [entry.key for entry in PROPERTIES]
    assert len(keys) == len(set(keys)) and set(keys) == KNOWN_KEYS


def test_settings_has_one_field_per_property_and_the_prefixed_families() -> None:
    filled = {entry.settings_field for entry in PROPERTIES if entry.settings_field}
    assert {each.name for each in fields(Settings)} == filled | {"storage_options", "catalog_properties"}


def test_from_properties_takes_every_default_from_the_table() -> None:
    settings = Settings.from_properties(ENDPOINT)
    assert {name: getattr(settings, name) for name in DEFAULTS} == DEFAULTS
    written_out = {entry.key: entry.default for entry in PROPERTIES if entry.default is not None}
    assert written_out.keys() >= {"connect_timeout", "soft_delete_ttl", "delimiter"}
    assert Settings.from_properties({**ENDPOINT, **written_out}) == settings
    assert Settings.from_properties({**ENDPOINT, **dict.fromkeys(written_out, "")}) == settings


def test_every_property_is_documented_in_the_table() -> None:
    table = markdown_table()
    for entry in PROPERTIES:
        assert entry.doc and entry.maps_to and "\n" not in entry.doc + entry.maps_to + entry.default_text()
        assert f"| `{entry.key}` | {entry.default_text()} | {entry.maps_to} | {entry.doc} |" in table
    assert "| `storage.<key>` |" in table and "| `iceberg.<key>` |" in table


def test_every_property_either_refuses_a_bad_value_by_name_or_takes_any_text() -> None:
    assert REFUSED.keys() | ANY_TEXT == KNOWN_KEYS and not REFUSED.keys() & ANY_TEXT
    for key, value in REFUSED.items():
        with pytest.raises(InvalidInputError, match=f"'{key}'"):
            Settings.from_properties({**ENDPOINT, key: value})


def test_the_delimiter_joins_the_default_namespace() -> None:
    settings = Settings.from_properties({**ENDPOINT, "delimiter": "$", "default_namespace": "wh.eu$sales"})
    assert settings.default_namespace == ("wh.eu", "sales")


@pytest.mark.parametrize("entry", [entry for entry in PROPERTIES if entry.secret], ids=lambda entry: entry.key)
def test_a_secret_property_is_never_shown(entry: Property) -> None:
    key = entry.key
    settings = Settings.from_properties({**ENDPOINT, key: "client:s3cr3t-value"})
    assert looks_secret(key)
    assert "s3cr3t-value" not in repr(settings)
    assert "s3cr3t-value" not in settings.redact(f"failed with client:s3cr3t-value for {key}")


def test_the_secret_properties_are_the_token_and_the_client_credentials() -> None:
    assert {entry.key for entry in PROPERTIES if entry.secret} == {"auth_token", "credential"}


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"storage.aws_endpoint": "http://127.0.0.1:8333"}, True),
        ({"storage.endpoint": "HTTP://minio:9000", "storage.allow_http": "false"}, True),
        ({"storage.azure_storage_endpoint": "http://127.0.0.1:10000/devstoreaccount1"}, True),
        ({"storage.aws_endpoint": "http://127.0.0.1:8333", "storage.allow_http": "true"}, False),
        ({"storage.aws_endpoint_url": "http://minio:9000", "storage.aws_allow_http": "TRUE"}, False),
        ({"storage.aws_endpoint": "https://s3.example.com"}, False),
    ],
)
def test_a_plain_http_store_endpoint_without_allow_http_is_refused_when_read(
    options: dict[str, str], refused: bool
) -> None:
    """The object store refuses every request to such an endpoint, each answered as the store being
    unreachable (503, which invites retries that never help): the configuration says so at once."""
    properties = {"endpoint": "http://127.0.0.1:8181", **options}
    if not refused:
        assert Settings.from_properties(properties).storage_options
        return
    with pytest.raises(InvalidInputError, match=r"storage\.\w+ is a plain http:// URL.*allow_http=true"):
        Settings.from_properties(properties)
