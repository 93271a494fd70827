"""``make bench``: measure on this machine and print one table (also written to bench-results.json).

Rows:

* DAG file parse time: median wall time of parsing ``dags/sim_to_real.py`` with a DagBag, each
  parse in a fresh interpreter (what the dag-processor pays per file), seconds;
* trainer env-steps/s with 1 and 8 vectorised environments (Reacher-v5, the trainer's env loop);
* policy server latency p50/p99 (ms) and throughput (requests/s) over real ZMQ on loopback,
  onnxruntime on CPU, serving the ONNX export of a freshly trained toy policy.

Numbers depend on the machine and its load; they are measurements, not test assertions.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

_PARSE_SNIPPET = """
import time, sys
t = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
print(time.perf_counter() - t)
"""


def dag_parse_seconds(path: Path, repeats: int = 5) -> dict[str, float]:
    """Median/min seconds to import Airflow and parse ``path`` in a fresh interpreter."""
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _PARSE_SNIPPET, str(path)], capture_output=True, text=True,
                             env=env, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats}


def policy_latency(n: int = 1000) -> dict[str, Any]:
    """Train a 1-iteration toy policy, export it to ONNX and measure the policy server over ZMQ."""
    from sim2real.edge.benchmark import policy_server_latency
    from sim2real.workloads.export import export_onnx

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TASK": "Reacher-v5", "MAX_ITERATIONS": "1", "NUM_ENVS": "2", "OUTPUT_URI": tmp}
        env.pop("AWS_ENDPOINT_URL", None)
        subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, check=True,
                       capture_output=True)
        manifest = json.loads(Path(tmp, "manifest.json").read_text())
        onnx_path = str(Path(tmp, "policy.onnx"))
        export_onnx(str(Path(tmp, manifest["checkpoint_uri"].rsplit("/", 1)[-1])), onnx_path)
        return policy_server_latency(onnx_path, n=n)


def main() -> int:
    from sim2real.workloads.bench import env_steps_per_second

    results: dict[str, Any] = {}
    results["dag_parse"] = dag_parse_seconds(REPO_ROOT / "dags" / "sim_to_real.py")
    results["env_steps_per_s"] = {str(n): env_steps_per_second(n, seconds=5.0) for n in (1, 8)}
    results["policy_server"] = policy_latency()
    rows = [
        ("DAG parse (fresh interpreter, median of 5)", f"{results['dag_parse']['median_s']:.2f} s"),
        ("trainer env-steps/s, 1 env", f"{results['env_steps_per_s']['1']:.0f}"),
        ("trainer env-steps/s, 8 envs", f"{results['env_steps_per_s']['8']:.0f}"),
        ("policy server p50 / p99 (ZMQ, onnxruntime CPU)",
         f"{results['policy_server']['p50_ms']:.2f} / {results['policy_server']['p99_ms']:.2f} ms"),
        ("policy server throughput", f"{results['policy_server']['throughput_rps']:.0f} req/s"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"\n{'benchmark'.ljust(width)} | result\n{'-' * width}-+-{'-' * 20}")
    for name, value in rows:
        print(f"{name.ljust(width)} | {value}")
    out = REPO_ROOT / "bench-results.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
