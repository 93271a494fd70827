"""``python -m sim2real.dev.sandbox serve``: the local AWS sandbox as a long-running process.

For an Airflow that runs in other processes (``airflow standalone``, ``make ui``): this process
starts :class:`~sim2real.dev.sandbox.server.Sandbox` (moto on a free 127.0.0.1 port, the responders
that play Batch jobs, SSM commands, pipelines and Greengrass devices), provisions every resource
the DAG uses, runs the emulated reviewer (it approves each model package once the DAG's approval
step has looked at it, as a reviewer in SageMaker Studio would; ``--decision airflow``: no emulated
reviewer, a person decides in Airflow's Required Actions page or in the registry) and the emulated
robots (the real setup component and policy server on the deployed policy), then writes the
environment Airflow needs to ``--env-file`` and serves until SIGTERM or SIGINT. On either signal it
stops the responders (terminating the Batch jobs and SSM commands they started as local subprocesses)
and moto, then exits 0.

The env file has one ``KEY='value'`` line per variable (shell quoting: ``set -a; . FILE`` loads it,
and :func:`read_env_file` parses it):

* ``AIRFLOW_CONN_AWS_DEFAULT`` — the ``aws_default`` connection (sandbox endpoint, fake credentials);
* ``AIRFLOW_VAR_SIM2REAL_ENVIRONMENT`` — the provisioned environment config (JSON);
* ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_REGION``;
* ``SIM2REAL_POLL_SECONDS`` (``--poll-seconds``) and ``AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=True``;
* ``SIM2REAL_MLFLOW_UI_URL`` — the local MLflow tracking server (UI and tracking URI; the environment config's
  ``mlflow`` section points the DAG at it), unless ``--no-mlflow``.

The file is written atomically once everything is provisioned: its existence means "ready". It is
removed on shutdown. Nothing listens outside 127.0.0.1.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[4]  # include/sim2real/dev/sandbox/__main__.py -> repository root


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """Write ``env`` as ``KEY='value'`` lines (shell-quoted), atomically (temp file + rename).

    :raises ValueError: naming the variable whose value has a line break (one line per variable).
    """
    broken = sorted(key for key, value in env.items() if "\n" in value or "\r" in value)
    if broken:
        raise ValueError(f"env file values must be single lines: {broken} contain line breaks")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{key}={shlex.quote(value)}\n" for key, value in sorted(env.items())))
    os.replace(tmp, path)


def read_env_file(path: Path) -> dict[str, str]:
    """Parse a file written by :func:`write_env_file`.

    :raises ValueError: naming the line when one is not ``KEY=value``.
    """
    env: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line)
        if len(words) != 1 or "=" not in words[0]:
            raise ValueError(f"{path}:{number}: expected KEY='value', got {line[:80]!r}")
        key, _, value = words[0].partition("=")
        env[key] = value
    return env


#: ``--decision`` values: the emulated reviewer's decision in the registry, or ``airflow`` (no emulated reviewer).
DECISIONS = ("Approved", "Rejected", "airflow")
#: The ``--decision`` that leaves the approval to a person in Airflow.
LEAVE_TO_AIRFLOW = "airflow"


class ApprovalLoop(threading.Thread):
    """Runs one :class:`~sim2real.dev.sandbox.approver.Approver` after another, so every run's model
    package gets a decision (the demo runs one Approver per run; a served sandbox sees many runs).

    :param sandbox: the running Sandbox.
    :param model_package_group: group to watch (from the environment config).
    :param decision: "Approved" or "Rejected".
    """

    def __init__(self, sandbox: Any, model_package_group: str, decision: str) -> None:
        super().__init__(name="sandbox-approval-loop", daemon=True)
        self.sandbox = sandbox
        self.group = model_package_group
        self.decision = decision
        self._stop_event = threading.Event()
        self._current: Any = None

    def run(self) -> None:
        from sim2real.dev.sandbox import Approver

        while not self._stop_event.is_set():
            self._current = Approver(self.sandbox, model_package_group=self.group, decision=self.decision,
                                     description=f"{self.decision.lower()} by the sandbox's emulated reviewer",
                                     poll_seconds=1.0)
            self._current.start()
            while self._current.is_alive() and not self._stop_event.wait(0.5):
                pass
            if self._current.error is not None:  # logged by the Approver; keep serving the next runs
                self._stop_event.wait(2.0)

    def cancel(self) -> None:
        self._stop_event.set()
        if self._current is not None:
            self._current.cancel()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.sandbox", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start, provision and serve the sandbox until SIGTERM/SIGINT")
    serve.add_argument("--env-file", required=True, type=Path,
                       help="where to write the Airflow environment (KEY='value' lines) once ready")
    serve.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".sandbox" / "sandbox-serve",
                       help="folder for the emulated robots' component files (default .sandbox/sandbox-serve)")
    serve.add_argument("--poll-seconds", type=int, default=2,
                       help="SIM2REAL_POLL_SECONDS written to the env file (status poll of every wait; default 2)")
    serve.add_argument("--decision", choices=DECISIONS, default="Approved",
                       help="what the emulated reviewer decides in the registry on each model package (default "
                            "Approved); airflow: no emulated reviewer, the approval is left to a person in Airflow "
                            "(Browse > Required Actions) or the registry")
    serve.add_argument("--robots", type=int, default=2, help="emulated Greengrass core devices, 1..10 (default 2)")
    serve.add_argument("--no-mlflow", dest="mlflow", action="store_false",
                       help="no local MLflow tracking server (the DAG runs untracked)")
    args = ap.parse_args(argv)
    if args.poll_seconds < 1:
        ap.error(f"--poll-seconds must be >= 1, got {args.poll_seconds}")
    return args


def serve(args: argparse.Namespace) -> int:
    """Start, provision, write the env file, then block until SIGTERM/SIGINT. Returns the exit code."""
    from sim2real.dev.sandbox import Sandbox
    from sim2real.dev.sandbox.device import PolicyDeviceCheck

    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        print(f"[sandbox] {signal.Signals(signum).name} received: shutting down", flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    env_file: Path = args.env_file.resolve()
    env_file.unlink(missing_ok=True)
    echo = lambda line: print(line, flush=True)  # noqa: E731
    with Sandbox(repo_root=REPO_ROOT, echo=echo, mlflow=args.mlflow,
                 mlflow_dir=args.work_dir.resolve() / "mlflow") as sandbox:
        config = sandbox.provision(robots=args.robots)
        sandbox.greengrass.device_check = PolicyDeviceCheck(sandbox, args.work_dir.resolve() / "greengrass-devices")
        approvals = None
        if args.decision == LEAVE_TO_AIRFLOW:
            print("[sandbox] no emulated reviewer: approve or reject each model package in Airflow "
                  "(Browse > Required Actions) or in the registry", flush=True)
        else:
            approvals = ApprovalLoop(sandbox, config["sagemaker"]["model_package_group"], args.decision)
            approvals.start()
        try:
            env = {
                **sandbox.airflow_env(),
                "SIM2REAL_POLL_SECONDS": str(args.poll_seconds),
                "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
                **({"SIM2REAL_MLFLOW_UI_URL": sandbox.mlflow.url} if sandbox.mlflow is not None else {}),
            }
            write_env_file(env_file, env)
            print(f"[sandbox] AWS endpoint {sandbox.endpoint_url} (region {sandbox.region}); provisioned bucket "
                  f"{config['artifacts_bucket']}, job queue {config['batch']['job_queue']}, thing group "
                  f"{config['greengrass']['thing_group_name']}", flush=True)
            print(f"[sandbox] ready: Airflow environment in {env_file}", flush=True)
            stop.wait()
        finally:
            if approvals is not None:
                approvals.cancel()
            env_file.unlink(missing_ok=True)
    print("[sandbox] stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
