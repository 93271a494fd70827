"""Table-driven tests of the Batch failure classifier."""

from __future__ import annotations

import pytest
from sim2real.orchestration.failures import FAIL_FAST, RETRY_RESUME, FailureClass, classify_failure

CASES = [
    # (id, statusReason, exit code, log tail, job status, expected class, expected action)
    (
        "runnable",
        "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - no instance fits",
        None,
        "",
        "RUNNABLE",
        FailureClass.CAPACITY,
        FAIL_FAST,
    ),
    (
        "insufficient-capacity",
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Insufficient capacity",
        None,
        "",
        None,
        FailureClass.CAPACITY,
        FAIL_FAST,
    ),
    (
        "spot",
        "Host EC2 (instance i-0a1b2c3d4e5f67890) terminated.",
        137,
        "Traceback (most recent call last):",
        None,
        FailureClass.SPOT_RECLAIM,
        RETRY_RESUME,
    ),
    ("oom-exit", "Essential container in task exited", 137, "", None, FailureClass.OUT_OF_MEMORY, FAIL_FAST),
    (
        "oom-reason",
        "OutOfMemoryError: Container killed due to memory usage",
        None,
        "",
        None,
        FailureClass.OUT_OF_MEMORY,
        FAIL_FAST,
    ),
    (
        "cuda-oom",
        "Essential container in task exited",
        1,
        "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        None,
        FailureClass.OUT_OF_MEMORY,
        FAIL_FAST,
    ),
    (
        "rdzv-timeout",
        "Essential container in task exited",
        1,
        "Traceback (most recent call last):\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
        None,
        FailureClass.NCCL_RENDEZVOUS,
        RETRY_RESUME,
    ),
    (
        "nccl",
        "Essential container in task exited",
        1,
        ["step 10", "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"],
        None,
        FailureClass.NCCL_RENDEZVOUS,
        RETRY_RESUME,
    ),
    (
        "conn-refused-5555",
        "Essential container in task exited",
        1,
        "[W socket.cpp:663] [c10d] connect [10.0.1.12]:5555 failed: Connection refused",
        None,
        FailureClass.NCCL_RENDEZVOUS,
        RETRY_RESUME,
    ),
    (
        "traceback",
        "Essential container in task exited",
        2,
        'Traceback (most recent call last):\n  File "train.py", line 3\nKeyError: "TASK"',
        None,
        FailureClass.USER_CODE,
        FAIL_FAST,
    ),
    ("exit-1", "Essential container in task exited", 1, "", None, FailureClass.USER_CODE, FAIL_FAST),
    ("unknown", "CannotPullContainerError: pull access denied", None, None, None, FailureClass.UNKNOWN, RETRY_RESUME),
    ("nothing", None, None, None, None, FailureClass.UNKNOWN, RETRY_RESUME),
]


@pytest.mark.parametrize(
    ("reason", "exit_code", "logs", "job_status", "expected", "action"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_classification_table(reason, exit_code, logs, job_status, expected, action):
    result = classify_failure(reason, exit_code, logs, job_status=job_status)
    assert result.failure_class is expected
    assert result.action == action
    assert result.retryable is (action == RETRY_RESUME)
    line = result.describe()
    assert f"failure class {expected.value}" in line
    if expected is not FailureClass.UNKNOWN:
        assert result.evidence
    assert result.to_dict()["failure_class"] == expected.value
