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

from lance_iceberg_ns.config.storage_keys import lance_storage_options


def best_credential(storage_credentials: Iterable[Mapping[str, Any]], location: str) -> dict[str, str]:
    """The config of the storage credential with the longest prefix that the location starts with."""
    best: Mapping[str, Any] | None = None
    for credential in storage_credentials:
        prefix = str(credential.get("prefix", ""))
        if location.startswith(prefix) and (best is None or len(prefix) > len(str(best.get("prefix", "")))):
            best = credential
    return {str(k): str(v) for k, v in (best or {}).get("config", {}).items()}


def vended_storage_options(
    config: Mapping[str, str], storage_credentials: Iterable[Mapping[str, Any]], location: str
) -> dict[str, str]:
    """Lance storage options from a ``loadTable`` answer's ``config`` and ``storage-credentials``."""
    return lance_storage_options({**config, **best_credential(storage_credentials, location)})
