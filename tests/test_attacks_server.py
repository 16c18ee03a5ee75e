"""Attacks on the REST server: input built to be slow, requests sent slowly or never finished,
secrets in its configuration, and the catalog's own paths. The server must keep answering
everyone else, refuse with a 4xx, and show no secret and no internal path.
"""

from __future__ import annotations

import pytest

from lance_iceberg_ns.errors import public_message

# Strings that made the old message cleaning backtrack: each is repeated to about 200 KB.
ADVERSARIAL_UNITS = ["a-", "/a", "a.", "a.B", " ", "\t ", 'File "', "at ", ", ", "a:", "<a", "aError.", "E(", "a.rs:1"]


@pytest.mark.timeout(60)  # each took hours before; linear cleaning takes milliseconds
@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
def test_public_message_cleans_adversarial_input_and_cuts_it_short(unit: str) -> None:
    echoed = "x/" + unit * (200_000 // len(unit))
    message = public_message(f"A table location must be an absolute path, not '{echoed}'")
    assert message.startswith("A table location must be")
    assert len(message) <= 2048


def test_public_message_cuts_long_words_and_keeps_short_ones() -> None:
    location = "s3://bucket/" + "a" * 5000
    message = public_message(f"No Lance dataset at {location} (table wh.db.t)")
    assert message.startswith("No Lance dataset at s3://bucket/aaa") and message.endswith("aaa (table wh.db.t)")
    assert "…" in message and len(message) < 400
    assert public_message("No Lance dataset at /data/lake/wh/db/t") == "No Lance dataset at /data/lake/wh/db/t"


def test_public_message_still_drops_internals() -> None:
    java = (
        "load wh.db.t: org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: db.t"
        "\n\tat org.apache.iceberg.rest.CatalogHandlers.loadTable(CatalogHandlers.java:123)"
    )
    assert public_message(java) == "load wh.db.t: Table does not exist: db.t"
    rust = "Not found: t/_versions, /home/runner/work/lance/rust/lance-table/src/io/commit.rs:653:26"
    assert public_message(rust) == "Not found: t/_versions"
    python = "boom\n  File \"/srv/app/x.py\", line 3, in run\nKeyError: 'k'"
    assert public_message(python) == "boom\n'k'"
    assert public_message("ValueError(<foo.Bar object at 0x7f00aa>)") == "()"
    assert public_message("Table wh.db.ParseError not found") == "Table wh.db.ParseError not found"
