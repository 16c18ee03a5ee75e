"""An object store's failures, as the storage half raises them and every caller translates them."""

from __future__ import annotations


class StoreRefused(PermissionError):
    """The store refused the bridge's credentials (403, 401): PermissionDenied to a caller."""


class StoreRejected(OSError):
    """The store turned the request itself down (another 4xx: a key too long, a name it does not
    take): InvalidInput to a caller."""


class StoreUnavailable(ConnectionError):
    """The store could not be reached, or not with this configuration: ServiceUnavailable."""
