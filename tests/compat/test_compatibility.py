"""The compatibility suite: the same scenarios (``scenarios.SCENARIOS``) on every Iceberg REST
server the run can start here (``servers``), each outcome recorded, and held to what
docs/compatibility.md says of it.

A scenario that fails is recorded with its reason and the suite goes on. On the local catalog,
the reference, every scenario must pass. On the others a scenario may fail (features land, and
servers differ), but the page must say so: each test asserts that the page's cell for its server
and scenario shows exactly this run's outcome, and the last test that the page lists every
scenario and server of the run. ``python scripts/compatibility.py`` runs this module and redraws
the page; the servers start once for the module and their downloads are cached.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lance_namespace import CreateNamespaceRequest

from ..helpers import script_module
from ..seaweed import SeaweedFS
from . import seaweed_catalog
from .nessie import nessie
from .nessie import server_facts as nessie_facts
from .outcomes import RESULTS_VARIABLE, Outcome, Results, reason_of
from .scenarios import SCENARIOS, Scene
from .servers import CompatServer, Unstarted, local, local_facts, timed_start

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "compatibility.md"
REFERENCE = "local"
SERVERS = ("local", "seaweedfs", "nessie")
REDRAW = "python scripts/compatibility.py"
generator = script_module(ROOT / "scripts" / "compatibility.py")
logger = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Results, Path]]:
    """This run's results, and the file they are written to after each scenario."""
    path = Path(os.environ.get(RESULTS_VARIABLE) or tmp_path_factory.getbasetemp() / "compatibility.json")
    yield Results({key: title for key, (title, _) in SCENARIOS.items()}), path


@pytest.fixture(scope="module")
def compat_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompatServer | Unstarted]:
    facts = local_facts()
    yield from timed_start(facts, lambda: local(tmp_path_factory.mktemp("compat-local"), facts))


@pytest.fixture(scope="module")
def compat_seaweedfs(request: pytest.FixtureRequest) -> Iterator[CompatServer | Unstarted]:
    """The session's ``weed mini`` (started here if no test before has) and a table bucket on it."""
    facts = seaweed_catalog.server_facts()
    yield from timed_start(
        facts, lambda: seaweed_catalog.table_bucket_catalog(request.getfixturevalue("seaweedfs"), facts)
    )


@pytest.fixture(scope="module")
def compat_nessie(seaweedfs: SeaweedFS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompatServer | Unstarted]:
    facts = nessie_facts()
    yield from timed_start(facts, lambda: nessie(seaweedfs, tmp_path_factory.mktemp("compat-nessie"), facts))


def run(server: CompatServer | Unstarted, key: str, tmp: Path) -> tuple[Outcome, BaseException | None]:
    """Run scenario ``key`` on ``server`` in a namespace of its own: the outcome, and the error if any."""
    if isinstance(server, Unstarted):
        return Outcome(False, f"the server did not start: {reason_of(server.error)}"), server.error
    _, scenario = SCENARIOS[key]
    namespace = [server.warehouse, key]
    try:
        with server.namespace() as ns:
            if key != "namespaces":
                ns.create_namespace(CreateNamespaceRequest(id=namespace))
            scenario(Scene(server, ns, namespace, tmp))
    except (Exception, pytest.fail.Exception) as exc:
        logger.info("%s on %s failed", key, server.key, exc_info=True)
        return Outcome.failure(exc), exc
    return Outcome(True), None


CASES = [pytest.param(server, key, id=f"{server}-{key}") for server in SERVERS for key in SCENARIOS]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("server_key", "scenario"), CASES)
def test_scenario(
    server_key: str, scenario: str, request: pytest.FixtureRequest, results: tuple[Results, Path], tmp_path: Path
) -> None:
    found, path = results
    server: CompatServer | Unstarted = request.getfixturevalue(f"compat_{server_key}")
    found.servers[server_key] = server.facts
    outcome, error = run(server, scenario, tmp_path)
    found.record(server_key, scenario, outcome)
    found.write(path)
    if server_key == REFERENCE and error is not None:
        raise AssertionError(f"{scenario} fails on the reference server: {outcome.reason}") from error
    page = generator.cells(PAGE.read_text())
    shown = page.get((SCENARIOS[scenario][0], server.facts.title))
    assert shown == generator.cell(vars(outcome)), (
        f"docs/compatibility.md shows {shown!r} for {scenario} on {server.facts.title}, this run found "
        f"{generator.cell(vars(outcome))!r}: redraw the page ({REDRAW})"
    )


def test_the_page_shows_every_server_and_scenario_of_the_run(results: tuple[Results, Path]) -> None:
    """After the scenarios (the last test of the module): the page's tables are the run's, and
    every scenario that passes on the reference is on the page."""
    found, _ = results
    ran = {(server, key) for server, outcomes in found.outcomes.items() for key in outcomes}
    if ran != {(server, key) for server in SERVERS for key in SCENARIOS}:
        pytest.skip("only part of the suite ran: the page is held to whole runs")
    page = PAGE.read_text()
    drawn = generator.drawn(found.as_json())
    assert generator.between(page, "outcomes") == drawn["outcomes"], f"redraw the page ({REDRAW})"
    shown = {scenario for scenario, _ in generator.cells(page)}
    passing = [SCENARIOS[key][0] for key, outcome in found.outcomes[REFERENCE].items() if outcome.passed]
    assert passing and set(passing) <= shown
