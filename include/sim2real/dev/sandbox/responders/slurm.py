"""Emulated Slurm for the HyperPod head node: ``sbatch``, ``srun``, ``squeue``, ``sacct``, ``scontrol``, ``scancel``.

moto has no Slurm, and HyperPod's managed Slurm runs on the cluster's own nodes. Here the head
node is an EC2 instance registered with the sandbox's SSM agent; commands sent to it run with a
``bin/`` folder of these six commands first on PATH (and only for that instance), each one a call
of this module (``python -m sim2real.dev.sandbox.responders.slurm <command> ...``) sharing a state
folder of one JSON file per job (:mod:`sim2real.dev.sandbox.responders.slurm_jobs`):

* ``sbatch [--parsable] [options] script``: reads the script's ``#SBATCH`` lines (command-line
  options win), records the job PENDING and starts a detached runner. The runner waits until the
  HyperPod cluster's GPU instance group has ``--nodes`` Running nodes (ListClusterNodes against the
  sandbox: a job submitted before the scale-up stays PENDING, as with Reason=Resources), then runs
  the script with bash on this machine as the batch step, with ``SLURM_JOB_ID``, ``SLURM_JOB_NAME``,
  ``SLURM_JOB_NODELIST`` (loopback addresses 127.0.0.1, 127.0.0.2, ... standing for the nodes),
  ``SLURM_NNODES``/``SLURM_JOB_NUM_NODES`` and output to ``--output`` (``%j``, ``%x``). Exit code 0 →
  COMPLETED ``0:0``, else FAILED ``<code>:0``.
* ``srun``: one process per node and task (``SLURM_NODEID``, ``SLURM_PROCID``, ``SLURM_LOCALID``,
  ``SLURM_NTASKS``); ``--kill-on-bad-exit`` stops the others when one fails; ``--container-image``
  is logged and ignored (the tasks run on this machine, not in enroot).
* ``squeue -h [-n name] [-t states] [-o "%i %T %j"]``, ``sacct -j id -X -n -P -o State,ExitCode,Start,End``
  (``Start``/``End``: when the batch step started / the job ended, local time, ``Unknown`` before),
  ``sacct -X -n -P --name name -S now-7days -o JobID,State`` (every recorded job of that name),
  ``scontrol show hostnames [list]`` / ``scontrol show job [-o] id``, ``scancel id`` (→ CANCELLED,
  exit code ``0:15``, the batch step's process group killed).

Job arrays (``sbatch --array=0-2%2``; source: Slurm documentation, "Job Array Support" and sbatch
``--array``): one record per task, id ``<array job id>_<index>`` (the array job id is the first task's own job
id; each further task gets the next one, as ``%j``/``SLURM_JOB_ID``), each task run as above with
``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_COUNT``/``_MIN``/``_MAX`` and
``--output``'s ``%A``/``%a`` filled in; tasks start in index order, at most ``%<limit>`` of one array at once.
Every job, array task or not, starts only when the GPU group has enough Running nodes that no other running
job holds (``--exclusive`` nodes). ``squeue`` prints one line per array task (its ``-r`` form; ``%i`` the task's
``<array>_<index>``, ``%F`` the array job id, ``%K`` the index), ``sacct -j <array>`` every task of the
array and ``sacct -j <array>_<index>`` one (``JobID`` ``<array>_<index>``, ``JobIDRaw`` the task's own id),
``scontrol show job <array>_<index>`` one line with ``ArrayJobId=``/``ArrayTaskId=``, ``scancel <array>``
every task still active and ``scancel <array>_<index>`` one.

Fault: ``SIM2REAL_SLURM_FAULT=fail`` in the environment of ``sbatch`` (the sandbox's
``slurm_job_fail`` fault sets it) makes the job end FAILED with exit code 1 instead of running.
Every emulation step is logged as ``[sandbox:emulated]`` (to stderr and to the job's output).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim2real.dev.sandbox._core import PREFIX, free_port
from sim2real.dev.sandbox.responders.slurm_jobs import (_all_jobs, _die, _load, _next_id, _note, _order, _read, _save,
                                                      _state_dir, _update)

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

COMMANDS = ("sbatch", "srun", "squeue", "sacct", "scontrol", "scancel")
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


class SlurmResponder:
    """Owns the emulated Slurm's ``bin/`` and state folders and the head node's command environment.

    :param sandbox: the running sandbox (its faults decide ``SIM2REAL_SLURM_FAULT`` at each command).
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def root(self) -> Path:
        """Folder holding ``bin/``, ``state/`` and ``shared/`` (the cluster's shared storage)."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="sim2real-slurm-")
            root = Path(self._tmp.name)
            (root / "bin").mkdir()
            (root / "state").mkdir()
            (root / "shared").mkdir()
            for name in COMMANDS:
                path = root / "bin" / name
                path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sim2real.dev.sandbox.responders.slurm {name} "$@"\n',
                                encoding="utf-8")
                path.chmod(0o755)
        return Path(self._tmp.name)

    @property
    def shared_dir(self) -> str:
        """Stands for the cluster's shared file system (FSx): batch scripts and job logs."""
        return str(self.root / "shared")

    def head_node_env(self, cluster_name: str, gpu_group: str) -> dict[str, str]:
        """Extra environment of commands run on the head node (Slurm commands on PATH)."""
        env = {
            "SIM2REAL_SLURM_BIN": str(self.root / "bin"),
            "SIM2REAL_SLURM_STATE": str(self.root / "state"),
            "SIM2REAL_SLURM_CLUSTER": cluster_name,
            "SIM2REAL_SLURM_GROUP": gpu_group,
        }
        if self.sandbox.faults.get("slurm_job_fail"):
            env["SIM2REAL_SLURM_FAULT"] = "fail"
        return env

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the emulated Slurm knows (oldest first)."""
        if self._tmp is None:
            return []
        return sorted((_read(p) for p in (self.root / "state").glob("*.json")), key=lambda j: _order(j["job_id"]))

    def install(self, patcher: Any) -> None:  # no moto patch: the head node's commands carry the env
        del patcher

    def shutdown(self) -> None:
        active = [job for job in self.jobs() if job.get("state") in ACTIVE]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for job in active:
                for key in ("script_pid", "runner_pid"):
                    if job.get(key):
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(int(job[key]), sig)
            if active and sig == signal.SIGTERM:
                time.sleep(1)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


# ---------------------------------------------------------------------------------------------
# the commands (run as subprocesses on the "head node")

def _parse_array(spec: str) -> tuple[list[int], int | None]:
    """``--array``'s ``<indexes>[%<limit>]``: ``0-15``, ``0,4,7``, ``0-15:4`` (step), ``0-15%4``.

    :return: ``(indexes in order, limit or None)``.
    """
    text, _, limit = spec.partition("%")
    indexes: list[int] = []
    try:
        for part in text.split(","):
            rng, _, step = part.partition(":")
            lo, _, hi = rng.partition("-")
            indexes += list(range(int(lo), int(hi or lo) + 1, int(step or 1)))
        throttle = int(limit) if limit else None
    except ValueError:
        _die(f"sbatch: error: Invalid job array specification {spec!r}")
    if not indexes or (throttle is not None and throttle < 1):
        _die(f"sbatch: error: Invalid job array specification {spec!r}")
    return sorted(set(indexes)), throttle


_OPTION = re.compile(r"^--([a-z-]+)(?:=(.*))?$")


def _options(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Long options (``--x=y`` / ``--x y`` / ``-N n`` / ``-J name`` / ``-o path``) and the rest."""
    flags = {"exclusive", "parsable", "kill-on-bad-exit", "wait", "overlap"}
    short = {"-N": "nodes", "-J": "job-name", "-o": "output", "-p": "partition", "-n": "ntasks", "-a": "array"}
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        match = _OPTION.match(word)
        if match and match.group(1) in flags and match.group(2) is None:
            opts[match.group(1)] = "1"
        elif match:
            if match.group(2) is not None:
                opts[match.group(1)] = match.group(2)
            else:
                i += 1
                opts[match.group(1)] = words[i] if i < len(words) else ""
        elif word in short:
            i += 1
            opts[short[word]] = words[i] if i < len(words) else ""
        else:
            return opts, words[i:]
        i += 1
    return opts, []


