"""The trainer's progress line: printed by ``sim2real-train`` after each PPO iteration, read back from the
job's log (CloudWatch Logs for AWS Batch, the Slurm log for HyperPod) by the Airflow side and by the
benchmark.

Format (one line, fields separated by one space)::

    [sim2real] iteration=12/40 timesteps=12288 mean_reward=-20.100 elapsed_s=15.2 eta_s=35.0

``iteration`` counts completed iterations out of ``max_iterations``; ``timesteps`` the environment steps of
this process; ``elapsed_s`` / ``eta_s`` are seconds since the training loop started / until training ends at
the mean iteration time: at ``max_iterations``, or earlier at the training time budget when one is set
(:func:`eta_seconds`). Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "[sim2real]"

#: Finds a progress line anywhere in a log message (a log agent may prepend a timestamp).
PROGRESS_RE = re.compile(re.escape(PREFIX) + r" iteration=\S+.*")
_FIELDS_RE = re.compile(
    re.escape(PREFIX) + r" iteration=(?P<iteration>\d+)/(?P<max_iterations>\d+) timesteps=(?P<timesteps>\d+) "
    r"mean_reward=(?P<mean_reward>\S+) elapsed_s=(?P<elapsed_s>[\d.]+) eta_s=(?P<eta_s>[\d.]+)"
)


@dataclass(frozen=True)
class Progress:
    """One progress line's values (units as in the module docstring)."""

    iteration: int
    max_iterations: int
    timesteps: int
    mean_reward: float
    elapsed_s: float
    eta_s: float


def eta_seconds(*, elapsed_s: float, iterations_done: int, max_iterations: int,
                time_budget_s: float | None = None) -> float:
    """Seconds until training ends, at the mean iteration time so far (``elapsed_s / iterations_done``).

    Without a time budget: the iterations left to ``max_iterations``. With one (``time_budget_s`` > 0): the
    fewer of those and of the iterations that still fit the budget, as the trainer starts another iteration
    only while ``elapsed + mean iteration time <= time_budget_s`` (it then stops and checkpoints).

    :return: seconds >= 0 (0 before the first iteration is done, nothing to extrapolate from).
    """
    if iterations_done <= 0:
        return 0.0
    per_iter = elapsed_s / iterations_done
    remaining = max(max_iterations - iterations_done, 0)
    if time_budget_s is not None and time_budget_s > 0 and per_iter > 0:
        fit = max(int((time_budget_s - elapsed_s) // per_iter), 0)
        remaining = min(remaining, fit)
    return per_iter * remaining


def format_progress(*, iteration: int, max_iterations: int, timesteps: int, mean_reward: float,
                    elapsed_s: float, eta_s: float) -> str:
    """The progress line for these values (mean reward to 3 decimals, seconds to 1)."""
    return (f"{PREFIX} iteration={iteration}/{max_iterations} timesteps={timesteps} "
            f"mean_reward={mean_reward:.3f} elapsed_s={elapsed_s:.1f} eta_s={eta_s:.1f}")


def find_progress(text: str) -> str | None:
    """The progress line in ``text`` (from the prefix to the end of the line), or None."""
    match = PROGRESS_RE.search(text)
    return match.group(0) if match else None


def parse_progress(text: str) -> Progress | None:
    """The values of the progress line in ``text``, or None when it holds none (or a malformed one)."""
    match = _FIELDS_RE.search(text)
    if not match:
        return None
    g = match.groupdict()
    try:
        return Progress(int(g["iteration"]), int(g["max_iterations"]), int(g["timesteps"]),
                        float(g["mean_reward"]), float(g["elapsed_s"]), float(g["eta_s"]))
    except ValueError:
        return None
