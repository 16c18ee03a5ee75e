"""What one run of the compatibility suite found: each scenario on each server passed, or failed
with a reason (the exception's class and the first line of its message), written as JSON for
``scripts/compatibility.py``, which draws docs/compatibility.md from it.

A reason is made the same from run to run: ports, ids, timestamps and temporary paths in the
message are replaced by placeholders, so that a page drawn from one run matches the next.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_VARIABLE = "LANCE_ICEBERG_NS_COMPAT_RESULTS"  # where scripts/compatibility.py wants the results
REASON_LENGTH = 200

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PORT = re.compile(r"(127\.0\.0\.1|localhost):\d+")
_ID = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{8,}(?![0-9A-Za-z])")  # hex ids, timestamps in ms
_TEMPORARY = re.compile("(?:" + "|".join(re.escape(d) for d in {"/tmp", tempfile.gettempdir()}) + r")/[^\s'\",)\]]*")
_SPACES = re.compile(r"\s+")


def normalized(text: str) -> str:
    """``text`` with what changes from run to run replaced by placeholders, on one line."""
    text = _TEMPORARY.sub("<tmp>", text)
    text = _UUID.sub("<uuid>", text)
    text = _PORT.sub(r"\1:<port>", text)
    text = _ID.sub("<id>", text)
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= REASON_LENGTH else text[: REASON_LENGTH - 1] + "…"


def reason_of(error: BaseException) -> str:
    """The exception's class and the first line of its message, made the same from run to run."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return normalized(f"{type(error).__name__}: {first}" if first else type(error).__name__)


@dataclass(frozen=True)
class Outcome:
    """A scenario on a server: passed, or failed with ``reason``."""

    passed: bool
    reason: str = ""

    @classmethod
    def failure(cls, error: BaseException) -> Outcome:
        return cls(False, reason_of(error))


@dataclass
class ServerFacts:
    """What the page says of a server, and what the run measured (its start, in seconds)."""

    key: str
    title: str
    version: str
    storage: str
    setup: str
    started_seconds: float | None = None
    error: str = ""  # why it did not start, if it did not


@dataclass
class Results:
    """Every outcome of a run, by server and scenario, in the order the suite defines them."""

    scenarios: dict[str, str]  # key -> title
    servers: dict[str, ServerFacts] = field(default_factory=dict)
    outcomes: dict[str, dict[str, Outcome]] = field(default_factory=dict)

    def record(self, server: str, scenario: str, outcome: Outcome) -> None:
        self.outcomes.setdefault(server, {})[scenario] = outcome

    def as_json(self) -> dict[str, Any]:
        return {
            "scenarios": [{"key": key, "title": title} for key, title in self.scenarios.items()],
            "servers": [asdict(facts) for facts in self.servers.values()],
            "outcomes": {
                server: {scenario: asdict(outcome) for scenario, outcome in found.items()}
                for server, found in self.outcomes.items()
            },
        }

    def write(self, path: Path) -> None:
        """Write the results to ``path`` (aside, then renamed: a reader never sees half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.part")
        partial.write_text(json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n")
        partial.replace(path)
