"""Small statistics shared by the evaluator, the quality gate and the field evaluation (no heavy imports)."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054  # standard normal quantile for a two-sided 95 % interval


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927; e.g. Agresti & Coull 1998).

    :param successes: number of successes, ``0 <= successes <= n``.
    :param n: number of trials; ``n == 0`` gives the uninformative ``(0.0, 1.0)``.
    :param z: normal quantile (default: 95 % two-sided).
    :return: ``(low, high)``, both in ``[0, 1]``.
    :raises ValueError: when ``successes`` is outside ``[0, n]`` or ``n < 0``.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)  # exact bounds at the edges (no float residue)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values``: the smallest value with at least ``q`` of them at or below it
    (the ``ceil(q * n)``-th smallest; no interpolation, so the result is one of the values).

    :param values: the sample (any order).
    :param q: the quantile, ``0 < q <= 1`` (``0.5``: median, ``0.95``: p95).
    :return: that value, as a float.
    :raises ValueError: no values, or ``q`` outside ``(0, 1]``.
    """
    if not values:
        raise ValueError("nearest_rank of no values")
    if not 0 < q <= 1:
        raise ValueError(f"need 0 < q <= 1, got {q}")
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])
