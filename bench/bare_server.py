"""The floor under any Python server for ``bench/data_plane.py``: the same search on a worker
thread behind Starlette and uvicorn, as our server runs it, with no catalog, no checks, no
request model and none of the bridge's code. It answers ``query_table`` for one dataset, named by
``BARE_DATASET``; ``data_plane.py`` starts it.

    BARE_DATASET=/path/to/dataset.lance .venv/bin/python -m uvicorn bare_server:app --port 8000
"""

from __future__ import annotations

import json
import os

import anyio.to_thread
import lance
import numpy as np
import pyarrow as pa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

DATASET = lance.dataset(os.environ["BARE_DATASET"])


def search(body: bytes) -> bytes:
    """A vector search as the benchmark asks it, answered as one Arrow IPC file."""
    request = json.loads(body)
    vector = np.asarray(request["vector"]["single_vector"], dtype=np.float32)
    columns = request["columns"]["column_names"]
    table = DATASET.to_table(columns=columns, nearest={"column": "vector", "q": vector, "k": request["k"]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


async def query(request: Request) -> Response:
    answer = await anyio.to_thread.run_sync(search, await request.body())
    return Response(answer, media_type="application/vnd.apache.arrow.file")


app = Starlette(routes=[Route("/v1/table/{id}/query", query, methods=["POST"])])
