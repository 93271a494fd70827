"""``make demo``: run the real ``sim_to_real`` DAG end to end against the local AWS sandbox.

What it does, in order:

1. starts the sandbox (moto in this process, gap patches, responders) and provisions every
   resource infra/ would create, which yields the environment config;
2. initialises a fresh Airflow home (SQLite) under ``.sandbox/`` and points Airflow's AWS
   connection and the ``sim2real_environment`` Variable at the sandbox;
3. starts the emulated approver (it approves the run's model package once the approval sensor
   is polling, as a person in SageMaker Studio would);
4. runs the DAG with ``dag.test()`` (real operators, real triggers run inline), then each retraining round a
   run triggers (``max_rounds`` > 1, the gate failed), as the scheduler would start it;
5. prints one table of stages (state, duration) and the lineage chain, checks the checkpoint
   sha256 in the lineage against the object in sandbox S3, prints the report's pictures (their S3
   URIs, a local copy under ``<Airflow home>/report/<run_key>/`` and their console links), and exits 0
   only if the run succeeded.

Nothing leaves 127.0.0.1. Everything the sandbox plays instead of AWS is logged with
``[sandbox:emulated]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.dev.sandbox.field_robot import NAMED_GAPS

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root


#: The demo's default training seed and first evaluation seed (``--random-seeds`` for new ones).
DEFAULT_SEED, DEFAULT_EVAL_SEED = 3, 2000
#: The demo's training budget: PPO iterations, not wall time, so a busy and a quiet machine train the same policy
#: (same seed, same iterations: the same checkpoint) and the gate reaches the same verdict; the time budget is only a
#: safety bound, far above what even a loaded 2-core laptop needs (100 iterations: ~70 s quiet, ~15 min with two
#: CPU-bound processes and other work beside it). Passed as run conf (the form's fields), ``--conf`` still wins.
DEMO_TRAINING = {"max_iterations": 100, "train_time_budget_seconds": 1800}
#: The demo's canary: robot 1 (the sandbox's canary thing group) runs the release first; its 20 field episodes must
#: give a Wilson 95 % lower bound of at least 0.5 before the fleet gets it (the demo's policy clears it in the mild
#: world: 20 of 20; not in the severe one: 10 of 20, [0.30, 0.70], undecided until the 3-minute window ends, then
#: not promoted). ``--no-canary``: straight to the fleet. The canary's robots record each episode's data too
#: (``com.sim2real.FieldUploader``'s ``RecordData``), so field data is in the bucket after the demo.
DEMO_CANARY = {"canary_thing_group_name": "sim2real-robots-canary", "canary_min_episodes": 20,
               "canary_window_minutes": 3, "field_min_success_rate": 0.5}
#: What each emulated robot does after a deployment: this many episodes of the run's task in this world
#: (:data:`sim2real.dev.sandbox.field_robot.NAMED_GAPS`).
DEMO_FIELD_GAP, DEMO_FIELD_EPISODES = "mild", 20
#: ``--sweep``: this many candidates, all training at once (``sweep_max_parallel``), on the form's training size.
SWEEP_CANDIDATES = 3


def sweep_conf(seed: int, candidates: int = SWEEP_CANDIDATES) -> dict[str, Any]:
    """The run conf of ``--sweep``: ``candidates`` training seeds from ``seed``, every job at once."""
    return {"sweep": [{"seed": seed + i} for i in range(candidates)], "sweep_max_parallel": candidates}


def provisioned_line(endpoint_url: str, env_config: dict[str, Any], canary: bool) -> str:
    """The demo's line on what the sandbox provisioned: bucket, job queue, the fleet's thing group and the canary's
    (:data:`DEMO_CANARY`'s, the sandbox's ``provision.CANARY_THING_GROUP``; ``--no-canary``: none used)."""
    group = DEMO_CANARY["canary_thing_group_name"]
    return (f"[demo] sandbox at {endpoint_url}; provisioned bucket {env_config['artifacts_bucket']}, job queue "
            f"{env_config['batch']['job_queue']}, thing group {env_config['greengrass']['thing_group_name']}, canary "
            f"thing group {group}" + ("" if canary else " (not used: --no-canary)"))


def demo_conf(seed: int, eval_seed: int, extra: dict[str, Any] | None = None, canary: bool = True) -> dict[str, Any]:
    """The demo's run conf: the seeds, :data:`DEMO_TRAINING`, :data:`DEMO_CANARY` (unless ``canary`` is false), then
    ``extra`` (``--conf``) over them."""
    return {"seed": seed, "eval_seed": eval_seed, **DEMO_TRAINING, **(DEMO_CANARY if canary else {}), **(extra or {})}


def _count(text: str) -> int:
    """An integer >= 0 (argparse type)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="sim2real-demo", description=__doc__.split("\n")[0])
    # Fixed seeds by default, so the quick start is repeatable. The demo trains DEMO_TRAINING's 100 PPO iterations
    # (32 envs; 100 evaluation episodes, gate 0.8 on the Wilson lower bound): the same policy and verdict on a
    # quiet or a busy machine, only slower on the busy one. --random-seeds for new ones.
    ap.add_argument("--seed", type=int, default=None, help=f"training seed (default {DEFAULT_SEED})")
    ap.add_argument("--eval-seed", type=int, default=None, help=f"first evaluation seed (default {DEFAULT_EVAL_SEED})")
    ap.add_argument("--random-seeds", action="store_true", help="pick new training and evaluation seeds")
    ap.add_argument("--conf", default="{}", help="extra run params as JSON (same keys as the trigger form)")
    ap.add_argument("--decision", choices=["Approved", "Rejected"], default="Approved",
                    help="what the emulated approver decides")
    ap.add_argument("--home", default=None, help="Airflow home (default: a fresh folder under .sandbox/)")
    ap.add_argument("--json-out", default=None, help="also write the summary as JSON here")
    ap.add_argument("--record-dir", default=None,
                    help="after the runs, write the sandbox's records here (sim2real.dev.sandbox.record)")
    ap.add_argument("--no-mlflow", dest="mlflow", action="store_false",
                    help="no local MLflow tracking server (the run is untracked)")
    ap.add_argument("--sweep", action="store_true",
                    help=f"train {SWEEP_CANDIDATES} candidates (training seeds seed, seed+1, ...) in parallel in the "
                    "one run; the best Wilson lower bound goes on to the gate")
    ap.add_argument("--fail-candidate", type=int, action="append", default=[], metavar="I",
                    help="with --sweep: candidate c<I>'s Batch job fails (the sandbox's batch_fail_job_names_ending "
                    "fault); repeatable. The run still releases the best survivor (sweep_min_candidates)")
    ap.add_argument("--field-gap", choices=sorted(NAMED_GAPS), default=DEMO_FIELD_GAP,
                    help="the emulated robots' world after a deployment (sim2real.dev.sandbox.field_robot): "
                         f"'none' as simulated, 'mild' a gap a good policy tolerates, 'severe' one it does not "
                         f"(default {DEMO_FIELD_GAP}); each robot runs --field-episodes episodes and uploads them")
    ap.add_argument("--field-episodes", type=_count, default=DEMO_FIELD_EPISODES,
                    help=f"field episodes each robot runs after each deployment (default {DEMO_FIELD_EPISODES})")
    ap.add_argument("--field-round", action="store_true",
                    help="close the loop on the robots: after the run, publish the field episodes its canary robots "
                         "recorded as a field dataset version (the sim_to_real_field_data DAG), then run the loop "
                         "again with that version in the GR00T fine-tune (field_dataset_version 'latest': what the "
                         "asset event starts on Airflow); needs the canary")
    ap.add_argument("--no-canary", dest="canary", action="store_false",
                    help="release to the whole thing group at once (default: the canary group first, judged on its "
                         "robots' field episodes: DEMO_CANARY)")
    ap.add_argument("--step-seconds", type=float, default=0.3,
                    help="seconds between the sandbox's emulated status steps (default 0.3, paced for reading the "
                         "log; the end-to-end tests use 0.05)")
    return ap.parse_args(argv)


