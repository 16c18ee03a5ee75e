"""``serve``'s run: its options as ``ServeSettings``, a catalog that must answer before serving,
Lance's runtime given its threads, worker processes, and a graceful stop that leaves the
process's environment as it found it.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lance_iceberg_ns.cli.base import EXIT_UNEXPECTED, CliError, CliState, bound_socket

if TYPE_CHECKING:
    from lance_iceberg_ns.config.settings import Settings
    from lance_iceberg_ns.server.settings import ServeSettings


def settings_from_options(state: CliState, options: Mapping[str, Any], from_file: Mapping[str, str]) -> ServeSettings:
    """The server's settings from ``serve``'s parsed options, the bridge properties the common
    options and the environment resolve to, and ``from_file`` (the ``--config-file``'s server
    variables, which the environment's win over); what the server refuses is a usage error."""
    from lance_iceberg_ns.server.settings import ServeSettings, ServeSettingsError

    properties = state.resolved()  # an unknown property key is a usage error, with a hint
    try:
        settings = ServeSettings.from_options(
            options, properties, {**from_file, **os.environ}, auth_tokens=options["auth_tokens"]
        )
    except ServeSettingsError as exc:
        raise click.UsageError(str(exc)) from None
    _warn_if_the_root_is_relative(properties.get("root"), settings)
    return settings


def _warn_if_the_root_is_relative(given: object, settings: ServeSettings) -> None:
    """Say so when the storage root was given as a relative path: it is taken from the working
    directory, and a server started from another one would look for every table elsewhere (and
    refuse each as outside its root)."""
    if not isinstance(given, str) or "://" in given:
        return
    path = given.removeprefix("file:")
    if path and not os.path.isabs(os.path.expanduser(path)):
        click.echo(
            f"Warning: the storage root {path!r} is a relative path, taken as {settings.shown_root()} from the "
            f"working directory; give it as an absolute path, so that a server started elsewhere finds the same tables",
            err=True,
        )


MAX_LANCE_WORKERS = 1024


def _leave_a_core_to_python() -> None:
    """Lance's async runtime (tokio) runs one worker thread per core unless told otherwise; in a
    server, each of them competes for the cores with the one Python thread that every request
    needs (its HTTP, validation and catalog check: one at a time, under the GIL). One worker fewer
    than the cores (at least one) took a sixth off a query's latency on two cores; the operator's
    own ``TOKIO_WORKER_THREADS`` wins, if it is a whole number from 1 to ``MAX_LANCE_WORKERS``
    (tokio panics on anything else at its first use, and the server then hangs). Set before the
    runtime starts (on first use), in the environment the workers inherit."""
    given = os.environ.get("TOKIO_WORKER_THREADS")
    if given is None:
        os.environ["TOKIO_WORKER_THREADS"] = str(max(1, available_cores() - 1))
    elif not (given.isascii() and given.isdigit() and 1 <= int(given) <= MAX_LANCE_WORKERS):
        raise click.UsageError(
            f"TOKIO_WORKER_THREADS must be a whole number from 1 to {MAX_LANCE_WORKERS}, got {given[:40]!r}"
        )


def _warn_if_workers_may_outgrow_the_memory(settings: ServeSettings) -> None:
    """Say so when the data workers may, all at once, allocate more than this machine has: each
    may take its ceiling (``--data-worker-memory-mb``), as many at once as there are data threads in
    each server process (``--workers``), and the system's OOM killer then ends processes where a
    ceiling would have answered 400."""
    from lance_iceberg_ns.server.capacity import default_worker_memory_mb, physical_memory_mb
    from lance_iceberg_ns.server.settings import DEFAULT_DATA_THREADS

    threads = settings.data_threads or DEFAULT_DATA_THREADS
    each = settings.data_worker_memory_mb or default_worker_memory_mb(threads, settings.workers)
    workers = threads * settings.workers
    most = workers * each
    machine = physical_memory_mb()
    if machine and most > machine:
        click.echo(
            f"Warning: {workers} data workers ({threads} data threads in each of {settings.workers} server "
            f"processes) of {each} MiB each may allocate {most} MiB at once, more than this machine's {machine} MiB: "
            f"lower --data-worker-memory-mb to at most {machine * 3 // 4 // workers}, --data-threads or --workers",
            err=True,
        )


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by the container's CPU quota
    (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), as tokio counts them for its default."""
    cores = len(os.sched_getaffinity(0))
    quota = _cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def _cpu_quota() -> float | None:
    """The tightest cgroup CPU quota, in cores, over the process's own cgroup and its parents
    (a systemd ``CPUQuota``, a container's limit), v2 and v1; None when there is none ("max",
    -1) or none to read."""
    quotas = [quota for directory in _cgroup_directories() if (quota := _quota_in(*directory)) is not None]
    return min(quotas) if quotas else None


def _cgroup_directories() -> list[tuple[str, bool]]:
    """The directories of the process's cgroups and their parents (v2 or v1: ``True`` for v2),
    from ``/proc/self/cgroup``; the roots alone when it cannot be read."""
    paths = {(True, "/"), (False, "/")}
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and not controllers:
            paths.add((True, path))
        elif "cpu" in controllers.split(","):
            paths.add((False, path))
    found = []
    for v2, path in paths:
        parts = [part for part in path.split("/") if part and part not in (".", "..")]
        for depth in range(len(parts) + 1):
            found.append(("/".join(["/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu", *parts[:depth]]), v2))
    return sorted(set(found))


def _quota_in(directory: str, v2: bool) -> float | None:
    if v2:  # "200000 100000", or "max 100000"
        quota, _, period = (_read(f"{directory}/cpu.max") or "").partition(" ")
    else:  # -1 for none
        quota = _read(f"{directory}/cpu.cfs_quota_us") or ""
        period = _read(f"{directory}/cpu.cfs_period_us") or ""
    whole = [number.isascii() and number.isdigit() and len(number) <= 18 for number in (quota, period)]
    if not all(whole) or int(period) == 0:
        return None
    return int(quota) / int(period)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def wait_for_catalog(settings: ServeSettings) -> None:
    """Return once the catalog answers ``/v1/config``; ServiceUnavailable after ``catalog_wait`` seconds."""
    from lance_namespace.errors import ServiceUnavailableError

    from lance_iceberg_ns.server.health import CatalogProbe

    seconds = settings.catalog_wait
    if seconds <= 0:
        return
    bridge = settings.bridge_settings()
    probe = CatalogProbe(bridge.endpoint, None if settings.forward_bearer_token else bridge.auth_token)
    deadline = time.monotonic() + seconds
    while True:
        readiness = probe.ask()
        if readiness.ready:
            if not settings.forward_bearer_token:
                check_own_credential(bridge)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceUnavailableError(
                f"{readiness.reason} at {settings.shown_endpoint()}, after waiting {seconds:g} s (--catalog-wait): "
                "not serving"
            )
        time.sleep(min(1.0, left))


def check_own_credential(bridge: Settings) -> None:
    """With OAuth2 client credentials (``credential``), ask the token endpoint for a token once,
    with pyiceberg's own OAuth2 manager: a server whose credentials the catalog refuses would
    otherwise start, report ready, and answer every request 401, as though the callers were at
    fault. UnauthenticatedError (or ServiceUnavailableError) naming neither the secret nor the URL."""
    import requests
    from lance_namespace.errors import ServiceUnavailableError, UnauthenticatedError
    from pyiceberg.catalog.rest.auth import AuthManagerFactory

    from lance_iceberg_ns.catalog.client_properties import catalog_properties
    from lance_iceberg_ns.errors.translation import http_status

    if not bridge.credential:
        return
    oauth2: Any = catalog_properties(bridge, "")["auth"]
    try:
        AuthManagerFactory.create("oauth2", dict(oauth2["oauth2"])).auth_header()
    except (requests.RequestException, ValueError, KeyError) as exc:
        status = http_status(exc)
        if status in (400, 401, 403):
            raise UnauthenticatedError(
                f"The catalog's OAuth2 token endpoint refused this server's own client credentials (`credential`, "
                f"HTTP {status}): not serving"
            ) from None
        raise ServiceUnavailableError(
            f"This server's OAuth2 client credentials could not be checked at the token endpoint "
            f"({type(exc).__name__}): not serving"
        ) from None


# What serving sets in its own environment for Lance and the workers; put back once it has stopped
# (the command may run in a process that goes on: a test, a notebook).
SERVING_VARIABLES = ("TOKIO_WORKER_THREADS", "PROMETHEUS_MULTIPROC_DIR", "LANCE_LOG")


@contextlib.contextmanager
def environment_kept(names: tuple[str, ...] = SERVING_VARIABLES) -> Iterator[None]:
    """The variables ``names`` as they were before, whatever the block sets."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# How long a worker may take to answer its supervisor's health check, its start included (uvicorn's
# 5 s killed every worker on a loaded host, where the imports alone took 8.7 s). A worker that ends
# is seen at once whatever this is (``Supervisor``): it only bounds a worker alive but silent.
WORKER_ANSWER_SECONDS = 60


def run_server(settings: ServeSettings, state: CliState) -> None:
    """Bind, say where, and serve until SIGTERM or Ctrl-C (then let requests in flight finish for
    ``--graceful-timeout`` seconds)."""
    import uvicorn

    from lance_iceberg_ns.server.connections import Connections
    from lance_iceberg_ns.server.factory import AppFactory, DeadlineProtocolFactory, Supervisor, WorkerFailedToStart
    from lance_iceberg_ns.server.logs import log_config

    _leave_a_core_to_python()
    _warn_if_workers_may_outgrow_the_memory(settings)
    workers = settings.workers
    # bound before anything starts (the wait for the catalog, data workers): a busy port is one line at
    # once; --port 0 prints the port it got. Nothing listens on it before the app can answer.
    listening = bound_socket(settings.host, settings.port)
    protocol = DeadlineProtocolFactory(settings.request_read_timeout, connections=Connections(settings.max_connections))
    with listening:  # closed however serving ends (a command may run in a process that goes on)
        wait_for_catalog(settings)
        config = uvicorn.Config(
            AppFactory(settings) if workers > 1 else AppFactory(settings).build(),  # one process: errors surface here
            factory=workers > 1,
            host=settings.host,
            port=settings.port,
            workers=workers,
            access_log=settings.access_log,
            http=protocol,  # type: ignore[arg-type]
            log_config=log_config(settings.log_format, debug=state.debug),
            timeout_graceful_shutdown=settings.graceful_timeout,  # type: ignore[arg-type]
            timeout_worker_healthcheck=WORKER_ANSWER_SECONDS,
        )

        def announce() -> None:  # once the address printed takes connections
            click.echo(
                f"Lance REST Namespace on {_uri(settings.host, listening)} over the Iceberg catalog at "
                f"{settings.shown_endpoint()}, tables under {settings.shown_root()}"
            )
            sys.stdout.flush()

        # With workers, the first to have built its app opens the port: until then a client is refused
        # (and retries) instead of waiting on a port that no process answers yet.
        supervisor = Supervisor(config, sockets=[listening], opened=announce) if workers > 1 else None
        if supervisor is None:
            listening.listen(config.backlog)  # the app is built already
            announce()
        metrics_directory = _metrics_directory(workers)  # once bound: a port taken leaves none behind
        try:
            if supervisor is not None:
                supervisor.run()
            else:
                try:
                    uvicorn.Server(config).run(sockets=[listening])
                finally:  # stopped (after Ctrl-C, uvicorn raises it again): requests it cut off may still run
                    state.abandoned_threads = True
        finally:
            if metrics_directory:
                shutil.rmtree(metrics_directory, ignore_errors=True)
        if supervisor is not None:
            try:
                supervisor.end_as_stopped()
            except WorkerFailedToStart as failed:  # one line, as one process that cannot start fails
                raise CliError(str(failed), "WorkerFailedToStart", EXIT_UNEXPECTED) from None


def _uri(host: str, listening: socket.socket) -> str:
    shown_host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    return f"http://{shown_host}:{listening.getsockname()[1]}"


def _metrics_directory(workers: int) -> str | None:
    """With several workers, a fresh directory for prometheus-client's multiprocess mode (unless
    the operator gave one in PROMETHEUS_MULTIPROC_DIR); the workers inherit it."""
    if workers < 2 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    directory = tempfile.mkdtemp(prefix="lance-iceberg-ns-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory
