"""The run report's pictures: the training curve and the evaluation outcome, as PNG bytes.

* :func:`read_scalars` reads scalar series from the trainer's TensorBoard event files (local folder or
  ``s3://`` prefix, event files at any depth below it) with tensorboard's ``EventAccumulator``.
* :func:`training_curve_png` draws the mean episode return skrl logs (:data:`REWARD_TAG`) against the
  PPO iteration, with the band between the per-iteration min and max episode returns when logged.
* :func:`eval_outcome_png` draws the evaluation report's success rate with its Wilson 95 % interval
  against the quality gate's threshold, and each episode's return coloured by its outcome.
* :func:`round_success_png` draws the success rate and Wilson 95 % interval of each retraining round
  against the gate's threshold (lineage ``rounds``).
* :func:`sim_vs_field_png` draws the simulation's success rate beside the robots' field success rate of the same
  model, each with its Wilson 95 % interval, the gap between them, and each robot's own rate.

Figures are drawn with matplotlib's Agg canvas (no display, no pyplot global state) at a fixed size
and DPI, without the PNG ``Software`` tag: the same data gives the same bytes for one matplotlib
version. Nothing here writes to S3; :mod:`sim2real.orchestration.report` stores the bytes.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: skrl's per-iteration mean of the returns of the episodes that ended in it (``Agent.record_transition``).
REWARD_TAG = "Reward / Total reward (mean)"
#: Its min and max over the same episodes (drawn as a band when present).
REWARD_MIN_TAG = "Reward / Total reward (min)"
REWARD_MAX_TAG = "Reward / Total reward (max)"
#: TensorBoard event file names start with this (``events.out.tfevents.<time>.<host>.<pid>.<n>``).
EVENTS_PREFIX = "events.out.tfevents."

#: Pixel sizes at :data:`DPI` (width, height).
DPI = 100
TRAINING_CURVE_SIZE = (800, 450)
EVAL_OUTCOME_SIZE = (1000, 450)
ROUND_SUCCESS_SIZE = (800, 450)
SIM_VS_FIELD_SIZE = (800, 450)

_SUCCESS_COLOR = "#2ca02c"
_FAILURE_COLOR = "#d62728"


class PlotDataMissing(LookupError):
    """The data a picture is drawn from is not there (no event files, no reward tag, no episodes).

    The message says what was looked for and where; the report records it as the reason the picture
    was skipped.
    """


@dataclass(frozen=True)
class ScalarSeries:
    """One scalar tag over the run: ``steps[i]`` (skrl timestep: vectorised environment steps of one
    rank) and ``values[i]``, ordered by step, one value per step (the last one written wins after a
    resume rewrote a step)."""

    tag: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


def find_event_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Event files at any depth under ``folder`` (sorted by path); ``[]`` when the folder does not exist."""
    root = Path(folder)
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob(f"{EVENTS_PREFIX}*") if p.is_file())


def download_event_files(s3_uri: str, dest: str | os.PathLike[str], *, s3_hook: Any = None) -> list[Path]:
    """Copy every event file under the ``s3://bucket/prefix/`` ``s3_uri`` to ``dest`` (keeping the
    sub-folders below the prefix) with an Amazon provider ``S3Hook``.

    :param s3_hook: the hook to use (default: ``S3Hook()`` on the ``aws_default`` connection).
    :return: the local files, sorted; ``[]`` when the prefix holds no event file.
    :raises botocore.exceptions.ClientError: when the bucket cannot be listed or read.
    """
    if s3_hook is None:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        s3_hook = S3Hook()
    bucket, prefix = s3_hook.parse_s3_url(s3_uri)
    prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    client = s3_hook.get_conn()
    out = []
    for key in sorted(s3_hook.list_keys(bucket_name=bucket, prefix=prefix) or []):
        rel = key[len(prefix):]
        if not rel.rsplit("/", 1)[-1].startswith(EVENTS_PREFIX) or ".." in rel.split("/"):
            continue
        path = Path(dest, *rel.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(path))
        out.append(path)
    return sorted(out)


