"""Storage options: what the bridge reaches a table's files with, and what a caller may see.

The bridge uses its static ``storage.*`` options with the catalog's vended credentials winning over
them. A caller (pylance, lancedb, a REST client) is answered with the vended credentials, which the
catalog issued for exactly this table, and of the static options only those whose names are known
to hold no secret (``config.storage_keys.SHOWN_STATIC_OPTIONS``): a list of what is safe, never a filter on names that
look secret, which a new kind of secret would pass. In process (``share_static_credentials``) the
caller is the bridge's own user and gets every static option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lance_iceberg_ns.config.storage_keys import shown_to_callers


@dataclass(frozen=True)
class StorageOptions:
    """The static ``storage.*`` options of one bridge, and whether callers may see all of them."""

    static: Mapping[str, str] = field(repr=False)
    share_static: bool = False

    def for_bridge(self, vended: Mapping[str, str] | None = None) -> dict[str, str]:
        """What the bridge reaches files with: the static options, vended values winning."""
        return {**self.static, **(vended or {})}

    def has_secrets(self) -> bool:
        """Whether the static options hold credentials of their own (anything not safe to show)."""
        return any(not shown_to_callers(key, value) for key, value in self.static.items())

    def for_caller(self, vended: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a caller is answered with: the vended credentials, and the static options that are
        safe to show (all of them with ``share_static``)."""
        static = (
            dict(self.static)
            if self.share_static
            else {key: value for key, value in self.static.items() if shown_to_callers(key, value)}
        )
        return {**static, **(vended or {})}
