"""Configuration: the table of properties (``properties``), the bridge's properties parsed once by
it into typed ``Settings`` (``settings``), the one grammar of durations (``durations``), and where
properties come from besides explicit arguments (``sources``)."""

from lance_iceberg_ns.config.settings import ICEBERG_PREFIX, KNOWN_KEYS, STORAGE_PREFIX, Settings, looks_secret

__all__ = ["ICEBERG_PREFIX", "KNOWN_KEYS", "STORAGE_PREFIX", "Settings", "looks_secret"]