def prepare_airflow_home(home: Path, extra_env: dict[str, str], *, process_caches: bool = True) -> dict[str, str]:
    """Set the process environment for an Airflow run against the sandbox and migrate its DB
    (:func:`sim2real.dev.sandbox.airflow_db.migrated_db`); then, with ``process_caches``, install for the process
    :func:`sim2real.dev.boto_data.caller_lookup_by_frames` and :func:`sim2real.dev.schema_checks.check_schema_once`
    (the orchestration benchmark passes False: it measures what a task costs on MWAA, the provider's own lookup and
    Airflow's own Param validation included).

    Must run before ``airflow`` is imported in this process (Airflow reads its config at import).
    :return: the environment variables that were set.
    """
    # dag_defaults reads SIM2REAL_POLL_SECONDS when it is imported (POLL, FIELD_POLL): set it first (imported before,
    # the demo's waits polled at the AWS default, 30 s, and its canary listed the field episodes every 300 s)
    os.environ["SIM2REAL_POLL_SECONDS"] = os.environ.get("SIM2REAL_POLL_SECONDS", "2")
    from sim2real.orchestration.dag_defaults import NAMESPACE_LEVELS  # no airflow import

    home.mkdir(parents=True, exist_ok=True)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        "SIM2REAL_POLL_SECONDS": os.environ.get("SIM2REAL_POLL_SECONDS", "2"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO"),
        # dag.test() serves Airflow's API to this process only (the run note's in-process API, no listener): no
        # user logs in, so the Simple auth manager must not generate an admin password and print it to the log.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        # as on MWAA and in `make ui`: no "credentials retrieved" line on every hook's connection read
        "AIRFLOW__LOGGING__NAMESPACE_LEVELS": NAMESPACE_LEVELS,
        **extra_env,
    }
    os.environ.update(env)
    from sim2real.dev.sandbox.airflow_db import migrated_db

    # ``airflow db migrate`` (or, with SIM2REAL_AIRFLOW_DB_CACHE set, as the test suite does, a copy of its result)
    migrated_db(home / "airflow.db", os.environ.copy())
    # the tasks' AWS hooks name their caller without reading source files (1.2 s of CPU per DAG run); it imports
    # the Amazon provider, so Airflow, which reads its config at import: only now that the config is set
    if process_caches:
        from sim2real.dev.boto_data import caller_lookup_by_frames
        from sim2real.dev.schema_checks import check_schema_once

        caller_lookup_by_frames()
        check_schema_once()
    return env


