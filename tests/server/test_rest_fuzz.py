"""A bounded schemathesis run against /openapi.json: whatever it sends, no answer is a 5xx.

Every operation in the document gets a fixed number of generated requests (derandomized, so
each run sends the same ones), served by the bridge over the real local catalog.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error

from lance_iceberg_ns.server import create_app

EXAMPLES_PER_OPERATION = 6


@schemathesis.serializer("application/vnd.apache.arrow.stream")
def arbitrary_bytes(context: object, value: object) -> bytes:
    """Arrow bodies are documented as binary; whatever was generated is sent as bytes."""
    return value if isinstance(value, bytes) else str(value).encode()


def test_no_generated_request_gets_a_server_error(endpoint: str, tmp_path: object) -> None:
    app = create_app(properties={"endpoint": endpoint, "root": str(tmp_path)})
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 50
    failures: list[str] = []

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            response = case.call()
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:200]}")
            case.validate_response(response, checks=[not_a_server_error])

        try:
            check()
        except Exception as exc:  # collected, so one run reports every failing operation
            failures.append(f"{operation.label}: {exc}"[:400])
    assert not failures, "\n".join(failures)
