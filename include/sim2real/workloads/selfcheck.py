"""Distributed self-check: proves torchrun's rendezvous formed the expected group.

Run under torchrun (``TRAIN_ENTRYPOINT="-m sim2real.workloads.selfcheck"`` with ``distributed_run.bash``).
Each rank joins the default process group (backend ``gloo``, or ``SELFCHECK_BACKEND``), all-reduces (SUM)
a tensor holding its rank, and checks ``world_size`` (against ``EXPECTED_WORLD_SIZE`` when set) and
``sum == world_size * (world_size - 1) / 2``. Every rank prints one JSON line::

    {"selfcheck": "ok", "rank": 0, "local_rank": 0, "world_size": 2, "sum": 1, "expected_sum": 1,
     "backend": "gloo", "master_addr": "127.0.0.1", "master_port": "5555", "hostname": "..."}

Exit code 0 when the check passes, 1 otherwise (the JSON line then says ``"selfcheck": "failed"``).
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> int:
    """Entry point. :return: exit code (0 ok, 1 check failed)."""
    import torch
    import torch.distributed as dist

    backend = os.environ.get("SELFCHECK_BACKEND", "gloo")
    dist.init_process_group(backend=backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        value = torch.tensor([float(rank)])
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        total = int(value.item())
        expected_sum = world * (world - 1) // 2
        expected_world = os.environ.get("EXPECTED_WORLD_SIZE")
        ok = total == expected_sum and (not expected_world or int(expected_world) == world)
        print(json.dumps({
            "selfcheck": "ok" if ok else "failed", "rank": rank, "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
            "world_size": world, "sum": total, "expected_sum": expected_sum,
            "expected_world_size": int(expected_world) if expected_world else None, "backend": backend,
            "master_addr": os.environ.get("MASTER_ADDR"), "master_port": os.environ.get("MASTER_PORT"),
            "hostname": socket.gethostname(),
        }), flush=True)
        dist.barrier()
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
