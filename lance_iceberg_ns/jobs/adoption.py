"""The way out for a managed table that a writer by location moved ahead of the catalog.

A writer that opens a managed table by its location (``lance.write_dataset(data, location)``,
polars' ``sink_lance``) commits with Lance's own conditional write, behind the catalog's back. The
catalog then takes no new version of the table (InvalidTableStateError), since pylance numbers the
next version after the one on disk. ``adopt_versions_written_by_location`` records those versions
in the catalog, one compare-and-swap commit each, exactly as pylance's commits through the
namespace are recorded; writes through the namespace work again, and ``restore_table`` brings back
the data of an earlier version if what was written by location should not stay.

A server runs ``adopt_before_answering`` before it answers each request on a table: a client that
found the table's location through it and wrote there (DuckDB's INSERT, UPDATE and DELETE through
``serve``) was told its write succeeded, so the write must be what the server's readers see next.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lance_namespace import CreateTableVersionRequest, DescribeTableVersionRequest, LanceNamespace
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    InvalidTableStateError,
    LanceNamespaceError,
    TableVersionNotFoundError,
)

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.data.datasets import check_own_version
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.storage.files import VERSIONS_DIRECTORY, StoredFile
from lance_iceberg_ns.versions.manifests import final_manifests, manifest_directory, manifest_name, version_present
from lance_iceberg_ns.versions.refusals import (
    is_written_by_location,
    latest_gone_error,
    not_from_version_one_error,
    written_by_path_error,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

# A table found unmanaged is not looked at again for this long: a read through the server then costs
# no catalog request of its own (the catalog makes a table managed at its creation, or when a
# client turns it so; a write by location in the seconds after that is seen on the next look).
UNMANAGED_KEPT_SECONDS = 10.0
_unmanaged: RecentlyUsed[tuple[str, tuple[str, ...]], bool] = RecentlyUsed(4_096, UNMANAGED_KEPT_SECONDS)
# A next version that adoption refused (planted, rolled back) is not looked at again for this long
# while the catalog's entry stays as it was: a changed entry (an engine moved main, expired the
# snapshots of the versions it rolled back) is looked at again at once. Kept with adoption's refusal,
# which names the way out.
REFUSED_KEPT_SECONDS = 60.0
_refused: RecentlyUsed[tuple[str, tuple[str, ...], int, str | None], LanceNamespaceError]
_refused = RecentlyUsed(4_096, REFUSED_KEPT_SECONDS)

# Adopters that meet (two requests on one table, two server workers) each record what they found:
# one that lost a compare-and-swap looks again, for versions written after the other looked
ADOPTION_ATTEMPTS = 3


def adopt_versions_written_by_location(
    namespace: IcebergLanceNamespace | Mapping[str, str], table_id: Sequence[str]
) -> list[int]:
    """Record in the catalog the versions of a managed table that follow the catalog's latest and
    were committed by a writer that went by the table's location; the versions recorded, oldest
    first (none when the catalog is not behind). Raises InvalidInputError for a table whose
    versions the catalog does not manage, ConcurrentModificationError when another writer
    committed meanwhile (nothing more is recorded; run it again), InvalidTableStateError (nothing
    recorded from it on, those before it are) when a file under a version's manifest name is no
    version of this dataset (it does not open, or names files the table does not have): it was
    planted, and must be removed. Each version is recorded once it is checked, so that adoption cut
    off keeps what it did."""
    ns = as_namespace(namespace)
    found = _written_by_location(ns, table_id)
    adopted: list[int] = []
    for version, manifest in found.manifests:
        try:  # the commit opens the version first, as it opens any final manifest a client names
            ns.create_table_version(
                CreateTableVersionRequest(
                    id=list(table_id),
                    version=version,
                    manifest_path=f"{manifest_directory(found.location)}/{manifest.name}",
                    manifest_size=manifest.size,
                    naming_scheme="V2" if manifest.name == manifest_name(version) else "V1",
                )
            )
        except InvalidTableStateError as exc:
            if not _planted(found, version):
                raise  # refused for another reason (a rollback, say): its own way out, never "remove"
            kept = ""
            if adopted:
                were = f"version {adopted[0]}" if len(adopted) == 1 else f"versions {adopted[0]} to {adopted[-1]}"
                kept = f" ({were}, before it, adopted)"
            raise InvalidTableStateError(
                f"{exc}. It is no version a writer by location committed: remove "
                f"{found.location.rstrip('/')}/{VERSIONS_DIRECTORY}/{manifest.name} (and any "
                f"manifest after it) from the table's _versions/; the table is then as the catalog says{kept}"
            ) from None
        adopted.append(version)
    return adopted


def adopt_before_answering(namespace: LanceNamespace, table_id: Sequence[str]) -> list[int]:
    """Record in the catalog the well-formed versions a writer by location committed to a managed
    table after the catalog's latest (``adopt_versions_written_by_location``), before a server
    answers a request on ``table_id``; the versions recorded. Only the bridge's own tables whose
    location is the entry's own; a look at the next version's manifest when there is none. Never
    raises: a request on a table that is not there, not a Lance table or not managed answers for
    itself, and a version that is no version of the dataset (planted) stays unrecorded, so that
    writes stay refused by name (InvalidTableStateError) and reads see the catalog's latest. A
    table found unmanaged is taken as such for ``UNMANAGED_KEPT_SECONDS``, and a next version
    found to be none of the table's as such for ``REFUSED_KEPT_SECONDS``."""
    if not isinstance(namespace, IcebergLanceNamespace):
        return []
    seen = (namespace.namespace_id(), tuple(table_id))
    if _unmanaged.get(seen):
        return []
    try:  # one load of the entry and, for a managed table, of its latest, and a look at the next manifest
        table = namespace.resolve_table(list(table_id))
        if not table.managed:
            _unmanaged.keep(seen, True)
            return []
        refused = (*seen, _catalog_latest(namespace, table_id) + 1, table.metadata_location)
        if _refused.get(refused) or not version_present(table.location, table.storage_options, refused[2]):
            return []
    except LanceNamespaceError:  # no such table, not a Lance table: the operation answers for itself
        return []
    for _attempt in range(ADOPTION_ATTEMPTS):
        try:
            return adopt_versions_written_by_location(namespace, table_id)
        except ConcurrentModificationError:  # another adopter, or a writer, moved the catalog: look again
            continue
        except LanceNamespaceError as exc:  # planted, not its own location, a rollback in the way
            logger.warning("Versions of %s written by location were not adopted: %s", ".".join(table_id), exc)
            _refused.keep(refused, exc)  # not read again at every request (a manifest may be huge)
            return []
    return []  # lost to other commits each time: nothing refused, the next request looks again


