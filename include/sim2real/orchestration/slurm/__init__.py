"""Slurm on SageMaker HyperPod: the training batch script and the shell lines sent to the submit host.

Everything here is plain text processing (no AWS call): :func:`render_script` fills
``train_rl.sbatch``; :func:`submit_commands`, :func:`status_commands` and :func:`cancel_commands`
return ``AWS-RunShellScript`` lines for the cluster's head/login node (the host with the Slurm
client), which :class:`~sim2real.orchestration.operators.hyperpod_slurm.HyperPodSlurmJobOperator` sends through SSM;
:func:`parse_submit_output`, :func:`parse_status_output` and :func:`parse_status_times` read what those
lines print; :func:`run_window`, :func:`job_cost_record` and :func:`cost_limit_message` turn a running
job's times into its cost-limit figures.

Sources: Slurm documentation — ``sbatch`` (``--parsable`` prints ``jobid[;cluster]``), ``squeue``
(``-h -n <name> -t <states> -o %i``; ``-r`` one line per array task, ``%F`` the array's base job id),
``sbatch --array`` (``0-15%4``: at most 4 tasks at once; ``--output`` ``%A`` / ``%a``: array job id / task
index), ``sacct`` (``-X -n -P -o State,ExitCode,Start,End``: ``ExitCode`` is
``<exit>:<signal>``, ``Start``/``End`` local time or ``Unknown``/``None``), ``scontrol show job -o`` (``JobState=``,
``ExitCode=``), ``scancel``, the job
state codes; SageMaker HyperPod developer guide (managed Slurm creates the partition ``dev``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim2real.orchestration.budget import job_cost_record as cost_record

#: The batch script template (``@NAME@`` fields).
TEMPLATE = Path(__file__).with_name("train_rl.sbatch")
#: Partition HyperPod's managed Slurm puts the worker nodes in.
DEFAULT_PARTITION = "dev"

#: Slurm end states (``sacct``/``scontrol`` ``JobState``); any other state is still active.
SLURM_SUCCESS_STATES = frozenset({"COMPLETED"})
SLURM_FAILURE_STATES = frozenset({
    "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
    "REVOKED",
})
#: States ``squeue`` lists for a job that a retry should wait for instead of submitting again.
REATTACH_STATES = "PENDING,CONFIGURING,RUNNING,COMPLETING,SUSPENDED,REQUEUED"

#: How far back ``sacct`` looks for a COMPLETED job of the run (a retry reports it instead of submitting).
COMPLETED_LOOKBACK = "now-7days"

#: Slurm prints Start/End in whole seconds: added to the time until the next poll in the cost check.
TIME_RESOLUTION_SECONDS = 1.0

#: Marker line the submit command prints (parsed by :func:`parse_submit_output`).
SUBMIT_MARKER = "sim2real-slurm-job-id="
#: Marker of each job of the run a fresh start's submit lines found active (:func:`parse_superseded`).
SUPERSEDED_MARKER = "sim2real-slurm-superseded="
#: Environment variable the submit lines read (:func:`submit_commands`): ``afresh`` or ``new``; unset: a retry.
START_ENV = "SIM2REAL_SLURM_START"
#: Marker of each array task line the job array's submit lines print (:func:`parse_array_tasks`).
ARRAY_TASK_MARKER = "sim2real-slurm-array-task="
_HEREDOC = "SIM2REAL_SBATCH_EOF"
_SBATCH_VALUE = re.compile(r"^[A-Za-z0-9._/%:+@=-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


def job_name(run_key: str) -> str:
    """The Slurm job name of a run (``--job-name``; also how a retry finds the job): ``sim2real-train-<run_key>``."""
    return f"sim2real-train-{run_key}"[:128]


def _sbatch_value(field: str, value: Any) -> str:
    text = str(value)
    if not _SBATCH_VALUE.match(text):
        raise ValueError(f"{field} {text!r} cannot go in an #SBATCH line: use letters, digits and ._/%:+@=- only")
    return text


def render_script(
    *,
    job_name: str,
    num_nodes: int,
    log_path: str,
    environment: Mapping[str, str],
    launcher: str,
    partition: str = DEFAULT_PARTITION,
    time_limit_minutes: int,
    use_container_image: bool = True,
    container_mounts: str = "",
    template: str | None = None,
    task_environments: list[Mapping[str, str]] | None = None,
) -> str:
    """Fill ``train_rl.sbatch``.

    :param job_name: ``--job-name`` (letters, digits, ``._-``...).
    :param num_nodes: ``--nodes`` (>= 1): one srun task per node.
    :param log_path: ``--output`` (``%j`` = job id), a path on storage the head node can read.
    :param environment: training env (``TASK``, ``MAX_ITERATIONS``, ``OUTPUT_URI``, ...), exported by the script.
    :param launcher: path of ``distributed_run.bash`` on the nodes (or in the image).
    :param partition: Slurm partition (default ``dev``).
    :param time_limit_minutes: ``--time`` in minutes (>= 1): Slurm ends the job TIMEOUT after it (the
        run's ``training_timeout_hours``).
    :param use_container_image: run each task in ``$SIM2REAL_CONTAINER_IMAGE`` with pyxis ``--container-image``.
    :param container_mounts: pyxis ``--container-mounts`` (e.g. ``/fsx:/fsx``), empty for none.
    :param task_environments: a job array (a sweep): one environment per array task, in task order; the
        script exports ``environment`` and then, in a ``case`` on ``SLURM_ARRAY_TASK_ID``, task ``i``'s
        variables (a task id with no entry exits 2 before training). ``None``: a single job.
    :return: the script text.
    :raises ValueError: a value that cannot be placed safely (names the field), ``num_nodes < 1``,
        ``time_limit_minutes < 1``.
    """
    nodes = int(num_nodes)
    if nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes!r}")
    minutes = int(time_limit_minutes)
    if minutes < 1:
        raise ValueError(f"time_limit_minutes must be >= 1 (the job's #SBATCH --time), got {time_limit_minutes!r}")
    lines = _exports(environment)
    if task_environments is not None:
        lines += _array_exports(task_environments)
    fields = {
        "JOB_NAME": _sbatch_value("job_name", job_name),
        "NUM_NODES": str(nodes),
        "PARTITION": _sbatch_value("partition", partition),
        "TIME_LIMIT_MINUTES": str(minutes),
        "LOG_PATH": _sbatch_value("log_path", log_path),
        "ENVIRONMENT": "\n".join(lines),
        "LAUNCHER": shlex.quote(launcher),
        "USE_CONTAINER_IMAGE": "1" if use_container_image else "0",
        "CONTAINER_MOUNTS": shlex.quote(container_mounts or ""),
    }
    text = template if template is not None else TEMPLATE.read_text(encoding="utf-8")
    for key, value in fields.items():
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise ValueError(f"template fields not filled: {sorted(set(left))}")
    if _HEREDOC in text:
        raise ValueError(f"the script must not contain the line {_HEREDOC}")
    return text


def _exports(environment: Mapping[str, str], indent: str = "") -> list[str]:
    lines = []
    for name, value in environment.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
        lines.append(f"{indent}export {name}={shlex.quote(str(value))}")
    return lines


def _array_exports(task_environments: list[Mapping[str, str]]) -> list[str]:
    """The ``case "$SLURM_ARRAY_TASK_ID"`` block exporting each array task's own variables."""
    if not task_environments:
        raise ValueError("a job array needs at least one task environment")
    lines = ["# Job array: each task exports its own candidate's variables (sbatch --array; SLURM_ARRAY_TASK_ID).",
             'case "${SLURM_ARRAY_TASK_ID:?not an array task: submit with sbatch --array}" in']
    for index, environment in enumerate(task_environments):
        lines.append(f"  {index})")
        lines += _exports(environment, indent="    ")
        lines.append("    ;;")
    lines += ['  *) echo "[train_rl.sbatch] error: no candidate for array task ${SLURM_ARRAY_TASK_ID}" >&2; exit 2;;',
              "esac"]
    return lines


def array_spec(tasks: int, max_parallel: int) -> str:
    """``sbatch --array``'s value for ``tasks`` array tasks with at most ``max_parallel`` running at once:
    ``0-<tasks-1>%<max_parallel>`` (Slurm throttles the array itself; the ``%`` limit is left out when it is
    not below ``tasks``).

    Source: Slurm documentation, sbatch ``--array=<indexes>``: "A maximum number of simultaneously running
    tasks from the job array may be specified using a "%" separator. For example "--array=0-15%4" will limit
    the number of simultaneously running tasks from this job array to 4."

    :raises ValueError: ``tasks`` or ``max_parallel`` below 1.
    """
    n, p = int(tasks), int(max_parallel)
    if n < 1 or p < 1:
        raise ValueError(f"a job array needs tasks >= 1 and max_parallel >= 1, got {tasks!r} and {max_parallel!r}")
    return f"0-{n - 1}" + (f"%{p}" if p < n else "")


def array_task_id(array_job_id: str, index: int) -> str:
    """The id of task ``index`` of job array ``array_job_id`` as ``sacct -j``, ``scontrol`` and ``scancel``
    take it: ``<array_job_id>_<index>``.

    :raises ValueError: an array job id that is not digits, or a negative index.
    """
    if not re.match(r"^[0-9]+$", str(array_job_id)):
        raise ValueError(f"a job array's id must be digits, got {array_job_id!r}")
    if int(index) < 0:
        raise ValueError(f"an array task index must be >= 0, got {index!r}")
    return f"{array_job_id}_{int(index)}"


def bash_commands(lines: list[str]) -> list[str]:
    """``lines`` as one ``AWS-RunShellScript`` command that runs them with ``bash -euo pipefail``.

    AWS-RunShellScript runs its commands with ``sh`` (dash on Ubuntu, where ``set -o pipefail`` may
    fail and bash syntax does not parse); the lines are handed to ``bash -c`` as one single-quoted
    argument, so here-documents and quotes inside them stay as written. The script's environment
    (``export`` lines sent before it) is inherited; its exit status is the command's.

    :return: a one-element list: ``exec bash -euo pipefail -c '<lines joined by newlines>'``.
    """
    return [f"exec bash -euo pipefail -c {shlex.quote(chr(10).join(lines))}"]


def submit_commands(*, script_path: str, script_text: str, job_name: str, log_dir: str) -> list[str]:
    """``AWS-RunShellScript`` lines that submit the script, or find the run's job already there.

    Run with bash (:func:`bash_commands`). Unless ``squeue -n <job_name>`` lists a job in
    :data:`REATTACH_STATES`, or ``sacct --name <job_name>`` (since :data:`COMPLETED_LOOKBACK`) lists
    one that ended COMPLETED (a retried task reports that job instead of paying for a second
    training), writes ``script_text`` to ``script_path`` (quoted here-document: no expansion) and runs
    ``sbatch --parsable``. Prints one line ``sim2real-slurm-job-id=<id> reattached=<0|1>``.

    A fresh start (the first try after a person cleared the task) exports :data:`START_ENV` before the lines:
    ``afresh``: when ``squeue`` lists jobs of the run in :data:`REATTACH_STATES`, prints one line
    ``sim2real-slurm-superseded=<id>`` per job and submits nothing (the operator cancels them, then sends the lines
    again with ``new``); otherwise submits (a COMPLETED job is not reported). ``new``: submits without looking.
    """
    q = shlex.quote
    name = q(job_name)
    completed = (
        f"sacct -X -n -P --name {name} -S {COMPLETED_LOOKBACK} -o JobID,State 2>/dev/null"
        " | awk -F'|' '$2 == \"COMPLETED\" && $1 ~ /^[0-9]+$/ { id = $1 } END { print id }'"
    )
    active = f"squeue -h -n {name} -t {REATTACH_STATES} -o %i"
    return bash_commands([
        f"mkdir -p {q(str(Path(script_path).parent))} {q(log_dir)}",
        f"start=\"${{{START_ENV}:-retry}}\"; existing=\"\"",
        f"if [ \"$start\" = afresh ]; then superseded=\"$({active})\"",
        f"  if [ -n \"$superseded\" ]; then for id in $superseded; do echo \"{SUPERSEDED_MARKER}$id\"; done; exit 0; fi",
        f"elif [ \"$start\" != new ]; then existing=\"$({active} | head -n 1)\"",
        f"  if [ -z \"$existing\" ]; then existing=\"$({completed} || true)\"; fi",
        "fi",
        f"if [ -n \"$existing\" ]; then echo \"{SUBMIT_MARKER}$existing reattached=1\"; exit 0; fi",
        f"cat > {q(script_path)} <<'{_HEREDOC}'\n{script_text.rstrip(chr(10))}\n{_HEREDOC}",
        f"job_id=\"$(sbatch --parsable {q(script_path)})\"",
        f"echo \"{SUBMIT_MARKER}${{job_id%%;*}} reattached=0\"",
    ])


def array_submit_commands(*, script_path: str, script_text: str, job_name: str, log_dir: str, array: str,
                          tasks: int) -> list[str]:
    """``AWS-RunShellScript`` lines that submit a job array (a sweep), or find the run's array tasks already there
    and submit only the candidates that have none.

    As :func:`submit_commands`, for ``sbatch --parsable --array=<array>`` (:func:`array_spec`). Per array index
    ``i`` (``0`` to ``tasks - 1``), the run's task for it is the newest (highest array job id) of: a task that
    ``squeue -h -r -n <job_name>`` lists in :data:`REATTACH_STATES` (``-o %i``: ``<array>_<i>``, one line per
    task), or one that ``sacct --name <job_name>`` (since :data:`COMPLETED_LOOKBACK`) lists COMPLETED. No index
    has a task: the whole array is submitted (``--array=<array>``). Every index has one: nothing is submitted
    (reattached). Some indexes have none (their task failed, was cancelled, or never ran): only those are
    submitted, ``sbatch --array=<i>,<j>[%<P>]`` of the same script (its ``case`` on ``SLURM_ARRAY_TASK_ID``
    trains exactly those candidates; ``%<P>``: the array's own limit), and the others keep their task: a
    candidate that COMPLETED is not paid for twice.

    Prints ``sim2real-slurm-job-id=<array job id> reattached=<0|1>`` (the array submitted now, or the newest
    reattached to) and one line ``sim2real-slurm-array-task=<i>:<array>_<i>`` per index
    (:func:`parse_array_tasks`).

    :param tasks: the array's task count (the candidates).
    """
    q = shlex.quote
    name = q(job_name)
    n = int(tasks)
    spec = _sbatch_value("array", array)
    limit = spec.partition("%")[2]
    found = (
        f"{{ squeue -h -r -n {name} -t {REATTACH_STATES} -o %i 2>/dev/null || true;"
        f" sacct -X -n -P --name {name} -S {COMPLETED_LOOKBACK} -o JobID,State 2>/dev/null"
        " | awk -F'|' '$2 == \"COMPLETED\" { print $1 }' || true; }"
    )
    # index -> newest task id among the active and COMPLETED ones; "-" where there is none
    pick = (f"awk -v n={n} '$1 ~ /^[0-9]+_[0-9]+$/ {{ split($1, p, \"_\"); i = p[2] + 0;"
            " if (i < n && p[1] + 0 > b[i] + 0) b[i] = p[1] }"
            " END { for (i = 0; i < n; i++) print i, (i in b) ? b[i] \"_\" i : \"-\" }'")
    return bash_commands([
        f"mkdir -p {q(str(Path(script_path).parent))} {q(log_dir)}",
        f"tasks=\"$({found} | {pick})\"",
        "missing=\"$(echo \"$tasks\" | awk '$2 == \"-\" { printf \"%s%s\", s, $1; s = \",\" }')\"",
        "newest=\"$(echo \"$tasks\" | awk '$2 != \"-\" { split($2, p, \"_\"); if (p[1] + 0 > b + 0) b = p[1] }"
        " END { print b }')\"",
        "if [ -z \"$missing\" ]; then echo \"" + SUBMIT_MARKER + "$newest reattached=1\"; else",
        f"cat > {q(script_path)} <<'{_HEREDOC}'\n{script_text.rstrip(chr(10))}\n{_HEREDOC}",
        f"if [ -z \"$newest\" ]; then job_id=\"$(sbatch --parsable --array={spec} {q(script_path)})\"; else",
        f"job_id=\"$(sbatch --parsable --array=\"$missing\"{'%' + limit if limit else ''} {q(script_path)})\"; fi",
        "job_id=\"${job_id%%;*}\"",
        "tasks=\"$(echo \"$tasks\" | awk -v j=\"$job_id\" '{ print $1, ($2 == \"-\") ? j \"_\" $1 : $2 }')\"",
        "echo \"" + SUBMIT_MARKER + "$job_id reattached=0\"; fi",
        "echo \"$tasks\" | awk '{ print \"" + ARRAY_TASK_MARKER + "\" $1 \":\" $2 }'",
    ])


def parse_array_tasks(stdout: str) -> dict[str, str]:
    """Array index → its task id (``"<i>": "<array>_<i>"``) from the output of :func:`array_submit_commands`
    (string keys: the form a task's XCom hands on). Empty when the output has no task lines.

    :raises ValueError: a task line whose id is not ``<digits>_<i>``.
    """
    found: dict[str, str] = {}
    for line in (stdout or "").splitlines():
        line = line.strip()
        if line.startswith(ARRAY_TASK_MARKER):
            index, _, task = line[len(ARRAY_TASK_MARKER):].partition(":")
            if not (index.isdigit() and re.match(rf"^[0-9]+_{int(index)}$", task)):
                raise ValueError(f"malformed array task line in the submit output: {line!r}")
            found[str(int(index))] = task
    return found


def parse_submit_output(stdout: str) -> tuple[str, bool]:
    """``(job_id, reattached)`` from the output of :func:`submit_commands`.

    :raises ValueError: no marker line or a malformed job id (the message quotes the output's end).
    """
    for line in reversed((stdout or "").splitlines()):
        line = line.strip()
        if line.startswith(SUBMIT_MARKER):
            head, _, flag = line[len(SUBMIT_MARKER):].partition(" reattached=")
            if _JOB_ID.match(head):
                return head, flag.strip() == "1"
    raise ValueError(f"no Slurm job id in the submit output: {(stdout or '')[-500:]!r}")


def parse_superseded(stdout: str) -> list[str]:
    """The job ids a fresh start's submit lines found active (``sim2real-slurm-superseded=<id>`` lines of
    :func:`submit_commands` with :data:`START_ENV` ``afresh``), in order; empty when there are none.

    :raises ValueError: a marker line whose id is not a Slurm job id.
    """
    found = []
    for line in (stdout or "").splitlines():
        line = line.strip()
        if line.startswith(SUPERSEDED_MARKER):
            found.append(_job_id(line[len(SUPERSEDED_MARKER):]))
    return found


def _job_id(job_id: str) -> str:
    if not _JOB_ID.match(str(job_id)):
        raise ValueError(f"Slurm job id must be digits, got {job_id!r}")
    return str(job_id)


def status_commands(job_id: str) -> list[str]:
    """Lines printing the job's state and run window.

    First line: ``sacct|<State>|<ExitCode>|<Start>|<End>`` (accounting, ``-o State,ExitCode,Start,End``),
    else ``scontrol|<scontrol show job -o line>``, else ``unknown|``. With a known job, also
    ``start|<epoch s>`` / ``end|<epoch s>`` (``Start``/``End`` or ``StartTime``/``EndTime`` converted with
    ``date -d`` on the head node, whose local time zone is the one Slurm prints in; only values that are
    dates: ``Unknown``/``None`` print nothing) and ``clock|<epoch s>`` (the head node's clock, the one
    Slurm's times are on). Runs under ``sh`` (POSIX lines, GNU ``date``).
    """
    jid = _job_id(job_id)
    epoch = ('epoch() { case "$2" in [0-9][0-9][0-9][0-9]-*) '
             't="$(date -d "$2" +%s 2>/dev/null)" && echo "$1|$t" || true;; esac; }')
    return [
        epoch,
        f"out=\"$(sacct -j {jid} -X -n -P -o State,ExitCode,Start,End 2>/dev/null | head -n 1 || true)\"",
        "if [ -n \"$out\" ]; then echo \"sacct|$out\"; "
        "epoch start \"$(echo \"$out\" | cut -d'|' -f3)\"; epoch end \"$(echo \"$out\" | cut -d'|' -f4)\"; "
        "echo \"clock|$(date +%s)\"; exit 0; fi",
        f"if line=\"$(scontrol show job -o {jid} 2>/dev/null)\" && [ -n \"$line\" ]; then echo \"scontrol|$line\"; "
        "case \"$line\" in *JobState=PENDING*) ;; *) "
        "epoch start \"$(echo \"$line\" | sed -n 's/.*StartTime=\\([^ ]*\\).*/\\1/p')\"; "
        "epoch end \"$(echo \"$line\" | sed -n 's/.*EndTime=\\([^ ]*\\).*/\\1/p')\";; esac; "
        "echo \"clock|$(date +%s)\"; exit 0; fi",
        "echo 'unknown|'",
    ]


def cancel_commands(job_id: str) -> list[str]:
    """Lines cancelling the job (``scancel``)."""
    return [f"scancel {_job_id(job_id)}"]


def log_tail_commands(log_path: str, lines: int = 40) -> list[str]:
    """Lines printing the last ``lines`` lines of the job's log (nothing when it is absent)."""
    return [f"tail -n {int(lines)} {shlex.quote(log_path)} 2>/dev/null || true"]


def parse_status_output(stdout: str) -> tuple[str, str]:
    """``(state, exit_code)`` from the output of :func:`status_commands`.

    ``state`` is the Slurm state code (``"CANCELLED by 0"`` -> ``CANCELLED``) or ``UNKNOWN`` when
    neither ``sacct`` nor ``scontrol`` knows the job; ``exit_code`` is ``<exit>:<signal>`` or ``""``.
    """
    for line in (stdout or "").splitlines():
        source, _, rest = line.strip().partition("|")
        if source == "sacct" and rest:
            fields = rest.split("|")
            code = fields[1].strip() if len(fields) > 1 else ""
            return (fields[0].split() or ["UNKNOWN"])[0].rstrip("+"), code
        if source == "scontrol" and rest:
            state = re.search(r"\bJobState=(\S+)", rest)
            code = re.search(r"\bExitCode=(\S+)", rest)
            return (state.group(1) if state else "UNKNOWN"), (code.group(1) if code else "")
    return "UNKNOWN", ""


def log_path_for(log_path: str, job_id: str, name: str | None = None) -> str:
    """The ``--output`` pattern with ``%j`` (job id), ``%x`` (job name) and, for an array task
    ``<base>_<index>``, ``%A`` (the array's base job id) and ``%a`` (the task index) filled in."""
    base, _, index = str(job_id).partition("_")
    path = log_path.replace("%A", base).replace("%a", index) if index else log_path
    path = path.replace("%j", str(job_id))
    return path.replace("%x", name) if name else path


def parse_status_times(stdout: str) -> dict[str, float | None]:
    """The job's run window from the output of :func:`status_commands`.

    :return: ``{"start", "end", "clock"}`` in epoch seconds, each None when not printed: ``start``/``end``
        the job's ``Start``/``End`` (None before it runs / while it runs), ``clock`` the head node's time
        at the query (Slurm's clock: elapsed time is ``clock - start``).
    """
    times: dict[str, float | None] = {"start": None, "end": None, "clock": None}
    for line in (stdout or "").splitlines():
        key, _, value = line.strip().partition("|")
        if key in times and times[key] is None:
            try:
                times[key] = float(value)
            except ValueError:
                continue
    return times


def run_window(times: dict[str, float | None], first_running_at: float | None, now: float,
               ended: bool = False) -> tuple[float | None, float | None, float | None]:
    """``(started_at, stopped_at, elapsed_s)`` of a Slurm job (epoch seconds, seconds).

    The start is ``sacct``'s ``Start`` (``times["start"]``, :func:`parse_status_times`), else
    ``first_running_at`` (when the waiter first saw the job RUNNING, on its own clock ``now``); the
    end is ``End`` (None while the job runs). Elapsed time is measured on the start's clock: the head
    node's (``times["clock"]``) for a Slurm start, ``now`` otherwise. Time PENDING is not counted.
    ``ended``: the job is in an end state; without an ``End`` it is taken as ended at the query.

    :return: all None when the job has not started (no Start, never seen RUNNING).
    """
    if times.get("start") is not None:
        start = float(times["start"])
        end = times.get("end")
        current = float(times["clock"]) if times.get("clock") is not None else float(now)
    elif first_running_at is not None:
        start, end, current = float(first_running_at), None, float(now)
    else:
        return None, None, None
    if end is not None and float(end) > current:  # scontrol's EndTime of a running job: its time limit
        end = None
    if end is None and ended:
        end = current
    elapsed = max((float(end) if end is not None else current) - start, 0.0)
    return start, (None if end is None else float(end)), elapsed


def job_cost_record(*, job_id: str, cluster_name: str, started_at: float | None, stopped_at: float | None,
                    elapsed_s: float | None, num_nodes: int | None, usd_per_node_hour: float | None,
                    stopped_by_budget: bool = False) -> dict[str, Any]:
    """What a Slurm job ran and cost, for the task's result and the ``job_cost`` XCom.

    Cost and shape: :func:`sim2real.orchestration.budget.job_cost_record` (with ``cluster_name`` added).

    :return: ``{"job_id", "cluster_name", "num_nodes", "started_at", "stopped_at" (epoch seconds, None when unknown),
        "run_seconds", "usd_per_node_hour", "cost_usd" (USD, None without a start, a price or a node
        count), "stopped_by_budget"}``.
    """
    return cost_record(job_id=job_id, num_nodes=num_nodes, started_at=started_at, stopped_at=stopped_at,
                       run_seconds=elapsed_s, usd_per_node_hour=usd_per_node_hour,
                       stopped_by_budget=stopped_by_budget, cluster_name=cluster_name)


def cost_limit_message(*, job_id: str, job_name: str, cluster_name: str, verdict: Any, cancelled: bool,
                       cancel_error: str = "") -> str:
    """The failure message of a Slurm job stopped at its cost limit: the numbers and what to change.

    :param verdict: the :class:`sim2real.orchestration.budget.BudgetVerdict` that stopped it.
    :param cancelled: whether ``scancel`` succeeded.
    """
    return (
        f"Slurm job {job_id} ({job_name}) on HyperPod cluster {cluster_name} stopped at the training cost limit: "
        f"it ran {verdict.elapsed_s:.0f} s ({verdict.elapsed_s / 3600:.2f} h) on {verdict.instances} node(s) at "
        f"${verdict.usd_per_hour:.4g} per node-hour = ${verdict.cost_usd:.2f}; at the next poll "
        f"(+{verdict.poll_interval_s:.0f} s) it would cost ${verdict.next_poll_cost_usd:.2f}, above the limit "
        f"${verdict.limit_usd:.2f} (max_budget_usd minus the estimate of the other stages). "
        + ("The job was cancelled (scancel)." if cancelled
           else f"scancel FAILED ({cancel_error}): run 'scancel {job_id}' on the head node by hand.")
        + " Raise max_budget_usd, or lower num_nodes or train_time_budget_seconds (the trainer then stops "
        "and checkpoints within the budget). Run time counts from the job's Slurm Start (time PENDING is not "
        "counted); the scale-down teardown releases the nodes."
    )