#: The collector's third threshold while :func:`dag_test` runs a DAG: a full collection after this many collections
#: of the middle generation (CPython's default 10). CPython also waits until the objects that survived collections
#: since the last full one exceed a quarter of those the last full one kept; :func:`dag_test`'s own full collection
#: counts the heap it then freezes (about a million objects), so the first run waits for a quarter of that, but from
#: the second run on the last full collection saw only the unfrozen objects and the quarter is soon reached: every
#: 10th middle collection walked the run's objects. A run's objects are collected by the next :func:`dag_test` (or not
#: at all: the process ends). CPython 3.14's incremental collector ignores this threshold (harmless).
FULL_COLLECTION_THRESHOLD = 100


def dag_test(dag, **kwargs: Any):
    """Run ``dag.test(**kwargs)`` with what this process already holds out of the collector's way.

    First a full collection (:func:`gc.collect`) frees the cyclic garbage, then :func:`gc.freeze` moves every object
    left (Airflow, the providers, torch, moto, the sandbox's state, the parsed DAG, what earlier runs kept) to the
    permanent generation, which the full collections during the run do not walk, and the third threshold becomes
    :data:`FULL_COLLECTION_THRESHOLD`. Measured on one fault replay process (11 scenarios, 8 runs, 2026-12-05): its
    full collections took 8.6 of its 66 CPU-seconds as Python left them (22 of them, each walking about a million
    objects), 4.1 with the freeze, 2.5 with the threshold too; the process with its children 104 -> 96 CPU-s, its
    peak memory 624 -> 642 MB. One sandbox run with its field round (``python -m sim2real.dev.demo --field-round``):
    72 -> 68 CPU-s, peak memory unchanged (954 MB).

    What it costs: an object frozen here that later becomes unreachable only through a reference cycle is never
    collected and its finalizer never runs (objects freed by their reference count are freed as usual): for example
    a boto3 client made before a run and dropped after it keeps its idle keep-alive socket to the sandbox until the
    process ends. For the sandbox's processes only (``make demo``, ``make faults``, the end-to-end tests), which
    end after a few runs.

    :param dag: a parsed DAG (:func:`load_dag`).
    :param kwargs: passed to ``dag.test`` unchanged (``run_conf``, ``logical_date``, ``run_after``).
    :return: the DAG run ``dag.test`` returns; raises what it raises.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*gc.get_threshold()[:2], FULL_COLLECTION_THRESHOLD)
    return dag.test(**kwargs)


def load_dag(dag_id: str = "sim_to_real"):
    """Parse ``dags/<dag_id>.py`` with a DagBag, as the scheduler would, and return the DAG ``dag_id``.

    :raises SystemExit: naming the import errors when the file does not parse.
    """
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / f"{dag_id}.py"))
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    return bag.dags[dag_id]


def run_dag(run_conf: dict[str, Any]):
    """``dag.test()`` the parsed ``sim_to_real`` DAG (:func:`load_dag`) with ``run_conf``."""
    return dag_test(load_dag(), run_conf=run_conf)


def run_field_data_dag(min_new_episodes: int = 1):
    """``dag.test()`` of ``dags/sim_to_real_field_data.py`` (:func:`load_dag`): publish the next field dataset
    version once at least ``min_new_episodes`` new episodes with data are in the bucket.

    :raises SystemExit: naming the import errors when the file does not parse.
    """
    return dag_test(load_dag("sim_to_real_field_data"), run_conf={"min_new_episodes": min_new_episodes})


def field_round(run_conf: dict[str, Any], first) -> tuple[dict[str, Any], list]:
    """``--field-round``: after ``first`` (a finished run whose canary robots recorded their episodes), publish the
    field dataset (:func:`run_field_data_dag`) and run the loop again with ``field_dataset_version: "latest"``.

    :return: ``(what happened: the first run's id, state and tasks, the publishing run's state and its asset event's
        extra, the conf of the second run; the second run's DAG runs (:func:`run_rounds`), [] when the first run did
        not succeed (nothing is published then) or nothing was published)``.
    """
    out = {"first_run_id": first.run_id, "first_run_state": str(getattr(first.state, "value", first.state)),
           "first_run_tasks": task_table(first), "first_run_note": run_note(first),
           "publish_state": None, "dataset": None}
    if out["first_run_state"] != "success":
        print(f"[demo] field round: the first run {first.run_id} ended {out['first_run_state']}: no field dataset, "
              "no second run")
        return out, []
    published = run_field_data_dag()
    events = asset_events(published)
    out.update(publish_state=str(getattr(published.state, "value", published.state)),
               dataset=events[-1]["extra"] if events else None)
    if not events:
        print(f"[demo] field round: {published.dag_id} published no field dataset version "
              f"({out['publish_state']}); no second run")
        return out, []
    print(f"[demo] field round: field dataset {out['dataset'].get('dataset_version')} published "
          f"({out['dataset'].get('episodes')} episodes, {out['dataset'].get('frames')} frames); running the loop again "
          "with it in the GR00T fine-tune")
    out["conf"] = {**run_conf, "field_dataset_version": "latest"}
    return out, run_rounds(out["conf"])


def next_round_run(dag_run):
    """The run this run's ``next_round`` task created (a retraining round, queued), or ``None``.

    ``dag.test()`` runs one run; the scheduler would start the queued one once this run has ended
    (``max_active_runs=1``). :func:`run_rounds` plays that part.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run_id = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
            XComModel.task_id == ids.NEXT_ROUND, XComModel.key == "trigger_run_id"))
        if isinstance(run_id, str) and run_id.startswith('"'):
            run_id = json.loads(run_id)
        if not run_id:
            return None
        child = session.scalar(select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == run_id))
        if child is None:
            return None
        session.expunge(child)
        return child