def sbatch(argv: list[str]) -> int:
    opts, rest = _options(argv)
    if not rest:
        _die("sbatch: error: no batch script given")
    script = Path(rest[0]).resolve()
    if not script.is_file():
        _die(f"sbatch: error: Unable to open file {rest[0]}")
    directives: list[str] = []
    for line in script.read_text(encoding="utf-8").splitlines():
        if line.startswith("#SBATCH"):
            directives += line[len("#SBATCH"):].split()
    opts = {**_options(directives)[0], **opts}
    try:
        nodes = int(opts.get("nodes", "1"))
    except ValueError:
        _die(f"sbatch: error: Invalid node count specification {opts.get('nodes')!r}")
    name = opts.get("job-name") or script.name
    array = _parse_array(opts["array"]) if opts.get("array") else None
    first = _next_id()
    tasks: list[tuple[str, str, int | None]] = []  # (record id, own job id, array index)
    if array is None:
        tasks.append((first, first, None))
    else:
        for n, index in enumerate(array[0]):
            tasks.append((f"{first}_{index}", first if n == 0 else _next_id(), index))
    for record_id, raw_id, index in tasks:
        pattern = opts.get("output") or ("slurm-%A_%a.out" if index is not None else f"slurm-{raw_id}.out")
        if index is not None:
            pattern = pattern.replace("%A", first).replace("%a", str(index))
        output = pattern.replace("%j", raw_id).replace("%x", name)
        job = {
            "job_id": record_id, "raw_id": raw_id, "name": name, "script": str(script), "script_args": rest[1:],
            "nodes": nodes, "partition": opts.get("partition", "dev"), "output": str(Path(output).resolve()),
            "state": "PENDING", "exit_code": "0:0", "reason": "Resources", "submit_time": time.time(),
            "cwd": os.getcwd(), "fault": os.environ.get("SIM2REAL_SLURM_FAULT", ""),
        }
        if index is not None:
            job.update(array_job_id=first, array_task_id=index, array_limit=array[1],
                       array_indexes=array[0])
        _save(job)
        runner = subprocess.Popen(
            [sys.executable, "-m", "sim2real.dev.sandbox.responders.slurm", "_run", record_id],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=os.environ.copy(),
        )
        _update(record_id, runner_pid=runner.pid)
    what = f"array {first} ({opts['array']}: {len(tasks)} task(s))" if array else f"job {first}"
    _note(f"sbatch {what} ({name}, {nodes} node(s) each) accepted; a local runner per job plays it")
    print(first if "parsable" in opts else f"Submitted batch job {first}", flush=True)
    return 0