def answer_after_adopting(
    namespace: LanceNamespace, table_id: Sequence[str], answer: Callable[[], T], again: bool = True
) -> T:
    """``answer`` a request on ``table_id`` once the versions written by location are adopted
    (``adopt_before_answering``). A table taken as unmanaged from a look moments ago, which an
    engine has made managed since, is refused as written by location (its versions are on disk,
    not yet in the catalog): it is looked at again at once, its versions adopted, and, ``again``,
    the request answered once more (the refusal comes before anything is written; a version's
    commit, whose staged manifest the refusal discarded, is not made again). Any other refusal as
    written by location (raised here, or passed on by pylance) adopts what was written meanwhile
    and is ConcurrentModificationError (retry), not the refusal's advice to adopt, which the server
    has just followed; so is one whose versions another request adopted meanwhile. Only a refusal
    whose versions adoption refused (planted) stands."""
    adopt_before_answering(namespace, table_id)
    try:
        return answer()
    except InvalidTableStateError as refusal:
        if not isinstance(namespace, IcebergLanceNamespace) or not is_written_by_location(refusal):
            raise
        seen = (namespace.namespace_id(), tuple(table_id))
        was_unmanaged = _unmanaged.forget(seen)
        # a write refused is looked at afresh: a file kept as refused may since have been removed, and
        # a real version written in its place, which the refusal kept would tell the client to remove
        _refused.forget_where(lambda key, _refusal: key[:2] == seen)
        adopted = adopt_before_answering(namespace, table_id)
        why = None if adopted else _why_still_ahead(namespace, table_id)
        if why is not None:  # planted, say: adoption's refusal, which names the way out, stands
            raise why from None
        if again and was_unmanaged and adopted:
            return answer()
        were = f"version {adopted[0]}" if len(adopted) == 1 else f"versions {adopted}" if adopted else "a version"
        raise ConcurrentModificationError(
            f"{'.'.join(table_id)} had {were} committed outside the catalog (by a writer that went by its "
            "location, or while the catalog did not manage its versions) while this request was answered; "
            "the catalog records it now: retry"
        ) from None