def run_rounds(run_conf: dict[str, Any], max_runs: int = 10) -> list:
    """Run ``run_conf`` (:func:`run_dag`) and then each retraining round its runs trigger, as the scheduler would:
    the queued run is run with its own run id, conf and logical date (``dag.test()`` replaces the queued run of
    that logical date with the one it runs; ``TriggerDagRunOperator`` named it ``manual__<logical date>``, which
    is the id ``dag.test()`` derives from ``run_after`` = that logical date).

    :return: every round's DAG run, oldest first (the last one decides the loop).
    :raises RuntimeError: a triggered run would run under another run id than the one its parent recorded.
    """
    runs = [run_dag(run_conf)]
    while len(runs) < max_runs and (child := next_round_run(runs[-1])) is not None:
        print(f"[demo] round run {child.run_id} was triggered by {runs[-1].run_id}; running it (the scheduler "
              "would start it now: max_active_runs=1)")
        dag_run = dag_test(load_dag(), run_conf=dict(child.conf or {}), logical_date=child.logical_date,
                           run_after=child.logical_date)
        if dag_run.run_id != child.run_id:
            raise RuntimeError(f"the triggered run {child.run_id} ran as {dag_run.run_id}")
        runs.append(dag_run)
    return runs


def task_table(dag_run) -> list[tuple[str, str, float | None]]:
    """(task_id, state, duration s) of every task of the run, in start order."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)).all()
        rows = [(ti.task_id, str(getattr(ti.state, "value", ti.state)), ti.duration,
                 ti.start_date or dt.datetime.max.replace(tzinfo=dt.timezone.utc)) for ti in tis]
    rows.sort(key=lambda r: r[3])
    return [(r[0], r[1], r[2]) for r in rows]


def mapped_states(dag_run) -> dict[str, list[str]]:
    """Mapped tasks of the run (a sweep's group): task id → the state of each map index, in map-index order."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id,
            TaskInstance.map_index >= 0)).all()
        rows = sorted((ti.task_id, ti.map_index, str(getattr(ti.state, "value", ti.state))) for ti in tis)
    out: dict[str, list[str]] = {}
    for task_id, _, state in rows:
        out.setdefault(task_id, []).append(state)
    return out


