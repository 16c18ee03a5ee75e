"""Table versions: read from the Lance dataset itself (``versions``), or from the catalog for a
table whose versions it manages (``snapshots``), where every new version is a compare-and-swap
commit, several tables' versions can move in one atomic commit, and old versions are forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from lance_namespace import (
    BatchCreateTableVersionsRequest,
    BatchCreateTableVersionsResponse,
    BatchDeleteTableVersionsRequest,
    BatchDeleteTableVersionsResponse,
    CreateTableVersionRequest,
    CreateTableVersionResponse,
    DescribeTableVersionRequest,
    DescribeTableVersionResponse,
    ListTableVersionsRequest,
    ListTableVersionsResponse,
    RestoreTableRequest,
    RestoreTableResponse,
    TableVersion,
)
from lance_namespace.errors import (
    ConcurrentModificationError,
    InternalError,
    InvalidInputError,
    InvalidTableStateError,
    LanceNamespaceError,
    ServiceUnavailableError,
    UnsupportedOperationError,
)
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.catalog.companions import managed_entry
from lance_iceberg_ns.catalog.managed_state import DESCRIBED_JUST_NOW_SECONDS, LOADED_FOR_COMMIT_SECONDS
from lance_iceberg_ns.catalog.warehouses import LOST_ANSWER, TableSummary
from lance_iceberg_ns.data import outcomes
from lance_iceberg_ns.data.outcomes import landed_unanswered
from lance_iceberg_ns.errors.translation import translate
from lance_iceberg_ns.identifiers import TableId, parse_table_id
from lance_iceberg_ns.request_rules import refuse_branch
from lance_iceberg_ns.tables.lifecycle import Tables
from lance_iceberg_ns.versions import manifests as versions
from lance_iceberg_ns.versions import snapshots
from lance_iceberg_ns.versions.refusals import (
    FinalNameTaken,
    FinalNameUnmoved,
    LatestMissing,
    latest_gone_error,
    written_by_path_error,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")


def _diverged(table: TableId, version: int, why: str) -> InternalError:
    """The answer to a commit the catalog took while a writer by location committed the same
    version of ``table``, when it cannot be taken back (``why``): everything stays, the catalog's
    manifest under its staged name, and the caller keeps its files (a 5xx: the commit landed)."""
    landed_unanswered(table.parts, version)
    logger.error("Version %s of %s was committed by a writer by location too, and stays: %s", version, table, why)
    return InternalError(
        f"Version {version} of {table} was committed in the catalog while a writer by location committed it "
        f"too, and {why}: check the table's versions before writing again"
    )


def _unmoved(table: TableId, unmoved: Exception) -> ServiceUnavailableError:
    """The refusal of a version whose manifest the store would not move into place: taken back."""
    return ServiceUnavailableError(
        f"The manifest of the new version of {table} could not be moved into place ({unmoved}); the version "
        "was not committed: retry"
    )


@contextmanager
def _outcomes_kept(commits: Sequence[tuple[TableId, int]]) -> Iterator[None]:
    """Record a refusal of the ``commits`` (table, version) for the data plane (``data.outcomes``),
    unless one may have landed: pylance reports a refused commit it cannot read back as of unknown
    outcome, and the client must know whether to retry."""
    try:
        yield
    except Exception as exc:
        refusal = translate(exc, "create_table_version")
        for table, version in commits:
            outcomes.refused(table.parts, version, refusal)
        raise


def refuse_across_warehouses(tables: list[TableId]) -> None:
    """An atomic commit is one catalog commit, so its tables are in one warehouse (InvalidInputError)."""
    if len({table.warehouse for table in tables}) > 1:
        raise InvalidInputError("An atomic commit covers tables of one warehouse (one catalog)")


class Versions:
    """The version operations of one bridge, on the parts of its tables; ``Tables.resolved`` is
    the seam to the data half (a loaded entry as the table the one opener opens)."""

    def __init__(self, tables: Tables) -> None:
        self._companions, self._placement, self._options = tables.companions, tables.placement, tables.options
        self._datasets, self._resolved = tables.datasets, tables.resolved
        self._state = tables.companions.managed

    # --- reading ------------------------------------------------------------------------------

    def list_table_versions(self, request: ListTableVersionsRequest) -> ListTableVersionsResponse:
        table = parse_table_id(request.id)
        refuse_branch(request.branch, "list_table_versions")
        latest_only = bool(request.descending) and request.limit == 1 and not request.page_token
        kept = self._kept(table, DESCRIBED_JUST_NOW_SECONDS) if latest_only else None
        try:
            # a state kept a moment ago still answers unless a version after it shows on disk: another
            # process committed since (its final manifest), or a writer went by location
            if kept is not None and snapshots.knows_latest(kept[0]) and snapshots.written_by_path_after(*kept) is None:
                found = snapshots.managed_versions(*kept, self._state.finalized(table))
            else:
                found = self._all_versions(table, latest_only)
        except LatestMissing:  # asked again: its commit may have been taken back since it was loaded
            self._state.forget(table)
            found = self._again(table, lambda: self._all_versions(table, latest_only))
        page, token = versions.page_of_versions(found, bool(request.descending), request.page_token, request.limit)
        return ListTableVersionsResponse(versions=page, page_token=token)

    def _all_versions(self, table: TableId, latest_only: bool) -> list[TableVersion]:
        summary = self._companions.load(table)
        if not managed_entry(summary):
            return versions.table_versions(*self._open(table, summary))
        if latest_only:  # pylance's question for the latest version: keep it for the commit that follows
            loaded = self._with_latest(table, self._companions.table_from_summary(table, summary))
            self._state.loaded(table, loaded)
            return self._recorded_versions(table, loaded)
        loaded = self._companions.load_table(table, history=True)
        earlier = self._earlier_versions(summary, snapshots.earliest_recorded(loaded))
        return earlier + self._recorded_versions(table, loaded)

    def _recorded_versions(self, table: TableId, loaded: Any) -> list[TableVersion]:
        """The versions the catalog records. None while a first version is on disk (the catalog
        asked again: another process's may have just landed) is a writer's by location (lance-ray,
        polars), or a rollback past every version: refused as such, where pylance would read it from disk."""
        files = self._files_of(table, loaded)
        recorded = snapshots.managed_versions(loaded, files)
        if recorded or (written := snapshots.written_by_path_after(loaded, files)) is None:
            return recorded
        loaded = self._managed_table(table, history=True)
        recorded = snapshots.managed_versions(loaded, self._files_of(table, loaded))
        if not recorded:
            snapshots.refuse_if_rolled_back(loaded)
            raise snapshots.written_by_path(loaded, written)
        return recorded

    def describe_table_version(self, request: DescribeTableVersionRequest) -> DescribeTableVersionResponse:
        table = parse_table_id(request.id)
        refuse_branch(request.branch, "describe_table_version")
        summary = self._companions.load(table)
        if managed_entry(summary):
            loaded = self._with_latest(table, self._companions.table_from_summary(table, summary))
            if request.version is not None and request.version != snapshots.latest_version(loaded):
                loaded = self._companions.load_table(table, history=True)
            if request.version is not None and request.version < snapshots.earliest_recorded(loaded):
                version = versions.one_version(self._earlier_versions(summary, request.version + 1), request.version)
            else:
                try:
                    version = snapshots.describe_managed_version(loaded, self._files_of(table, loaded), request.version)
                except LatestMissing:  # asked again, as in ``list_table_versions``
                    loaded = self._managed_table(table, history=True)
                    version = self._again(
                        table,
                        lambda: snapshots.describe_managed_version(
                            loaded, self._files_of(table, loaded), request.version
                        ),
                    )
        else:
            version = versions.describe_version(*self._open(table, summary), request.version)
        return DescribeTableVersionResponse(version=version)

    @staticmethod
    def _again(table: TableId, answer: Callable[[], T]) -> T:
        """``answer`` once more, with the table loaded again: a latest version whose manifest is
        still in neither of its names was removed by a writer by location (InvalidTableStateError
        naming the way out)."""
        try:
            return answer()
        except LatestMissing as missing:
            raise latest_gone_error(missing.table, missing.version) from None

    def _open(self, table: TableId, summary: TableSummary) -> tuple[Any, str, dict[str, str]]:
        """The dataset of a table whose versions are Lance's own, through the one opener, with
        where it is and what reaches its files."""
        resolved = self._resolved(table, summary, False)
        return self._datasets.open(resolved, reading=True), resolved.location, resolved.storage_options

    def _earlier_versions(self, summary: TableSummary, below: int) -> list[TableVersion]:
        """A managed table's versions before ``below``, the oldest the catalog records: the
        dataset's own, from one listing of ``_versions/`` at the location the entry has shown is
        its own (a catalog copy of the entry reads nothing there)."""
        if below <= 1:
            return []
        location = self._placement.prove(summary)
        return versions.listed_versions(location, self._placement.entry_options(summary), below)

    def _files_of(self, table: TableId, loaded: Any) -> dict[str, str]:
        """What the bridge reads and writes a managed table's manifests with, once its location
        has shown it is this entry's own: a catalog copy of the entry reaches none of them."""
        return self._placement.prove_state(table, loaded)

    def _kept(self, table: TableId, max_age: float) -> tuple[Any, dict[str, str]] | None:
        """The state kept of ``table`` (``ManagedState.recent``) while its location still shows
        it is the entry's (not once the table was dropped, purged or replaced elsewhere since),
        with what reaches its files."""
        kept = self._state.recent(table, max_age)
        files = self._placement.still_proves(table, kept) if kept is not None else None
        if files is None:
            self._state.forget(table)
            return None
        return kept, files

    # --- writing ------------------------------------------------------------------------------

    def restore_table(self, request: RestoreTableRequest) -> RestoreTableResponse:
        table = parse_table_id(request.id)
        refuse_branch(request.branch, "restore_table")
        if request.version is None:
            raise InvalidInputError("restore_table needs the version to restore")
        resolved = self._resolved(table, self._companions.load(table), True)  # only into data the entry owns
        self._datasets.restore(resolved, request.version)
        return RestoreTableResponse()

    def create_table_version(self, request: CreateTableVersionRequest) -> CreateTableVersionResponse:
        table = parse_table_id(request.id)
        with _outcomes_kept([(table, request.version)]):
            return self._create_table_version(table, request)

    def _create_table_version(self, table: TableId, request: CreateTableVersionRequest) -> CreateTableVersionResponse:
        refuse_branch(request.branch, "create_table_version")
        kept = self._kept(table, LOADED_FOR_COMMIT_SECONDS)
        current = kept[0] if kept is not None else None
        if (
            current is None
            or not snapshots.knows_latest(current)
            or snapshots.may_be_behind(current)
            or snapshots.latest_version(current) != request.version - 1
        ):
            current = self._managed_table(table)
        if not snapshots.knows_predecessor(current):  # loaded with its current snapshots only: the one to let go
            current = self._managed_table(table, history=True)
        try:
            return self._commit_version(table, current, request, kept[1] if kept and current is kept[0] else None)
        except (iceberg.BadRequestError, iceberg.CommitFailedException) as exc:
            if _sequence_number_refused(exc):
                # an engine committed on another branch since ``current`` was loaded (or kept): main did
                # not move, but the catalog refuses a sequence number it has already given out
                return self._commit_version(table, self._managed_table(table, history=True), request)
            # main moved. With a new Lance version, that is pylance's conflict to retry; without one,
            # an Iceberg engine committed on top (Spark's DELETE FROM, DuckDB's INSERT), and the
            # version goes on top of that; or an engine rolled main back, and the version is refused.
            current = self._managed_table(table)
            if snapshots.latest_version(current) != request.version - 1 and not snapshots.rolled_back(current):
                raise
            if not snapshots.knows_predecessor(current):  # the one to let go, and main's history checked
                current = self._managed_table(table, history=True)
            return self._commit_version(table, current, request)

    def _commit_version(
        self, table: TableId, current: Any, request: Any, files: dict[str, str] | None = None
    ) -> CreateTableVersionResponse:
        """Commit ``request``'s version on top of ``current``, the table as last loaded (``files``:
        what reaches them, once proved); its manifest must be the table's own (InvalidInputError,
        nothing changed)."""
        files = files if files is not None else self._files_of(table, current)
        own = versions.own_manifest(current.metadata.location, files, request.version, request.manifest_path)
        try:
            current = self._refuse_written_by_path(table, current, files, request, own.final_exists)
            commit = snapshots.plan_version(current, request, own.path, files, self._state.finalized(table))
        except (InvalidTableStateError, ConcurrentModificationError):  # refused: its staged manifest must not pile up
            versions.discard_staged(current.metadata.location, files, own.path)
            raise
        finalized = self._state.finalized(table)
        self._state.forget(table)  # whatever happens next, the remembered state is past
        try:
            answer = self._companions.catalog(table.warehouse).commit_changes([commit.change])
        except LOST_ANSWER:  # it may have landed: its manifest list must stay
            landed_unanswered(table.parts, request.version)
            raise
        except BaseException:
            commit.discard()
            raise
        place = [(current.metadata.location, files)]
        try:
            version = versions.finalize(current.metadata.location, files, commit.version)
        except FinalNameTaken:  # a writer by location committed the version since the check
            raise self._taken_back(table, request.version, [commit], place) from None
        except FinalNameUnmoved as unmoved:  # the store refuses: no reader may be handed the staged path
            raise self._taken_back(table, request.version, [commit], place, _unmoved(table, unmoved)) from None
        moved = [versions.final_manifest_name(version.manifest_path)] if version is not commit.version else []
        self._state.committed(table, snapshots.committed(current, answer), [*moved, *finalized])  # the next write's
        return CreateTableVersionResponse(version=version)

    def _refuse_written_by_path(
        self, table: TableId, current: Any, files: dict[str, str], request: Any, taken: bool
    ) -> Any:
        """Refuse a version when a writer went by the table's location: InvalidTableStateError when
        the version's final manifest exists though the catalog (asked again) does not have it, or
        when pylance numbered the version past a version written by location (its commit saw that
        one on disk); ConcurrentModificationError when a writer through the catalog took the
        version. ``taken``: the final manifest of the request's staged one is already there. Only
        a version whose final manifest exists or that leaves a gap costs a look more. The table as
        it is known now."""
        snapshots.refuse_if_rolled_back(current)  # a rollback leaves versions on disk the catalog is behind
        if taken:
            current = self._managed_table(table)
            if request.version <= snapshots.latest_version(current):
                raise ConcurrentModificationError(
                    f"Version {request.version} of {table} already exists (the latest is "
                    f"{snapshots.latest_version(current)})"
                )
        elif request.version <= snapshots.latest_version(current) + 1:
            return current
        written = snapshots.written_by_path_after(current, files)
        if written is not None and not taken:  # asked again: a writer through the catalog may have committed it
            current = self._managed_table(table)
            if request.version <= snapshots.latest_version(current) + 1:
                return current
            written = snapshots.written_by_path_after(current, files)
        if taken or written is not None:
            raise snapshots.written_by_path(current, written or request.version)
        return current

    def batch_create_table_versions(self, request: BatchCreateTableVersionsRequest) -> BatchCreateTableVersionsResponse:
        entries = list(request.entries or [])
        if not entries:
            raise InvalidInputError("batch_create_table_versions needs at least one entry")
        tables = [parse_table_id(entry.id) for entry in entries]
        refuse_across_warehouses(tables)
        if len({tuple(table.parts) for table in tables}) != len(tables):
            raise InvalidInputError("An atomic commit takes one version per table")
        with _outcomes_kept([(table, entry.version) for table, entry in zip(tables, entries, strict=True)]):
            try:
                return self._commit_together(tables, entries)
            except (iceberg.BadRequestError, iceberg.CommitFailedException) as exc:
                if not _sequence_number_refused(exc):
                    raise
                return self._commit_together(tables, entries)  # as in ``create_table_version``

    def _commit_together(self, tables: list[TableId], entries: list[Any]) -> BatchCreateTableVersionsResponse:
        """Commit every entry's version on top of its table as loaded now, in one catalog commit."""
        commits: list[snapshots.VersionCommit] = []
        places: list[tuple[str, dict[str, str]]] = []
        try:
            for table, entry in zip(tables, entries, strict=True):
                refuse_branch(entry.branch, "batch_create_table_versions")
                loaded = self._managed_table(table)
                places.append((loaded.metadata.location, self._files_of(table, loaded)))
                own = versions.own_manifest(*places[-1], entry.version, entry.manifest_path)
                try:  # as a single commit: a version written by location behind the catalog is refused
                    loaded = self._refuse_written_by_path(table, loaded, places[-1][1], entry, own.final_exists)
                except InvalidTableStateError:
                    versions.discard_staged(*places[-1], own.path)
                    raise
                commits.append(snapshots.plan_version(loaded, entry, own.path, places[-1][1]))
                self._state.forget(table)
            self._companions.catalog(tables[0].warehouse).commit_changes([commit.change for commit in commits])
        except LOST_ANSWER:  # it may have landed: the manifest lists must stay
            for table, entry in zip(tables, entries, strict=True):
                landed_unanswered(table.parts, entry.version)
            raise
        except BaseException:
            for commit in commits:
                commit.discard()
            raise
        for table, place, commit, entry in zip(tables, places, commits, entries, strict=True):
            if not versions.final_name_free(*place, commit.version):  # nothing moved yet: all go back
                raise self._taken_back(table, entry.version, commits, places)
        done: list[TableVersion] = []
        for table, place, commit, entry in zip(tables, places, commits, entries, strict=True):
            try:
                done.append(versions.finalize(*place, commit.version))
            except (FinalNameTaken, FinalNameUnmoved) as exc:  # all go back unless some are in place already
                if not done:
                    refusal = _unmoved(table, exc) if isinstance(exc, FinalNameUnmoved) else None
                    raise self._taken_back(table, entry.version, commits, places, refusal) from None
                raise _diverged(table, entry.version, "versions of its atomic batch were already in place") from None
        return BatchCreateTableVersionsResponse(versions=done)

    def _taken_back(
        self,
        table: TableId,
        version: int,
        commits: Sequence[snapshots.VersionCommit],
        places: Sequence[tuple[str, dict[str, str]]],
        refusal: LanceNamespaceError | None = None,
    ) -> LanceNamespaceError:
        """The refusal of versions the catalog committed, none moved into place yet, while a writer
        by location committed ``version`` of ``table`` under the final manifest name: the catalog
        commit is taken back and the staged manifests go, so that the writer's version stays as it
        landed, and the next commit is refused until it is adopted (or ``refusal``, when the store
        refused the move). When the catalog moved on meanwhile, nothing is taken back (``_diverged``)."""
        try:
            self._companions.catalog(table.warehouse).commit_changes([commit.undo_change() for commit in commits])
        except (iceberg.CommitFailedException, *LOST_ANSWER):
            return _diverged(table, version, "the catalog moved on since")
        for (location, files), commit in zip(places, commits, strict=True):
            versions.discard_staged(location, files, commit.version.manifest_path)
            commit.discard(taken_back=True)
        return refusal or written_by_path_error(str(table), version, version - 1)

    def batch_delete_table_versions(self, request: BatchDeleteTableVersionsRequest) -> BatchDeleteTableVersionsResponse:
        table = parse_table_id(request.id)
        refuse_branch(request.branch, "batch_delete_table_versions")
        summary = self._companions.load(table)
        location = self._placement.prove(summary)  # its manifests are deleted too
        files = self._placement.entry_options(summary)
        loaded = self._managed_table(table, history=True)
        earliest, latest = snapshots.earliest_recorded(loaded), snapshots.latest_version(loaded)
        earlier = [v.version for v in versions.listed_versions(location, files, earliest)]
        # ranges are [start, end), an end of -1 reaching the latest; matched against the versions there
        # are, never spelled out (a range may span 2**63 numbers)
        ranges = [(r.start_version, latest + 1 if r.end_version == -1 else r.end_version) for r in request.ranges or []]
        there = sorted({*earlier, *snapshots.recorded_versions(loaded)})
        wanted = [v for v in there if any(start <= v < end for start, end in ranges)]
        self._refuse_held(table, summary, loaded, wanted)
        requirements, updates = snapshots.plan_removal(loaded, wanted)
        if updates:
            self._companions.catalog(table.warehouse).commit_changes([(tuple(loaded.name()), requirements, updates)])
        versions.delete_manifests(location, files, wanted)
        return BatchDeleteTableVersionsResponse(deleted_count=len(wanted))

    def _refuse_held(self, table: TableId, summary: TableSummary, loaded: Any, wanted: list[int]) -> None:
        """InvalidTableStateError, before anything is deleted, when a Lance tag or an Iceberg tag or
        branch holds one of the ``wanted`` versions: deleting its manifest would break the tag."""
        holders = snapshots.held_versions(loaded)
        if any(v not in holders for v in wanted):  # only then is the dataset opened for its tags
            dataset = self._datasets.open(self._resolved(table, summary, False), reading=True)
            tags = {int(tag["version"]): f"Lance tag {name!r}" for name, tag in dataset.tags.list().items()}
            holders = {**tags, **holders}
        held = [f"{v} ({holders[v]})" for v in wanted if v in holders]
        if held:
            raise InvalidTableStateError(
                f"Versions held by a tag cannot be deleted: {', '.join(held[:10])}; delete the tags first"
            )

    def _managed_table(self, table: TableId, history: bool = False) -> Any:
        """The companion table of a table with managed versions (pyiceberg's ``Table``)."""
        loaded = self._companions.load_table(table, history)
        if not snapshots.is_managed(loaded.properties):
            raise UnsupportedOperationError(
                f"The versions of {table} are Lance's own; the catalog manages them only for tables declared "
                f"with {snapshots.MANAGED_PROPERTY}=true"
            )
        return self._with_latest(table, loaded)

    def _with_latest(self, table: TableId, loaded: Any) -> Any:
        """``loaded``, or the table with its whole history when an Iceberg engine's snapshot on top
        of ``main`` hides the latest Lance version from a load of the current snapshots only, or
        when ``main`` was rolled back and the numbers already used are off it."""
        if snapshots.knows_latest(loaded) and not snapshots.may_be_behind(loaded):
            return loaded
        return self._companions.load_table(table, history=True)


def _sequence_number_refused(exc: Exception) -> bool:
    """Whether the catalog refused a commit for a sequence number it has given out since the table
    was loaded (an engine's commit on another branch): Iceberg before 1.12 answers 400, from 1.12 on
    409 ("Validation failed, please retry: Cannot add snapshot with sequence number ...")."""
    if isinstance(exc, iceberg.BadRequestError):
        return True
    return isinstance(exc, iceberg.CommitFailedException) and "sequence number" in str(exc)
