"""Lance tables in the Iceberg catalog from Ray, through lance-ray (extra ``ray``).

lance-ray gives every worker the namespace as ``namespace_impl`` and ``namespace_properties``;
each worker process connects with ``lance_namespace.connect``. A short name such as ``"iceberg"``
is looked up only in that process's registry (``lance_namespace`` has no entry points), so a fresh
worker does not know it, and one that imported lance-namespace-impls knows it as that package's
class. Two ways work in every worker:

- the class path ``registry.CLASS_PATH`` (``"lance_iceberg_ns.IcebergLanceNamespace"``): the worker
  imports it, nothing to set up, on any engine; ``write_lance`` below uses it;
- ``runtime_env()``: every worker process registers the bridge when it starts (Ray's
  ``worker_process_setup_hook``), so ``namespace_impl="iceberg"`` means this bridge there too,
  whatever the worker imports later.

A package-wide start-up hook (a ``.pth`` file) would also reach fresh processes, but it runs in
every Python program of the environment and is not installed by every installer; it is not used.

A lance-ray write with ``mode="create"`` declares the table on the driver before its workers write;
when a worker fails, the table stays declared with no version (reads fail, a new create is
TableAlreadyExists). ``write_lance`` removes such a table with the files written for it: only the
entry it declared (its table UUID, at the location it was declared at), never another client's
table that took the name while the job ran.

lance-ray commits by location, never through the catalog, so on a table whose versions the catalog
manages (``table_version_management``) its commits go behind the catalog, which then refuses the
table's next version; ``write_lance`` refuses such a table before anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from lance_namespace import DeclareTableRequest, DescribeTableRequest
from lance_namespace.errors import (
    InvalidInputError,
    LanceNamespaceError,
    PermissionDeniedError,
    TableNotFoundError,
    UnsupportedOperationError,
)

from lance_iceberg_ns import registry
from lance_iceberg_ns.identifiers import in_default_namespace
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.storage.locations import normalize_location
from lance_iceberg_ns.storage.ownership import Entry

if TYPE_CHECKING:
    from lance_iceberg_ns.data import ResolvedTable

logger = logging.getLogger(__name__)

WORKER_SETUP_HOOK = f"{registry.__name__}.{registry.register.__name__}"
WriteMode = Literal["create", "append", "overwrite"]
WRITE_MODES: tuple[str, ...] = get_args(WriteMode)
_HOOK = "worker_process_setup_hook"


@dataclass(frozen=True)
class _Declared:
    """The entry a write declared, and where: what its failure may remove, and nothing else."""

    entry: Entry | None  # None: the name held another entry by the time it was looked up
    location: str

    def holds(self, table: ResolvedTable) -> bool:
        """Whether ``table`` is this very entry, still where it was declared."""
        return self.entry is not None and table.place == (self.location, self.entry)


class RayWriteError(RuntimeError):
    """A Ray write failed in a worker; nothing of it was committed."""


def runtime_env(base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (a Ray runtime environment) with the setup hook that registers the bridge in every
    worker process, for ``ray.init(runtime_env=...)``. Raises InvalidInputError when ``base`` has a
    hook of its own (Ray runs one): call ``lance_iceberg_ns.registry.register()`` from it."""
    env = dict(base or {})
    if env.setdefault(_HOOK, WORKER_SETUP_HOOK) != WORKER_SETUP_HOOK:
        raise InvalidInputError(f"The runtime environment has a {_HOOK} of its own: call {WORKER_SETUP_HOOK}() from it")
    return env


