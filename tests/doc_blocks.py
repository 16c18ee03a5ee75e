"""Code blocks of the docs' pages, and the stand-ins they write for a live catalog, root and server
(the convention is in tests/test_doc_examples.py and docs/contributing.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CATALOG_STAND_INS = ("https://catalog.example.com", "http://catalog:8181")
ROOT_STAND_INS = ("s3://lake/lance", "s3://bucket/lance", "/data/lance")
SERVER_STAND_IN = "http://127.0.0.1:2333"
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*) -->$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    not_run: str | None  # the reason, for a block marked not run


def code_blocks(page: Path, language: str = "python") -> list[Block]:
    """The fenced blocks of one language on a page, each with the reason it is not run, if marked."""
    blocks, lines = [], page.read_text().splitlines()
    start = None
    for number, line in enumerate(lines):
        if start is None and line.strip() == f"```{language}":
            start = number
        elif start is not None and line.strip() == "```":
            before = next((lines[i].strip() for i in range(start - 1, -1, -1) if lines[i].strip()), "")
            marked = NOT_RUN.match(before)
            code = "\n".join(lines[start + 1 : number])
            blocks.append(Block(page.name, start + 1, language, code, marked["reason"] if marked else None))
            start = None
    return blocks


def with_live_values(code: str, endpoint: str, root: Path, server_uri: str | None = None) -> str:
    for stand_in in CATALOG_STAND_INS:
        code = code.replace(stand_in, endpoint)
    for stand_in in ROOT_STAND_INS:
        code = code.replace(stand_in, str(root))
    if server_uri is not None:
        code = code.replace(SERVER_STAND_IN, server_uri)
    return code
