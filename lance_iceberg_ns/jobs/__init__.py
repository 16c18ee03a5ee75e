"""Work on whole tables, above the namespace's operations: several managed tables published in one
atomic commit (``atomic``), a write planned on one machine and carried out on others
(``planned_writes``), versions written by location taken into the catalog (``adoption``), orphan
files removed (``orphans``), and a Lance directory namespace brought into the catalog
(``directory_import``)."""

from lance_iceberg_ns.jobs.adoption import adopt_versions_written_by_location, refuse_if_written_by_location
from lance_iceberg_ns.jobs.atomic import write_together
from lance_iceberg_ns.jobs.directory_import import ImportSummary, import_directory
from lance_iceberg_ns.jobs.orphans import OrphanFiles, find_orphan_files, remove_orphan_files

__all__ = [
    "ImportSummary",
    "OrphanFiles",
    "adopt_versions_written_by_location",
    "find_orphan_files",
    "import_directory",
    "refuse_if_written_by_location",
    "remove_orphan_files",
    "write_together",
]
