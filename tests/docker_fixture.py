"""The official apache/iceberg-rest-fixture image through testcontainers, where Docker runs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FIXTURE_IMAGE = "apache/iceberg-rest-fixture:1.10.0"


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers, and why not."""
    if shutil.which("docker") is None:
        return False, "no docker client on PATH"
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"docker info failed: {exc}"
    if result.returncode != 0:
        return False, "no Docker engine answers `docker info`"
    try:
        import testcontainers  # noqa: F401
    except ImportError:
        return False, "testcontainers is not installed"
    return True, ""


@dataclass
class DockerFixture:
    endpoint: str


@contextmanager
def docker_rest_fixture() -> Iterator[DockerFixture]:
    """Start the official REST fixture; it stores its metadata under /tmp in the container."""
    import pytest

    available, reason = docker_available()
    if not available:
        pytest.skip(f"the apache/iceberg-rest-fixture tests need Docker: {reason}")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = DockerContainer(FIXTURE_IMAGE).with_exposed_ports(8181)
    with container:
        wait_for_logs(container, "Started", timeout=120)
        host = container.get_container_host_ip()
        yield DockerFixture(f"http://{host}:{container.get_exposed_port(8181)}")


COMPOSE_DIRECTORY = Path(__file__).resolve().parent.parent / "compose"


@contextmanager
def compose_rest_fixture() -> Iterator[DockerFixture]:
    """The compose stack (the official fixture over MinIO) through testcontainers' DockerCompose,
    so that the suite runs against S3-backed catalog metadata too."""
    import pytest

    available, reason = docker_available()
    if not available:
        pytest.skip(f"the compose stack needs Docker: {reason}")
    from testcontainers.compose import DockerCompose

    with DockerCompose(COMPOSE_DIRECTORY, compose_file_name="docker-compose.yml", wait=True) as stack:
        stack.wait_for("http://127.0.0.1:8181/v1/config")
        yield DockerFixture("http://127.0.0.1:8181")
