"""errors.public_message on input built to make regular expressions backtrack: how its time grows.

Every error answer of the REST server passes through ``public_message``, and a message may echo a
caller's input (a location, a filter, a table name). For each adversarial unit the message is the
unit repeated to ``--size`` characters and to eight times that; the ratio of the two times is about
8 when cleaning is linear, about 64 when it is quadratic. The best of ``--repeat`` runs is kept.

    .venv/bin/python bench/public_message.py [--size 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

from lance_iceberg_ns.errors.translation import public_message

UNITS = ["a-", "/a", "a.", "a.B", " ", "\t ", 'File "', "at ", ", ", "a:", "<a", "aError.", "E(", "a.rs:1"]
LINEAR_ENOUGH = 16  # a ratio above this (for 8 times the input) is not linear


def best_seconds(message: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        public_message(message)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    print(f"{'unit':>10} {'n ms':>9} {'8n ms':>9} {'ratio':>6}")
    worst = 0.0
    for unit in UNITS:
        small, large = ("x/" + unit * (size // len(unit)) for size in (options.size, options.size * 8))
        small_seconds, large_seconds = best_seconds(small, options.repeat), best_seconds(large, options.repeat)
        ratio = large_seconds / small_seconds
        worst = max(worst, ratio)
        print(f"{unit!r:>10} {small_seconds * 1000:9.1f} {large_seconds * 1000:9.1f} {ratio:6.1f}")
    print(f"worst ratio {worst:.1f} for 8 times the input (linear: about 8; at most {LINEAR_ENOUGH} passes)")
    return 0 if worst <= LINEAR_ENOUGH else 1


if __name__ == "__main__":
    raise SystemExit(main())
