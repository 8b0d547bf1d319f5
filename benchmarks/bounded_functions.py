"""Cost of the bounded arithmetic a file's ``operator.mul``/``add``/``pow``/``lshift`` resolve to.

``python -m benchmarks.bounded_functions`` prints, per function, the time per call of the bounded version and of
the plain ``operator`` function on small ints, and their ratio (median of 5 rounds of 200 000 calls).
"""

from __future__ import annotations

import operator
import statistics
import time

from common.python_functions import BOUNDED_FUNCTIONS


def _per_call(fn, a, b, n: int = 200_000) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn(a, b)
    return (time.perf_counter() - start) / n


def main() -> None:
    print("| function | bounded (us/call) | plain (us/call) | ratio |")
    print("|---|---|---|---|")
    for name, bounded in sorted(BOUNDED_FUNCTIONS.items()):
        plain = getattr(operator, name.split(".", 1)[1])
        b = statistics.median(_per_call(bounded, 7, 3) for _ in range(5))
        p = statistics.median(_per_call(plain, 7, 3) for _ in range(5))
        print(f"| `{name}` | {b * 1e6:.2f} | {p * 1e6:.2f} | {b / p:.1f}x |")


if __name__ == "__main__":
    main()