def write_lance(
    ds: Any,
    namespace: IcebergLanceNamespace | Mapping[str, str],
    table_id: Sequence[str],
    mode: WriteMode = "create",
    **options: Any,
) -> None:
    """Write a Ray Dataset as a Lance table registered in the catalog, with ``lance_ray.write_lance``
    (``options`` go to it). The workers connect by class path, so no setup hook is needed.

    ``create`` declares the table (TableAlreadyExists when it exists, before any work);
    ``overwrite`` declares it when missing; ``append`` needs it (TableNotFound). A table whose
    versions the catalog manages is UnsupportedOperation, before any work. When the write fails, a
    table it declared is removed with the files written for it, and RayWriteError names the
    workers' cause (errors of the namespace itself are raised as they are).
    """
    import lance_ray

    if mode not in WRITE_MODES:
        raise InvalidInputError(f"mode must be one of {WRITE_MODES}, got {mode!r}")
    if isinstance(table_id, str):  # list() would make one part of each character
        raise InvalidInputError(f"A table identifier is a list of strings, not the string {table_id!r}")
    ns = as_namespace(namespace)
    table = list(in_default_namespace(list(table_id), ns.settings.default_namespace))  # a bare name too
    declared = _declare_if_new(ns, table, mode)
    try:
        lance_ray.write_lance(
            ds,
            table_id=table,
            mode="overwrite" if declared else mode,  # over the table just declared
            namespace_impl=registry.CLASS_PATH,
            namespace_properties=ns.properties,
            **options,
        )
    except BaseException as error:  # an interrupted write (Ctrl-C) leaves no declared table either
        outcome = _remove_uncommitted(ns, table, declared) if declared else "nothing was committed"
        if isinstance(error, LanceNamespaceError) or not isinstance(error, Exception):
            raise
        cause = _worker_cause(error)
        said = (str(cause).strip().splitlines() or [""])[0][:500].rstrip(".")
        raise RayWriteError(
            f"Writing {'.'.join(table)} with Ray failed ({type(cause).__name__}: {said}); {outcome}"
        ) from error


def _declare_if_new(ns: IcebergLanceNamespace, table: list[str], mode: str) -> _Declared | None:
    """Declare the table for ``create``, and for ``overwrite`` when it is missing: the entry
    declared, as ownership names it (None when nothing was declared). Raises TableNotFoundError
    for ``append`` to a missing table."""
    if mode != "create":
        try:
            described = ns.describe_table(DescribeTableRequest(id=table))
        except TableNotFoundError:
            if mode == "append":
                raise
        else:
            _refuse_managed(table, bool(described.managed_versioning))
            return None
    _refuse_managed(table, ns.settings.table_version_management)
    location = normalize_location(ns.declare_table(DeclareTableRequest(id=table)).location or "")
    declared = _live(ns, table)
    return _Declared(declared.entry if declared is not None and declared.location == location else None, location)


def _live(ns: IcebergLanceNamespace, table: list[str]) -> ResolvedTable | None:
    """The table the name holds now; None when it holds none, or one outside the root and the
    allowed locations (not one a write here declared)."""
    try:
        return ns.resolve_table(table)
    except (TableNotFoundError, PermissionDeniedError):
        return None


def _refuse_managed(table: list[str], managed: bool) -> None:
    """lance-ray commits by location, behind the catalog of a table whose versions it manages (the
    catalog then refuses the table's next version): refused before anything is written."""
    if managed:
        raise UnsupportedOperationError(
            f"The catalog manages the versions of {'.'.join(table)}, and lance-ray commits by location: "
            "write it with Daft (daft-lance) or lance_iceberg_ns.spark"
        )


def _remove_uncommitted(ns: IcebergLanceNamespace, table: list[str], declared: _Declared) -> str:
    """Remove the table this write declared if it is still only declared, with the files written
    at its location; what became of it, for the error. The name is looked up again, and anything
    but the very entry declared (another client's table that took the name meanwhile) is left
    alone, as is a table with a committed version."""
    try:
        live = _live(ns, table)
        if live is None or not declared.holds(live):
            return "the table it declared was dropped or replaced meanwhile, and nothing of it was removed"
        if not ns.remove_declared_table(table, live.place):  # looked at again as it is removed
            return "nothing was committed"
    except Exception:  # the write's own error is the one to raise
        logger.warning("The declared table %s could not be removed; drop it with drop_table", table, exc_info=True)
        return "the table it declared could not be removed (drop it with drop_table)"
    return "the table it declared was removed"


def _worker_cause(error: BaseException) -> BaseException:
    """The exception raised in the worker: Ray keeps it as ``cause``, Ray Data raises its own from it."""
    for _ in range(10):  # a few wrappers deep at most
        cause = getattr(error, "cause", None) or error.__cause__
        if not isinstance(cause, BaseException) or cause is error:
            break
        error = cause
    return error