def _why_still_ahead(namespace: IcebergLanceNamespace, table_id: Sequence[str]) -> LanceNamespaceError | None:
    """Why the table's dataset is still ahead of the catalog after a look, when that is no conflict:
    adoption refused its next version (planted, say), and its refusal names the way out; or the
    look itself failed (the version the catalog names gone, the table dropped, the catalog
    unreachable), and that failure says what is the matter. None when it is ahead only because other
    commits kept beating adoption to the catalog: a conflict, retried."""
    try:
        table = namespace.resolve_table(list(table_id))
        found = _written_by_location(namespace, table_id)
    except LanceNamespaceError as exc:
        return exc
    refusal = _refused.get((namespace.namespace_id(), tuple(table_id), found.latest + 1, table.metadata_location))
    if not found.manifests or refusal is None:
        return None
    return type(refusal)(str(refusal))  # a copy to raise: requests on other threads raise it too


def _planted(found: _Found, version: int) -> bool:
    """Whether ``version`` on disk is no version of the table's own (``check_own_version``)."""
    try:
        check_own_version(found.location, found.storage_options, version)
    except InvalidTableStateError:
        return True
    return False


def refuse_if_written_by_location(
    namespace: IcebergLanceNamespace | Mapping[str, str], table_id: Sequence[str]
) -> None:
    """InvalidTableStateError naming the way out when a writer by location moved a managed table's
    dataset ahead of the catalog: why a commit through the namespace failed that pylance reports
    only as of unknown outcome."""
    found = _written_by_location(as_namespace(namespace), table_id)
    if found.manifests:
        raise written_by_path_error(".".join(table_id), found.manifests[0][0], found.latest)


@dataclass(frozen=True)
class _Found:
    latest: int  # the catalog's latest version
    location: str
    storage_options: dict[str, str]
    manifests: list[tuple[int, StoredFile]]  # the versions after it on disk, oldest first


def _written_by_location(ns: IcebergLanceNamespace, table_id: Sequence[str]) -> _Found:
    """What is on disk after the catalog's latest, at the location the entry shows is its own
    (PermissionDeniedError otherwise): a catalog copy of an entry adopts nothing of another table's."""
    table = ns.resolve_table(list(table_id), proved=True)
    if not table.managed:
        raise InvalidInputError(f"The catalog does not manage the versions of {'.'.join(table_id)}")
    latest = _catalog_latest(ns, table_id)
    on_disk = final_manifests(table.location, table.storage_options)
    if not latest and on_disk and 1 not in on_disk:
        raise not_from_version_one_error(".".join(table_id), min(on_disk))
    following = list(itertools.takewhile(lambda version: version in on_disk, itertools.count(latest + 1)))
    if latest and latest not in on_disk and not following and any(version > latest for version in on_disk):
        raise latest_gone_error(".".join(table_id), latest)  # a writer by location went on, then cleaned up
    return _Found(latest, table.location, table.storage_options, [(version, on_disk[version]) for version in following])


def _catalog_latest(ns: IcebergLanceNamespace, table_id: Sequence[str]) -> int:
    """The latest version the catalog records (0 before the first): not the listing, which refuses
    a first version written by location."""
    try:
        return ns.describe_table_version(DescribeTableVersionRequest(id=list(table_id))).version.version
    except TableVersionNotFoundError:
        return 0