def asset_events(dag_run) -> list[dict[str, Any]]:
    """The Asset events the run emitted (asset name, source task, extra), oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.name, AssetEvent.source_task_id, AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.source_dag_id == dag_run.dag_id, AssetEvent.source_run_id == dag_run.run_id)
            .order_by(AssetEvent.id)
        ).all()
    return [{"asset": name, "task_id": task_id, "extra": dict(extra or {})} for name, task_id, extra in rows]


def _persisted_link(dag_run, task_id: str, link) -> str | None:
    """The extra link ``link`` of ``task_id`` as the UI would render it (from the XCom the task persisted)."""
    import json as _json

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        value = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id,
            XComModel.task_id == task_id, XComModel.key == link.key))
    if isinstance(value, str):
        value = _json.loads(value)
    return link.format_link(**value) if value else None


def run_folder_link(dag_run) -> str | None:
    """The "S3 run folder" extra link of ``prepare_run`` as the UI would render it (from its XCom)."""
    from sim2real.orchestration.links.s3 import S3RunFolderLink

    return _persisted_link(dag_run, ids.PREPARE_RUN, S3RunFolderLink())


def figure_links(dag_run) -> dict[str, str | None]:
    """The "Training curve" / "Evaluation outcome" extra links of ``write_lineage`` (lineage ``figures`` key →
    S3 console URL, ``None`` when the picture was not written)."""
    from sim2real.orchestration.links.s3 import FIGURE_LINKS

    return {name: _persisted_link(dag_run, ids.WRITE_LINEAGE, link()) for name, link in FIGURE_LINKS.items()}


def run_note(dag_run) -> str | None:
    """The run's note as the UI shows it (write_lineage sets it)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalar(select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == dag_run.run_id))
        return row.note if row is not None else None


def fetch_link(url: str | None) -> dict[str, Any] | None:
    """GET ``url`` as a browser opening the extra link would (sandbox S3 on 127.0.0.1 only): status,
    content type and the first bytes' PNG signature; ``None`` for no link or one off this machine."""
    import urllib.request
    from urllib.parse import urlsplit

    if not url or urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        return None
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback sandbox only
        head = resp.read(8)
        return {"status": resp.status, "content_type": resp.headers.get("Content-Type"),
                "png": head == b"\x89PNG\r\n\x1a\n"}


