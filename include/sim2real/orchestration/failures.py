"""Classify a failed AWS Batch training job into a failure class with an action.

Inputs are what ``DescribeJobs`` and CloudWatch Logs give for a failed job (AWS Batch API
reference, ``JobDetail``): ``statusReason`` (e.g. ``"Host EC2 (instance i-0abc) terminated."``,
``"Essential container in task exited"``), the container ``exitCode`` of the failing attempt,
and the tail of the job's log stream (``GetLogEvents``).

Each class carries an *action*:

* ``retry_resume`` — the cause is transient (Spot reclaim, a lost rendezvous): let Airflow retry
  the task; the retry submits a new job and the trainer resumes from its last checkpoint.
* ``fail_fast`` — retrying the same job cannot help (no capacity, out of memory, a bug): the task
  fails without retries and the message says what to change.

Rules are checked in the order of :data:`RULES`; the first match wins (an infrastructure cause
beats the Python traceback it produces). Sources for the patterns: AWS Batch "Job status
reasons" / troubleshooting pages (``Host EC2 ... terminated``, RUNNABLE with
``MISCONFIGURATION:`` / ``CAPACITY:`` reasons), PyTorch ``torch.distributed.elastic``
(``RendezvousTimeoutError``, ``RendezvousConnectionError``), NCCL (``NCCL error``,
``ncclSystemError``), the Linux OOM killer (exit code 137 = 128 + SIGKILL), PyTorch
(``torch.OutOfMemoryError: CUDA out of memory``). Port 5555 is the ``RDZV_PORT`` default of
``containers/rl/distributed_run.bash``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

RETRY_RESUME = "retry_resume"
FAIL_FAST = "fail_fast"


class FailureClass(str, enum.Enum):
    """Why a training job failed (value = the name used in messages and XCom)."""

    CAPACITY = "CAPACITY"
    SPOT_RECLAIM = "SPOT_RECLAIM"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NCCL_RENDEZVOUS = "NCCL_RENDEZVOUS"
    USER_CODE = "USER_CODE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class FailureRule:
    """One row of the classification table.

    :param failure_class: the class this rule assigns.
    :param action: :data:`RETRY_RESUME` or :data:`FAIL_FAST`.
    :param advice: what an operator should do, appended to failure messages.
    :param reason_patterns: regexes matched (case-insensitive) against ``statusReason``.
    :param log_patterns: regexes matched (case-insensitive) against the log tail.
    :param exit_codes: container exit codes that match on their own.
    :param job_statuses: job statuses that match on their own (``RUNNABLE`` for capacity).
    """

    failure_class: FailureClass
    action: str
    advice: str
    reason_patterns: tuple[str, ...] = ()
    log_patterns: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    job_statuses: tuple[str, ...] = ()


RULES: tuple[FailureRule, ...] = (
    FailureRule(
        FailureClass.CAPACITY,
        FAIL_FAST,
        "no instance could be placed: check the EC2 vCPU quota, the compute environment "
        "(state, maxvCpus, instance types, subnets/AZs) and retry when capacity is available",
        reason_patterns=(
            r"insufficient\s+capacity",
            r"InsufficientInstanceCapacity",
            r"^CAPACITY:",
            r"^MISCONFIGURATION:",
            r"stuck in RUNNABLE",
            r"RUNNABLE for more than",
            r"VcpuLimitExceeded",
        ),
        job_statuses=("RUNNABLE",),
    ),
    FailureRule(
        FailureClass.SPOT_RECLAIM,
        RETRY_RESUME,
        "the host was reclaimed or terminated: retry; the trainer resumes from the last checkpoint",
        reason_patterns=(r"Host EC2 \(instance i-[0-9a-f]+\) terminated", r"spot instance.*(interrupt|reclaim)"),
    ),
    FailureRule(
        FailureClass.OUT_OF_MEMORY,
        FAIL_FAST,
        "out of memory: lower NUM_ENVS / batch size or use an instance type with more (GPU) memory",
        reason_patterns=(r"OutOfMemoryError", r"out of memory"),
        log_patterns=(r"OutOfMemoryError", r"CUDA out of memory", r"\bOOM\b", r"Killed process \d+"),
        exit_codes=(137,),
    ),
    FailureRule(
        FailureClass.NCCL_RENDEZVOUS,
        RETRY_RESUME,
        "the nodes could not rendezvous or NCCL failed: retry; if it repeats check the security group "
        "allows all traffic between the nodes (RDZV_PORT 5555, NCCL ports) and EFA/NCCL settings",
        reason_patterns=(r"RendezvousTimeoutError", r"NCCL error"),
        log_patterns=(
            r"RendezvousTimeoutError",
            r"RendezvousConnectionError",
            r"RendezvousClosedError",
            r"NCCL error",
            r"nccl(System|Internal|Remote)Error",
            r"Connection refused.*\b5555\b",
            r"\b5555\b.*Connection refused",
        ),
    ),
    FailureRule(
        FailureClass.USER_CODE,
        FAIL_FAST,
        "the training code failed: read the traceback in the node's log stream and fix the code or parameters",
        log_patterns=(r"Traceback \(most recent call last\)",),
        exit_codes=(1,),
    ),
)

_UNKNOWN_RULE = FailureRule(
    FailureClass.UNKNOWN,
    RETRY_RESUME,
    "unrecognised failure: read the job's status reason and logs; a retry resumes from the last checkpoint",
)


@dataclass(frozen=True)
class FailureClassification:
    """Result of :func:`classify_failure`.

    :param failure_class: the class.
    :param action: :data:`RETRY_RESUME` or :data:`FAIL_FAST`.
    :param retryable: ``action == RETRY_RESUME``.
    :param evidence: the text (or exit code / status) that matched; empty for UNKNOWN.
    :param advice: what to do.
    """

    failure_class: FailureClass
    action: str
    retryable: bool
    evidence: str
    advice: str
    extra: dict = field(default_factory=dict)

    def describe(self) -> str:
        """One line for failure messages: ``failure class OUT_OF_MEMORY (fail_fast): <advice> [evidence: ...]``."""
        text = f"failure class {self.failure_class.value} ({self.action}): {self.advice}"
        if self.evidence:
            text += f" [evidence: {self.evidence}]"
        return text

    def to_dict(self) -> dict:
        """JSON-serialisable form (class as its string value)."""
        data = asdict(self)
        data["failure_class"] = self.failure_class.value
        return data


def _search(patterns: Iterable[str], text: str) -> str | None:
    for pattern in patterns:
        match = re.search(pattern, text, flags=re.IGNORECASE | re.MULTILINE)
        if match:
            line_start = text.rfind("\n", 0, match.start()) + 1
            line_end = text.find("\n", match.end())
            return text[line_start : line_end if line_end != -1 else len(text)].strip()[:300]
    return None


def classify_failure(
    status_reason: str | None,
    exit_code: int | None = None,
    log_tail: str | Iterable[str] | None = None,
    job_status: str | None = None,
) -> FailureClassification:
    """Classify a failed Batch job.

    :param status_reason: ``JobDetail.statusReason`` (may be None).
    :param exit_code: ``container.exitCode`` of the failing attempt (may be None).
    :param log_tail: the last lines of the job's log (a string or an iterable of lines).
    :param job_status: the job status when the task gave up on it (``RUNNABLE`` = never placed).
    :return: a :class:`FailureClassification`; never raises for any combination of inputs.
    """
    reason = status_reason or ""
    if log_tail is None:
        logs = ""
    elif isinstance(log_tail, str):
        logs = log_tail
    else:
        logs = "\n".join(str(line) for line in log_tail)
    for rule in RULES:
        evidence = None
        if job_status and job_status in rule.job_statuses:
            evidence = f"job status {job_status}" + (f": {reason}" if reason else "")
        if evidence is None and reason:
            found = _search(rule.reason_patterns, reason)
            evidence = f"statusReason: {found}" if found else None
        if evidence is None and logs:
            found = _search(rule.log_patterns, logs)
            evidence = f"log: {found}" if found else None
        if evidence is None and exit_code is not None and exit_code in rule.exit_codes:
            evidence = f"exit code {exit_code}"
        if evidence is not None:
            return FailureClassification(
                rule.failure_class, rule.action, rule.action == RETRY_RESUME, evidence, rule.advice
            )
    return FailureClassification(_UNKNOWN_RULE.failure_class, _UNKNOWN_RULE.action, True, "", _UNKNOWN_RULE.advice)