def _read_local(files: Sequence[Path], tags: Sequence[str]) -> dict[str, ScalarSeries]:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    found: dict[str, list[tuple[float, int, float]]] = {}
    for path in files:
        acc = EventAccumulator(str(path), size_guidance={SCALARS: 0})  # 0: keep every point
        acc.Reload()
        available = set(acc.Tags().get("scalars", []))
        for tag in tags:
            if tag in available:
                found.setdefault(tag, []).extend((e.wall_time, int(e.step), float(e.value)) for e in acc.Scalars(tag))
    out = {}
    for tag, events in found.items():
        by_step: dict[int, float] = {}
        for _wall, step, value in sorted(events):  # written later wins: a resumed run rewrote the step
            by_step[step] = value
        pairs = [(s, v) for s, v in sorted(by_step.items()) if math.isfinite(v)]
        out[tag] = ScalarSeries(tag=tag, steps=tuple(s for s, _ in pairs), values=tuple(v for _, v in pairs))
    return out


def read_scalars(events: str | os.PathLike[str], tags: Sequence[str] = (REWARD_TAG,), *,
                 s3_hook: Any = None) -> dict[str, ScalarSeries]:
    """Scalar series of ``tags`` from every TensorBoard event file under ``events``.

    :param events: a local folder, or an ``s3://bucket/prefix/`` (the checkpoint manifest's
        ``tensorboard_uri``); event files may sit in sub-folders (one per training process start).
    :param tags: scalar tags to read; a tag absent from every file is left out of the result.
    :param s3_hook: ``S3Hook`` for an ``s3://`` source (default: a new one).
    :return: ``{tag: ScalarSeries}``, non-finite values dropped.
    :raises PlotDataMissing: when there is no event file under ``events``.
    :raises botocore.exceptions.ClientError: when the S3 prefix cannot be read.
    """
    source = str(events)
    if source.startswith("s3://"):
        with tempfile.TemporaryDirectory(prefix="sim2real-events-") as tmp:
            files = download_event_files(source, tmp, s3_hook=s3_hook)
            if not files:
                raise PlotDataMissing(f"no TensorBoard event files ({EVENTS_PREFIX}*) under {source}")
            return _read_local(files, tags)
    files = find_event_files(source)
    if not files:
        raise PlotDataMissing(f"no TensorBoard event files ({EVENTS_PREFIX}*) under {source}")
    return _read_local(files, tags)