def _print_table(title: str, header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)] if rows else [len(h) for h in header]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    print(f"\n{title}\n{line}")
    print("| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print(line)
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    print(line)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.canary and args.field_episodes == 0:
        print("[demo] --field-episodes 0 leaves the canary with no episode to judge: it would be rolled back after its "
              "window; give at least 1, or --no-canary", file=sys.stderr)
        return 2
    rng_seed = int.from_bytes(os.urandom(2), "big")
    seed, eval_seed = (rng_seed % 1000, 1000 + rng_seed) if args.random_seeds else (DEFAULT_SEED, DEFAULT_EVAL_SEED)
    conf = demo_conf(args.seed if args.seed is not None else seed,
                     args.eval_seed if args.eval_seed is not None else eval_seed, json.loads(args.conf), args.canary)
    if args.sweep:
        conf = {**sweep_conf(int(conf["seed"])), **conf}  # --conf still wins
    if args.field_round and not conf.get("canary_thing_group_name"):
        print("[demo] --field-round needs a canary (no --no-canary, or a canary_thing_group_name in --conf): only the "
              "canary's robots record their episodes' data", file=sys.stderr)
        return 2
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    home = Path(args.home) if args.home else REPO_ROOT / ".sandbox" / f"airflow-{stamp}"
    if home.exists():
        shutil.rmtree(home)

    from sim2real.dev.sandbox import Sandbox

    if args.mlflow:  # before anything starts: a tracked demo needs the server venv
        from sim2real.dev.sandbox.mlflow_server import MlflowServerError, mlflow_executable

        try:
            mlflow_executable(REPO_ROOT)
        except MlflowServerError as err:
            print(f"[demo] {err}; or run the demo untracked with --no-mlflow (make demo DEMO_ARGS=--no-mlflow)",
                  file=sys.stderr)
            return 2
    else:
        print("[demo] MLflow tracking off (--no-mlflow): the run is untracked")

    started = time.monotonic()
    print("[demo] starting the local AWS sandbox (moto, in this process) — nothing leaves 127.0.0.1")
    # --sweep: the sandbox account holds one g6.12xlarge node (48 vCPU) per candidate, in its G-instance quota and
    # its compute environment's maxvCpus (the default account holds two: the capacity preflight refuses three).
    capacity = {"quota_limits": {"L-DB2E81BA": 48.0 * SWEEP_CANDIDATES}} if args.sweep else {}
    with Sandbox(repo_root=REPO_ROOT, mlflow=args.mlflow, mlflow_dir=home / "mlflow",
                 step_seconds=args.step_seconds, **capacity) as sandbox:
        from sim2real.contract.groot import DEFAULT_VERSION

        version = conf.get("groot_version") or DEFAULT_VERSION  # another version's base model, images, token secret
        env_config = sandbox.provision(groot_versions=() if version == DEFAULT_VERSION else (version,),
                                       **({"max_vcpus": 48 * SWEEP_CANDIDATES} if args.sweep else {}))
        if args.fail_candidate:  # those candidates' jobs fail as a lost instance would
            sandbox.faults["batch_fail_job_names_ending"] = [f"-c{i}" for i in args.fail_candidate]
        print(provisioned_line(sandbox.endpoint_url, env_config, args.canary))
        prepare_airflow_home(home, sandbox.airflow_env())
        from sim2real.dev.sandbox.device import FieldWork, PolicyDeviceCheck

        # The emulated robots run the real setup component and policy server on the deployed policy, then the
        # run's task in the field (--field-gap's world) and upload each episode as real robots do.
        from sim2real.orchestration.stages import train  # imports Airflow: only after the home is set

        task = conf.get("task", train.params()["task"].value)  # the run's task (the form's default unless given)
        # the canary's robots also record their episodes' data (RecordData): field/data/<thing>/<episode_id>.parquet
        canary_group = conf.get("canary_thing_group_name")
        field_work = FieldWork(task_id=task, episodes=args.field_episodes,
                               bucket=env_config["artifacts_bucket"], gap=NAMED_GAPS[args.field_gap],
                               record_data_groups=(canary_group,) if canary_group else ())
        sandbox.greengrass.device_check = PolicyDeviceCheck(sandbox, home / "greengrass-devices", field_work)
        print(f"[demo] Airflow home {home} (SQLite); run conf {json.dumps(conf)}")

        from sim2real.dev.sandbox import Approver

        def start_approver() -> Approver:  # decides one model package: one per run that registers one
            approver = Approver(sandbox, model_package_group=env_config["sagemaker"]["model_package_group"],
                                decision=args.decision,
                                description=f"{args.decision.lower()} by the demo's emulated reviewer")
            approver.start()
            return approver

        inbox = subscribe_notifications(sandbox, env_config)
        approver = start_approver()
        round_summary = None
        try:
            dag_runs = run_rounds(conf)
            if args.field_round:
                first_notifications = read_notifications(sandbox, inbox)  # the second run's are read below
                approver.cancel()
                approver = start_approver()
                round_summary, second = field_round(conf, dag_runs[-1])
                round_summary["first_run_notifications"] = first_notifications
                dag_runs = second or dag_runs
        finally:
            approver.cancel()
        dag_run = dag_runs[-1]  # the last round decides the loop (the only run without retraining rounds)
        state = str(getattr(dag_run.state, "value", dag_run.state))
        rows = task_table(dag_run)
        summary = summarise(sandbox, env_config, dag_run, rows, figures_dir=home / "report")
        summary["round_runs"] = [{"run_id": r.run_id, "state": str(getattr(r.state, "value", r.state)),
                                  "tasks": task_table(r), "note": run_note(r)} for r in dag_runs]
        summary["notifications"] = read_notifications(sandbox, inbox)
        summary["field_round"] = round_summary
        summary["asset_events"] = asset_events(dag_run)
        summary["run_folder_link"] = run_folder_link(dag_run)
        summary["figure_links"] = figure_links(dag_run)
        summary["figure_link_fetch"] = {name: fetch_link(url) for name, url in summary["figure_links"].items()}
        summary["run_note"] = run_note(dag_run)
        summary["mapped_tasks"] = mapped_states(dag_run)
        summary["mlflow"] = mlflow_summary(sandbox, summary.get("lineage_uri"))
        if args.record_dir:
            from sim2real.dev.sandbox.record import write_records

            write_records(sandbox, env_config, Path(args.record_dir))
    elapsed = time.monotonic() - started

    fr = summary.get("field_round")
    if fr:
        print(f"[demo] field round: first run {fr['first_run_id']}: {fr['first_run_state']}; "
              f"sim_to_real_field_data: {fr['publish_state'] or 'not run'}, field dataset "
              f"{json.dumps(fr['dataset'], sort_keys=True) if fr['dataset'] else 'none'}")
        used = ((summary.get("lineage") or {}).get("stages") or {}).get("field_dataset")
        print(f"[demo] field round: the second run's fine-tune included "
              f"{json.dumps(used, sort_keys=True) if used else 'no field dataset'}")
    for earlier in summary["round_runs"][:-1]:
        print(f"[demo] earlier round: run {earlier['run_id']}: {earlier['state']}")
    _print_table(f"sim_to_real run {dag_run.run_id}: {state.upper()}", ("task", "state", "duration (s)"),
                 [(t, s, "" if d is None else f"{d:.1f}") for t, s, d in rows])
    if summary.get("chain_rows"):
        _print_table(f"Lineage ({summary['lineage_uri']})", ("stage", "value"), summary["chain_rows"])
    if (summary.get("lineage") or {}).get("sweep"):
        from sim2real.orchestration.lineage import candidate_rows

        _print_table(f"Sweep candidates ({summary['lineage']['sweep']['rule']})", *candidate_rows(summary["lineage"]))
    for check in summary["checks"]:
        print(f"[demo] check: {check}")
    from sim2real.orchestration.run_note import field_line

    for line in field_line((summary.get("lineage") or {}).get("field")):  # the canary: robots beside simulation
        print(f"[demo] {line.replace('**', '')} World of the emulated robots: --field-gap {args.field_gap}.")
    for note in summary["notifications"]:
        print(f"[demo] SNS notification ({note['event']}): {note['subject']}")
    if summary.get("run_folder_link"):
        print(f"[demo] extra link 'S3 run folder' (the run's folder in the S3 console): {summary['run_folder_link']}")
    for name, fig in (summary.get("figures") or {}).items():
        if fig.get("uri"):
            print(f"[demo] report picture {name}: {fig['uri']} (copy: {fig.get('local_path')}); "
                  f"extra link: {(summary.get('figure_links') or {}).get(name)}")
        else:
            print(f"[demo] report picture {name}: not drawn — {fig.get('skipped_reason')}")
    if summary.get("run_note"):
        print(f"[demo] the run's note (Airflow UI, the run's Note panel):\n{summary['run_note']}")
    for event in summary.get("asset_events", []):
        print(f"[demo] asset event {event['asset']} from {event['task_id']}: {json.dumps(event['extra'], sort_keys=True)}")
    tracked = summary.get("mlflow") or {}
    if tracked.get("parent_run_url"):
        print(f"[demo] MLflow run (extra link 'MLflow run'): {tracked['parent_run_url']}; runs: "
              + ", ".join(f"{k} {v}" for k, v in tracked.get("statuses", {}).items()))
    print("[demo] emulated by the sandbox (what ran of it in this run): CodeBuild build (image pushed with a real "
          "digest), Batch compute (training ran here through the real launcher), the workstation (SSM command ran "
          "here), the GR00T pipeline (RegisterModel only), the reviewer's approval, the Greengrass core devices "
          "(each runs the real setup component and policy server on the RL policy, standing in for the GR00T model, "
          f"then episodes of the real MuJoCo task with it in the --field-gap {args.field_gap} world).")
    print(f"[demo] finished in {elapsed:.0f} s: run {state}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**summary, "state": state, "tasks": rows,
                                                   "elapsed_s": elapsed}, indent=2, default=str))
    # --field-round: both runs succeeded and the second one's fine-tune included the published version
    ok = state == "success" and summary["checks_ok"] and (not args.field_round or (
        (summary.get("field_round") or {}).get("first_run_state") == "success"
        and bool(((summary.get("lineage") or {}).get("stages") or {}).get("field_dataset"))))
    return 0 if ok else 1