def _claim(job_id: str, running: int | None) -> str | None:
    """Start the job if it may (under the state lock): ``None`` when it went RUNNING, else why it still waits.

    Waits while the nodes that no other running job holds are fewer than its ``--nodes`` (``running``: the GPU
    group's Running nodes, None = not checked), and for an array task while a lower index has not started
    or ``%<limit>`` tasks of its array are running (Reason ``JobArrayTaskLimit``)."""
    import fcntl

    with open(_state_dir() / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        job = _load(job_id) or {}
        if job.get("state") != "PENDING":
            return None
        jobs = [j for j in _all_jobs() if j["job_id"] != job_id]
        active = [j for j in jobs if j["state"] in ("RUNNING", "COMPLETING")]
        if job.get("array_job_id"):
            mine = [j for j in jobs if j.get("array_job_id") == job["array_job_id"]]
            if any(j["state"] == "PENDING" and j["array_task_id"] < job["array_task_id"] for j in mine):
                return "JobArrayTaskLimit (a lower array index has not started)"
            limit = job.get("array_limit")
            if limit and sum(j["state"] in ("RUNNING", "COMPLETING") for j in mine) >= limit:
                return f"JobArrayTaskLimit ({limit} task(s) of array {job['array_job_id']} running)"
        if running is not None:
            free = running - sum(int(j["nodes"]) for j in active)
            if free < int(job["nodes"]):
                return f"Resources ({running} running node(s) in the partition, {free} free, {job['nodes']} needed)"
        job.update(state="RUNNING", reason="None", start_time=time.time())
        _save(job)
        return None


def _running_nodes() -> int | None:
    cluster, group = os.environ.get("SIM2REAL_SLURM_CLUSTER"), os.environ.get("SIM2REAL_SLURM_GROUP")
    if not (cluster and group):
        return None
    import boto3

    client = boto3.client("sagemaker")
    nodes, kwargs = 0, {"ClusterName": cluster, "InstanceGroupNameContains": group}
    while True:
        page = client.list_cluster_nodes(**kwargs)
        nodes += sum(1 for n in page.get("ClusterNodeSummaries", [])
                     if n.get("InstanceGroupName") == group and (n.get("InstanceStatus") or {}).get("Status") == "Running")
        if not page.get("NextToken"):
            return nodes
        kwargs["NextToken"] = page["NextToken"]


def _run(job_id: str) -> int:
    """The job's life: PENDING until the nodes exist, RUNNING the batch step, then its end state."""
    job = _load(job_id) or {}
    output = Path(job["output"])
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "ab", buffering=0) as log:
        def note(message: str) -> None:
            log.write(f"{PREFIX} slurm: {message}\n".encode())

        while True:
            if (_load(job_id) or {}).get("state") == "CANCELLED":
                note(f"job {job_id} cancelled while PENDING")
                return 0
            try:
                waiting = _claim(job_id, _running_nodes())
            except Exception as error:  # noqa: BLE001 - keep pending, as slurmctld would
                waiting = f"Resources (node lookup failed: {error})"
            if waiting is None:
                break
            _update(job_id, reason=waiting)
            time.sleep(0.5)
        if (_load(job_id) or {}).get("state") == "CANCELLED":
            note(f"job {job_id} cancelled while PENDING")
            return 0
        nodelist = ",".join(f"127.0.0.{i + 1}" for i in range(job["nodes"]))
        _update(job_id, nodelist=nodelist)
        note(f"job {job_id} RUNNING on {nodelist} (loopback addresses standing for {job['nodes']} HyperPod node(s))")
        if job.get("fault") == "fail":
            note(f"fault slurm_job_fail: job {job_id} exits with code 1 without running its script")
            _update(job_id, state="FAILED", exit_code="1:0", end_time=time.time())
            return 0
        env = os.environ.copy()
        raw = job.get("raw_id") or job_id
        if job.get("array_job_id"):
            indexes = job.get("array_indexes") or [job["array_task_id"]]
            env.update({"SLURM_ARRAY_JOB_ID": job["array_job_id"], "SLURM_ARRAY_TASK_ID": str(job["array_task_id"]),
                        "SLURM_ARRAY_TASK_COUNT": str(len(indexes)), "SLURM_ARRAY_TASK_MIN": str(min(indexes)),
                        "SLURM_ARRAY_TASK_MAX": str(max(indexes))})
        env.update({
            "SLURM_JOB_ID": raw, "SLURM_JOBID": raw, "SLURM_JOB_NAME": job["name"],
            "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist, "SLURM_NNODES": str(job["nodes"]),
            "SLURM_JOB_NUM_NODES": str(job["nodes"]), "SLURM_JOB_PARTITION": job["partition"],
            "SLURM_SUBMIT_DIR": job["cwd"], "SLURMD_NODENAME": "127.0.0.1",
        })
        env.setdefault("RDZV_PORT", str(free_port()))
        process = subprocess.Popen(["bash", job["script"], *job.get("script_args", [])], cwd=job["cwd"], env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        _update(job_id, script_pid=process.pid)
        code = process.wait()
    if (_load(job_id) or {}).get("state") == "CANCELLED":
        return 0
    exit_code = f"{code}:0" if code >= 0 else f"0:{-code}"
    _update(job_id, state="COMPLETED" if code == 0 else "FAILED", exit_code=exit_code, end_time=time.time())
    return 0


def srun(argv: list[str]) -> int:
    opts, command = _options(argv)
    if not command:
        _die("srun: fatal: No command given to execute.")
    nodes = int(opts.get("nodes") or os.environ.get("SLURM_JOB_NUM_NODES") or 1)
    per_node = int(opts.get("ntasks-per-node") or 1)
    if opts.get("container-image"):
        _note(f"srun --container-image={opts['container-image']} ignored: the tasks run on this machine, not in enroot")
    tasks = nodes * per_node
    _note(f"srun {tasks} task(s) on {nodes} node(s): {' '.join(command)[:200]}")
    processes: list[subprocess.Popen] = []

    def forward(signum: int, frame: Any) -> None:  # scancel / kill-on-bad-exit reach every task's group
        del frame
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for rank in range(tasks):
        env = os.environ.copy()
        env.update({"SLURM_NODEID": str(rank // per_node), "SLURM_PROCID": str(rank),
                    "SLURM_LOCALID": str(rank % per_node), "SLURM_NTASKS": str(tasks),
                    "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NUM_NODES": str(nodes)})
        processes.append(subprocess.Popen(command, env=env, start_new_session=True))
    codes: dict[int, int] = {}
    first_bad = 0
    while len(codes) < len(processes):
        for i, process in enumerate(processes):
            if i not in codes and process.poll() is not None:
                codes[i] = process.returncode
                if process.returncode != 0 and not first_bad:
                    first_bad = process.returncode if process.returncode > 0 else 128 - process.returncode
                    if "kill-on-bad-exit" in opts:
                        for other in processes:
                            if other.poll() is None:
                                with contextlib.suppress(ProcessLookupError):
                                    os.killpg(other.pid, signal.SIGTERM)
        time.sleep(0.1)
    return first_bad


def squeue(argv: list[str]) -> int:
    names, states, fmt, header = None, None, "%i %T %j", True
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in ("-h", "--noheader"):
            header = False
        elif word in ("-n", "--name", "-t", "--states", "-o", "--format", "-j", "--jobs"):
            i += 1
            value = argv[i] if i < len(argv) else ""
            if word in ("-n", "--name"):
                names = set(value.split(","))
            elif word in ("-t", "--states"):
                states = set(value.upper().split(","))
            elif word in ("-o", "--format"):
                fmt = value
        i += 1
    states = states or set(ACTIVE)
    if header:
        print(_squeue_line(fmt, {"i": "JOBID", "T": "STATE", "j": "NAME", "F": "ARRAY_JOB_ID", "K": "ARRAY_TASK_ID"}))
    for job in _all_jobs():  # one line per array task: squeue's -r (--array) form
        if job["state"] in states and (names is None or job["name"] in names):
            print(_squeue_line(fmt, {"i": job["job_id"], "T": job["state"], "j": job["name"],
                                     "F": job.get("array_job_id") or job["job_id"],
                                     "K": str(job["array_task_id"]) if job.get("array_job_id") else "N/A"}))
    return 0


def _squeue_line(fmt: str, values: dict[str, str]) -> str:
    """``squeue -o`` fields: ``%i`` job id (``<array>_<index>`` for an array task), ``%T`` state, ``%j`` name,
    ``%F`` the array job id (a job's own id when not an array), ``%K`` the array index (``N/A``)."""
    return re.sub(r"%([iTjFK])", lambda m: values[m.group(1)], fmt)


def _job_arg(argv: list[str]) -> str | None:
    for i, word in enumerate(argv):
        if word in ("-j", "--jobs") and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--jobs="):
            return word.split("=", 1)[1]
    return None


def _state_text(job: dict[str, Any]) -> str:
    return "CANCELLED by 0" if job["state"] == "CANCELLED" else job["state"]


def _option_value(argv: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` (``-x v``, ``--long v`` or ``--long=v``) in ``argv``."""
    for i, word in enumerate(argv):
        if word in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _slurm_time(epoch: float | None) -> str:
    """A time as Slurm prints it (``YYYY-MM-DDTHH:MM:SS``, local time, no zone), ``Unknown`` when unset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(epoch))) if epoch else "Unknown"


def sacct(argv: list[str]) -> int:
    """``sacct -j id`` or ``sacct --name name[,name]`` (``-S``/``--starttime`` accepted, every recorded job
    counts) with ``-X -n -P -o <fields>`` (State, ExitCode, JobID, JobName, Start, End, NNodes): one line per
    job, oldest first. ``Start``/``End`` are local time, ``Unknown`` before the job starts / ends."""
    job_id = _job_arg(argv)
    names = _option_value(argv, "--name", "--jobname")
    if job_id:
        job = _load(job_id)
        jobs = [job] if job else [j for j in _all_jobs() if j.get("array_job_id") == job_id]  # an array: each task
    elif names:
        wanted = set(names.split(","))
        jobs = [j for j in _all_jobs() if j["name"] in wanted]
    else:
        _die("sacct: emulation needs -j <job id> or --name <job name>")
    fields = _option_value(argv, "-o", "--format") or "State,ExitCode"
    sep = "|" if "-P" in argv or "--parsable2" in argv else " "
    for job in jobs:
        values = {"state": _state_text(job), "exitcode": job["exit_code"], "jobid": job["job_id"],
                  "jobidraw": job.get("raw_id") or job["job_id"],
                  "jobname": job["name"], "start": _slurm_time(job.get("start_time")),
                  "end": _slurm_time(job.get("end_time")), "nnodes": str(job["nodes"])}
        print(sep.join(values.get(f.strip().lower(), "") for f in fields.split(",")))
    return 0


def scontrol(argv: list[str]) -> int:
    words = [w for w in argv if w not in ("-o", "--oneliner")]
    if words[:2] == ["show", "hostnames"]:
        nodelist = words[2] if len(words) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.write("".join(f"{host}\n" for host in _expand(nodelist)))
            sys.stdout.flush()
        return 0
    if words[:2] == ["show", "job"] and len(words) > 2:
        job = _load(words[2])
        if job is None:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        array = (f"ArrayJobId={job['array_job_id']} ArrayTaskId={job['array_task_id']} "
                 if job.get("array_job_id") else "")
        print(f"JobId={job.get('raw_id') or job['job_id']} {array}JobName={job['name']} JobState={job['state']} "
              f"Reason={job.get('reason', 'None')} "
              f"ExitCode={job['exit_code']} StartTime={_slurm_time(job.get('start_time'))} "
              f"EndTime={_slurm_time(job.get('end_time'))} "
              f"NumNodes={job['nodes']} NodeList={job.get('nodelist', '(null)')} "
              f"Partition={job['partition']} StdOut={job['output']}")
        return 0
    _die(f"scontrol: emulation knows only 'show hostnames' and 'show job', got {' '.join(argv)!r}")
    return 1


def _expand(nodelist: str) -> list[str]:
    """``a,b[1-3,5]`` → hostnames (the subset of Slurm's hostlist syntax the emulation produces)."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", nodelist):
        match = re.match(r"^(.*)\[(.*)\]$", part)
        if not match:
            hosts.append(part)
            continue
        for item in match.group(2).split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{match.group(1)}{n:0{width}d}")
    return hosts


def scancel(argv: list[str]) -> int:
    ids = [w for w in argv if re.match(r"^[0-9]+(_[0-9]+)?$", w)]
    if not ids:
        _die("scancel: error: No job identification provided")
    for given in ids:
        job = _load(given)
        jobs = [job] if job else [j for j in _all_jobs() if j.get("array_job_id") == given]  # an array: every task
        if not jobs:
            print(f"scancel: error: Kill job error on job id {given}: Invalid job id specified", file=sys.stderr)
            return 1
        for job in jobs:
            _cancel(job)
    return 0


def _cancel(job: dict[str, Any]) -> None:
    """CANCELLED (exit code ``0:15``) and the batch step's process group killed; an ended job is left alone."""
    job_id = job["job_id"]
    if job["state"] not in ACTIVE:
        return
    _update(job_id, state="CANCELLED", exit_code="0:15", end_time=time.time())
    if job.get("script_pid"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(job["script_pid"]), signal.SIGTERM)
    _note(f"scancel job {job_id}: CANCELLED")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        _die(f"usage: python -m sim2real.dev.sandbox.responders.slurm {{{','.join(COMMANDS)}}} ...", 2)
    command, rest = argv[0], argv[1:]
    if command == "_run":
        return _run(rest[0])
    handlers = {"sbatch": sbatch, "srun": srun, "squeue": squeue, "sacct": sacct, "scontrol": scontrol,
                "scancel": scancel}
    if command not in handlers:
        _die(f"unknown emulated Slurm command {command!r}", 2)
    return handlers[command](rest)


if __name__ == "__main__":
    sys.exit(main())
