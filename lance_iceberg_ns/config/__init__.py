"""Configuration: the bridge's properties parsed once into typed ``Settings`` (``settings``), and
where properties come from besides explicit arguments (``sources``)."""

from lance_iceberg_ns.config.settings import ICEBERG_PREFIX, KNOWN_KEYS, STORAGE_PREFIX, Settings, looks_secret

__all__ = ["ICEBERG_PREFIX", "KNOWN_KEYS", "STORAGE_PREFIX", "Settings", "looks_secret"]