def reward_series(scalars: Mapping[str, ScalarSeries], *, source: str = "the event files") -> ScalarSeries:
    """The :data:`REWARD_TAG` series of :func:`read_scalars`' result.

    :raises PlotDataMissing: when the tag is absent or has no finite value (no episode ended yet).
    """
    series = scalars.get(REWARD_TAG)
    if series is None or not series.steps:
        raise PlotDataMissing(f"no finite {REWARD_TAG!r} value in {source} (tags found: "
                              f"{', '.join(sorted(scalars)) or 'none of the reward tags'})")
    return series


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _figure(size: tuple[int, int]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_training_curve(scalars: Mapping[str, ScalarSeries], *, run_key: str, task: str | None,
                        rollouts: int | None = None, num_envs: int | None = None) -> bytes:
    """PNG (:data:`TRAINING_CURVE_SIZE` pixels) of :func:`training_curve_figure`."""
    return _png(training_curve_figure(scalars, run_key=run_key, task=task, rollouts=rollouts, num_envs=num_envs))


def training_curve_figure(scalars: Mapping[str, ScalarSeries], *, run_key: str, task: str | None,
                          rollouts: int | None = None, num_envs: int | None = None):
    """The matplotlib ``Figure`` of the mean episode return per iteration (first line of its one axes).

    :param scalars: :func:`read_scalars`' result; must hold :data:`REWARD_TAG`.
    :param rollouts: environment steps per PPO iteration (the manifest's ``rollouts``): the x axis is
        ``step / rollouts`` = PPO iteration; without it the x axis is skrl's timestep.
    :param num_envs: environments per rank (the manifest's ``num_envs``), shown in the axis label.
    :raises PlotDataMissing: when :data:`REWARD_TAG` has no value.
    :raises ValueError: when ``rollouts`` is given and < 1.
    """
    series = reward_series(scalars)
    if rollouts is not None and rollouts < 1:
        raise ValueError(f"rollouts must be >= 1 environment step per iteration, got {rollouts}")
    scale = float(rollouts) if rollouts else 1.0
    fig = _figure(TRAINING_CURVE_SIZE)
    ax = fig.add_subplot()
    low, high = scalars.get(REWARD_MIN_TAG), scalars.get(REWARD_MAX_TAG)
    if low and high:
        lo, hi = dict(zip(low.steps, low.values, strict=True)), dict(zip(high.steps, high.values, strict=True))
        band = [s for s in series.steps if s in lo and s in hi]
        if band:
            ax.fill_between([s / scale for s in band], [lo[s] for s in band], [hi[s] for s in band],
                            color="#1f77b4", alpha=0.15, linewidth=0, label="min–max episode return")
    ax.plot([s / scale for s in series.steps], series.values, color="#1f77b4", linewidth=1.6,
            marker="o" if len(series.steps) <= 30 else None, markersize=3, label="mean episode return")
    if rollouts:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        envs = f" × {num_envs} envs" if num_envs else ""
        ax.set_xlabel(f"PPO iteration ({rollouts} steps{envs} each)")
    else:
        ax.set_xlabel("skrl timestep (environment steps per env)")
    ax.set_ylabel("episode return (reward units, sum over episode)")
    ax.set_title(f"Training curve — {task or 'unknown task'}\nrun {run_key}", fontsize=10)
    ax.grid(True, alpha=0.3)
    last = series.values[-1]
    ax.annotate(f"last {last:.3f}", xy=(series.steps[-1] / scale, last), xytext=(-4, 6),
                textcoords="offset points", ha="right", fontsize=8)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def training_curve_png(events: str | os.PathLike[str], *, run_key: str, task: str | None,
                       rollouts: int | None = None, num_envs: int | None = None, s3_hook: Any = None) -> bytes:
    """Read the reward series under ``events`` (folder or ``s3://`` prefix) and draw it
    (:func:`read_scalars` + :func:`plot_training_curve`).

    :raises PlotDataMissing: no event file, or no reward value in them.
    """
    scalars = read_scalars(events, (REWARD_TAG, REWARD_MIN_TAG, REWARD_MAX_TAG), s3_hook=s3_hook)
    reward_series(scalars, source=str(events))
    return plot_training_curve(scalars, run_key=run_key, task=task, rollouts=rollouts, num_envs=num_envs)


def eval_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The facts :func:`eval_outcome_png` draws, checked: ``episodes``, ``successes``, ``success_rate``,
    ``ci95`` (the report's, else Wilson's from the counts), ``returns`` and ``outcomes`` (per episode,
    ``None`` when the report has none or their length is not ``episodes``), ``seeds`` (or ``None``).

    :raises ValueError: naming the field when ``episodes``/``successes`` are missing or inconsistent.
    """
    from sim2real.contract.stats import wilson_interval

    n, k = report.get("episodes"), report.get("successes")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"evaluation report field 'episodes' must be an integer >= 1, got {n!r}")
    if not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"evaluation report field 'successes' must be an integer in [0, {n}], got {k!r}")
    ci = report.get("ci95")
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci)):
        ci = wilson_interval(k, n)
    returns = report.get("returns")
    outcomes = report.get("successes_per_episode")
    seeds = report.get("seeds")
    return {
        "episodes": n, "successes": k, "success_rate": k / n, "ci95": (float(ci[0]), float(ci[1])),
        "returns": [float(r) for r in returns] if isinstance(returns, list) and len(returns) == n else None,
        "outcomes": [bool(o) for o in outcomes] if isinstance(outcomes, list) and len(outcomes) == n else None,
        "seeds": list(seeds) if isinstance(seeds, list) and len(seeds) == n else None,
    }


def eval_outcome_png(report: Mapping[str, Any], *, run_key: str, threshold: float | None,
                     gate_metric: str = "success_rate", task: str | None = None) -> bytes:
    """PNG (:data:`EVAL_OUTCOME_SIZE` pixels) of :func:`eval_outcome_figure`."""
    return _png(eval_outcome_figure(report, run_key=run_key, threshold=threshold, gate_metric=gate_metric,
                                    task=task))


def eval_outcome_figure(report: Mapping[str, Any], *, run_key: str, threshold: float | None,
                        gate_metric: str = "success_rate", task: str | None = None):
    """The matplotlib ``Figure`` of an evaluation report (``runs/<run_key>/eval/report.json``).

    Left: the success rate with its Wilson 95 % interval and the gate threshold (dashed), green when
    the gate's metric reaches it. Right: each episode's return, green for a success, red for a failure
    (only the success count when the report has no per-episode data).

    :param threshold: the quality gate's ``min_success_rate`` (``None``: no line drawn).
    :param gate_metric: ``"success_rate"`` or ``"ci95_lower"`` (what the gate compares with ``threshold``).
    :raises ValueError: see :func:`eval_summary`; ``threshold`` outside [0, 1]; unknown ``gate_metric``.
    """
    if gate_metric not in ("success_rate", "ci95_lower"):
        raise ValueError(f"gate_metric must be 'success_rate' or 'ci95_lower', got {gate_metric!r}")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a success rate in [0, 1], got {threshold!r}")
    facts = eval_summary(report)
    rate, (lo, hi) = facts["success_rate"], facts["ci95"]
    value = lo if gate_metric == "ci95_lower" else rate
    passed = None if threshold is None else value >= threshold
    color = "#1f77b4" if passed is None else (_SUCCESS_COLOR if passed else _FAILURE_COLOR)

    fig = _figure(EVAL_OUTCOME_SIZE)
    left, right = fig.subplots(1, 2, width_ratios=[1, 3])
    left.errorbar([0], [rate], yerr=[[rate - lo], [hi - rate]], fmt="o", color=color, capsize=8,
                  markersize=8, label="success rate, Wilson 95% CI")
    if threshold is not None:
        on = "CI lower bound" if gate_metric == "ci95_lower" else "success rate"
        left.axhline(threshold, color="black", linestyle="--", linewidth=1,
                     label=f"gate: {on} ≥ {threshold:.3f}")
    left.set_xlim(-1, 1)
    left.set_xticks([0], [f"{facts['successes']}/{facts['episodes']}"])
    left.set_ylim(0, 1)
    left.set_ylabel("success rate (fraction of episodes)")
    left.set_title(f"{rate:.3f} [{lo:.3f}, {hi:.3f}]"
                   + ("" if passed is None else (" — passed" if passed else " — failed")), fontsize=9)
    left.grid(True, axis="y", alpha=0.3)
    left.legend(loc="upper center", fontsize=7)

    if facts["returns"] is not None:
        xs = list(range(1, facts["episodes"] + 1))
        outcomes = facts["outcomes"]
        colors = ["#7f7f7f"] * len(xs) if outcomes is None else \
            [_SUCCESS_COLOR if ok else _FAILURE_COLOR for ok in outcomes]
        from matplotlib.ticker import MaxNLocator

        right.bar(xs, facts["returns"], color=colors, width=0.8)
        right.xaxis.set_major_locator(MaxNLocator(integer=True))
        right.axhline(0, color="black", linewidth=0.6)
        if outcomes is not None:
            from matplotlib.patches import Patch

            right.legend(handles=[Patch(color=_SUCCESS_COLOR, label=f"success ({sum(outcomes)})"),
                                  Patch(color=_FAILURE_COLOR, label=f"failure ({len(outcomes) - sum(outcomes)})")],
                         fontsize=8, loc="best")
        seeds = facts["seeds"]
        first = f" (seeds {seeds[0]}…{seeds[-1]})" if seeds else ""
        right.set_xlabel(f"episode{first}")
        right.set_ylabel("episode return (reward units)")
        right.set_title("per-episode return and outcome", fontsize=9)
        right.grid(True, axis="y", alpha=0.3)
    else:
        right.set_axis_off()
        right.text(0.5, 0.5, f"{facts['successes']} of {facts['episodes']} episodes succeeded\n"
                             "(the report has no per-episode returns)", ha="center", va="center")
    fig.suptitle(f"Evaluation outcome — {task or report.get('task') or 'unknown task'}\nrun {run_key}",
                 fontsize=10)
    return fig


def round_success_png(rounds: Mapping[str, Any], *, run_key: str, threshold: float | None,
                      gate_metric: str = "success_rate") -> bytes:
    """PNG (:data:`ROUND_SUCCESS_SIZE` pixels) of :func:`round_success_figure`."""
    return _png(round_success_figure(rounds, run_key=run_key, threshold=threshold, gate_metric=gate_metric))


def round_success_figure(rounds: Mapping[str, Any], *, run_key: str, threshold: float | None,
                         gate_metric: str = "success_rate"):
    """The matplotlib ``Figure`` of the retraining rounds (the lineage's ``rounds`` entry,
    :func:`sim2real.orchestration.stages.rounds.lineage_entry`).

    Each round's success rate with its Wilson 95 % interval, green when it passed the gate, red when not; the
    gate threshold dashed; the x axis runs to ``max_rounds`` (rounds not reached are left empty).

    :param threshold: the quality gate's ``min_success_rate`` (``None``: no line drawn).
    :param gate_metric: ``"success_rate"`` or ``"ci95_lower"`` (what the gate compares with ``threshold``).
    :raises ValueError: no evaluated round; a round's rate outside its interval; ``threshold`` outside [0, 1];
        unknown ``gate_metric``.
    """
    if gate_metric not in ("success_rate", "ci95_lower"):
        raise ValueError(f"gate_metric must be 'success_rate' or 'ci95_lower', got {gate_metric!r}")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a success rate in [0, 1], got {threshold!r}")
    results = list(rounds.get("rounds") or [])
    if not results:
        raise ValueError("no evaluated round to draw")
    for r in results:
        lo, hi = r["ci95"]
        if not lo <= r["success_rate"] <= hi:
            raise ValueError(f"round {r['round']}: success rate {r['success_rate']} is outside its interval {r['ci95']}")
    last = max(int(rounds.get("max_rounds") or 1), max(int(r["round"]) for r in results))

    fig = _figure(ROUND_SUCCESS_SIZE)
    ax = fig.subplots()
    for r in results:
        rate, (lo, hi) = float(r["success_rate"]), r["ci95"]
        ax.errorbar([r["round"]], [rate], yerr=[[rate - lo], [hi - rate]], fmt="o", capsize=8, markersize=8,
                    color=_SUCCESS_COLOR if r.get("passed") else _FAILURE_COLOR)
        ax.annotate(f"{rate:.3f}\n{r['successes']}/{r['episodes']}", (r["round"], rate), textcoords="offset points",
                    xytext=(12, -4), fontsize=8)
    ax.plot([r["round"] for r in results], [r["success_rate"] for r in results], color="#7f7f7f", linewidth=0.8)
    if threshold is not None:
        on = "CI lower bound" if gate_metric == "ci95_lower" else "success rate"
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"gate: {on} ≥ {threshold:.3f}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0.5, last + 0.5)
    ax.set_xticks(list(range(1, last + 1)))
    ax.set_ylim(-0.03, 1.05)  # a round at 0 stays visible
    ax.set_xlabel(f"retraining round (max_rounds {rounds.get('max_rounds')})")
    ax.set_ylabel("success rate (fraction of episodes), Wilson 95% CI")
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Success rate per round\nrun {run_key}", fontsize=10)
    return fig


def sim_vs_field_png(sim: Mapping[str, Any], field: Mapping[str, Any], *, run_key: str,
                     field_threshold: float | None = None) -> bytes:
    """PNG (:data:`SIM_VS_FIELD_SIZE` pixels) of :func:`sim_vs_field_figure`."""
    return _png(sim_vs_field_figure(sim, field, run_key=run_key, field_threshold=field_threshold))


def sim_vs_field_figure(sim: Mapping[str, Any], field: Mapping[str, Any], *, run_key: str,
                        field_threshold: float | None = None):
    """The matplotlib ``Figure`` of the sim-to-real gap of one model.

    Left, the simulation: the evaluation's success rate with its Wilson 95 % interval (``sim``: the evaluation
    report's ``success_rate``, ``ci95``, ``successes``, ``episodes``). Right, the field: the robots' success rate
    with its interval (``field``: one model version of :func:`sim2real.orchestration.field.field_summary`: ``rate``,
    ``ci95``, ``successes``, ``n``, ``robots``), and each robot's own rate as a small grey point. The gap (field
    minus simulation, in percentage points) is written between them; the field threshold, when given, dashed.

    :raises ValueError: a rate outside its interval, no field episode, ``field_threshold`` outside [0, 1].
    """
    if field_threshold is not None and not 0.0 <= field_threshold <= 1.0:
        raise ValueError(f"field_threshold must be a success rate in [0, 1], got {field_threshold!r}")
    if not field.get("n"):
        raise ValueError("no field episode to draw")
    points = [("simulation", float(sim["success_rate"]), sim["ci95"], sim["successes"], sim["episodes"]),
              ("field (robots)", float(field["rate"]), field["ci95"], field["successes"], field["n"])]
    for name, rate, (lo, hi), _, _ in points:
        if not lo <= rate <= hi:
            raise ValueError(f"{name}: success rate {rate} is outside its interval {[lo, hi]}")

    fig = _figure(SIM_VS_FIELD_SIZE)
    ax = fig.subplots()
    for x, (_, rate, (lo, hi), successes, n) in enumerate(points):
        color = "#1f77b4" if x == 0 else "#ff7f0e"
        ax.errorbar([x], [rate], yerr=[[rate - lo], [hi - rate]], fmt="o", capsize=10, markersize=9, color=color)
        ax.annotate(f"{rate:.3f}  [{lo:.3f}, {hi:.3f}]\n{successes}/{n} episodes", (x, rate),
                    textcoords="offset points", xytext=(14, -6), fontsize=8)
    robots = field.get("robots") or {}
    for i, (thing, r) in enumerate(sorted(robots.items())):
        if r.get("n"):
            x = 0.6 + 0.3 * (i + 1) / (len(robots) + 1)  # left of the field's own point, in robot order
            ax.plot([x], [r["successes"] / r["n"]], "o", color="#7f7f7f", markersize=4)
            ax.annotate(thing, (x, r["successes"] / r["n"]), textcoords="offset points", xytext=(0, -11),
                        fontsize=6, ha="center", color="#7f7f7f")
    gap = (points[1][1] - points[0][1]) * 100.0
    ax.text(0.5, 0.06, f"gap {gap:+.1f} pp", transform=ax.transAxes, ha="center", fontsize=10, fontweight="bold")
    if field_threshold is not None:
        ax.axhline(field_threshold, color="black", linestyle="--", linewidth=1,
                   label=f"field threshold: CI lower bound ≥ {field_threshold:.3f}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(-0.5, 1.6)
    ax.set_xticks([0, 1], [p[0] for p in points])
    ax.set_ylim(-0.03, 1.05)
    ax.set_ylabel("success rate (fraction of episodes), Wilson 95% CI")
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Simulation vs field, one model\nrun {run_key}", fontsize=10)
    return fig