def mlflow_summary(sandbox, lineage_uri: str | None) -> dict[str, Any] | None:
    """The lineage's ``mlflow`` entry plus each run's status and metric names read back from the tracking server
    (``statuses`` / ``metrics``: ``parent`` and stage → ...; ``None``: the sandbox ran without MLflow or the lineage
    is missing)."""
    if sandbox.mlflow is None or not lineage_uri:
        return None
    from sim2real.contract.storage import split_s3
    from sim2real.orchestration.hooks.mlflow import MlflowHook

    bucket, key = split_s3(lineage_uri)
    entry = json.loads(sandbox.client("s3", internal=True).get_object(Bucket=bucket, Key=key)["Body"].read()).get("mlflow")
    if not entry or not entry.get("enabled"):
        return entry
    hook = MlflowHook(entry["tracking_uri"])
    runs = {name: hook.get_run(rid) for name, rid in {"parent": entry["parent_run_id"], **entry["runs"]}.items()}
    return {**entry, "statuses": {name: run["info"]["status"] for name, run in runs.items()},
            "metrics": {name: sorted({m["key"] for m in (run.get("data") or {}).get("metrics") or []})
                        for name, run in runs.items()}}


def subscribe_notifications(sandbox, env_config: dict[str, Any]) -> str | None:
    """Subscribe an SQS queue to the notification topic (as a team would subscribe e-mail or chat).

    :return: the queue URL, or ``None`` when the environment config names no topic.
    """
    topic = (env_config.get("notifications") or {}).get("sns_topic_arn")
    if not topic:
        return None
    sqs = sandbox.client("sqs", internal=True)
    url = sqs.create_queue(QueueName="sim2real-notifications-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sandbox.client("sns", internal=True).subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    return url


def read_notifications(sandbox, queue_url: str | None) -> list[dict[str, Any]]:
    """The SNS notifications the run published (event, subject, message), in arrival order."""
    if not queue_url:
        return []
    sqs = sandbox.client("sqs", internal=True)
    out: list[dict[str, Any]] = []
    while True:
        msgs = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        if not msgs:
            return out
        for msg in msgs:
            body = json.loads(msg["Body"])
            attrs = body.get("MessageAttributes") or {}
            out.append({"event": (attrs.get("event") or {}).get("Value"), "subject": body.get("Subject"),
                        "message": body.get("Message")})
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"])


def summarise(sandbox, env_config: dict[str, Any], dag_run, rows, figures_dir: Path | None = None) -> dict[str, Any]:
    """Read the lineage the run wrote and cross-check it against sandbox S3.

    With ``figures_dir``, the report's PNGs are copied there (the sandbox's S3 is gone once the demo
    exits): ``summary["figures"][name]`` is the lineage entry plus ``local_path``.
    """
    import boto3

    from sim2real.orchestration.lineage import chain_rows
    from sim2real.contract.run_key import make_run_key

    s3 = boto3.client("s3", endpoint_url=sandbox.endpoint_url, region_name=sandbox.region,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = env_config["artifacts_bucket"]
    run_key = make_run_key(dag_run.dag_id, dag_run.run_id)
    key = f"runs/{run_key}/lineage.json"
    out: dict[str, Any] = {"run_key": run_key, "lineage_uri": f"s3://{bucket}/{key}", "checks": [],
                           "checks_ok": False}
    try:
        lineage = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except Exception as err:  # noqa: BLE001
        out["checks"].append(f"FAILED: no lineage at s3://{bucket}/{key}: {err}")
        return out
    out["lineage"] = lineage
    out["chain_rows"] = chain_rows(lineage)
    chain = lineage["chain"]
    ok = True
    ckpt = chain.get("checkpoint_uri")
    if ckpt:
        b, _, k = ckpt[len("s3://"):].partition("/")
        digest = hashlib.sha256(s3.get_object(Bucket=b, Key=k)["Body"].read()).hexdigest()
        match = digest == chain.get("checkpoint_sha256")
        ok &= match
        out["checks"].append(f"{'ok' if match else 'FAILED'}: sha256 of {ckpt} in sandbox S3 = {digest} "
                             f"{'==' if match else '!='} lineage {chain.get('checkpoint_sha256')}")
    else:
        ok = False
        out["checks"].append("FAILED: lineage has no checkpoint")
    report_uri = ((lineage.get("stages") or {}).get("evaluation") or {}).get("report_uri")
    if report_uri:
        b, _, k = report_uri[len("s3://"):].partition("/")
        report = json.loads(s3.get_object(Bucket=b, Key=k)["Body"].read())
        same = report.get("success_rate") == chain.get("success_rate")
        ok &= same
        out["checks"].append(f"{'ok' if same else 'FAILED'}: success rate {report.get('success_rate')} "
                             f"({report.get('successes')}/{report.get('episodes')} episodes, seeds "
                             f"{report.get('seeds', [None])[0]}..) computed by the evaluation in {report_uri}")
    if lineage.get("sweep"):  # every candidate's checkpoint is where the lineage says, with its sha256
        for cand in lineage.get("candidates") or []:
            if cand.get("reason"):  # failed, out of the pick: recorded with its reason, no checkpoint to check
                out["checks"].append(f"ok: candidate {cand.get('candidate')} failed, recorded as "
                                     f"{cand.get('state')}: {cand.get('reason')}")
                continue
            b, _, k = str(cand.get("checkpoint_uri") or "s3:///")[len("s3://"):].partition("/")
            digest = hashlib.sha256(s3.get_object(Bucket=b, Key=k)["Body"].read()).hexdigest() if k else None
            match = digest is not None and digest == cand.get("checkpoint_sha256")
            ok &= match
            out["checks"].append(f"{'ok' if match else 'FAILED'}: candidate {cand.get('candidate')} sha256 of "
                                 f"{cand.get('checkpoint_uri')} = {digest}")
    out["figures"] = {}
    for name, fig in (lineage.get("figures") or {}).items():
        entry = dict(fig)
        if fig.get("uri") and figures_dir is not None:
            b, _, k = fig["uri"][len("s3://"):].partition("/")
            local = figures_dir / run_key / k.rsplit("/", 1)[-1]
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(s3.get_object(Bucket=b, Key=k)["Body"].read())
            entry["local_path"] = str(local)
        out["figures"][name] = entry
    out["checks_ok"] = bool(ok)
    return out


if __name__ == "__main__":
    sys.exit(main())
