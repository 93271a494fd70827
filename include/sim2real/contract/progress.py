"""The trainer's progress line: printed by ``sim2real-train`` after each PPO iteration, read back from the
job's log (CloudWatch Logs for AWS Batch, the Slurm log for HyperPod) by the Airflow side and by the
benchmark.

Format (one line, fields separated by one space)::

    [sim2real] iteration=12/40 timesteps=12288 mean_reward=-20.100 elapsed_s=15.2 eta_s=35.0

``iteration`` counts completed iterations out of ``max_iterations``; ``timesteps`` the environment steps of
this process; ``elapsed_s`` / ``eta_s`` are seconds since the training loop started / until
``max_iterations`` at the mean iteration time. Standard library only.
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
