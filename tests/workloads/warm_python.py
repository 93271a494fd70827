"""``python -m MODULE`` for the workload tests, without paying torch's import in every process.

Starting the trainer or the evaluator costs about 6 s of CPU before its first step (torch, its compiler stack that
``torch.optim`` imports on first use, skrl, gymnasium, MuJoCo), and a toy run itself well under a second: most of the
workload tests' time was those imports, once per process. :func:`run_module` instead asks one server process per
test process (this file, run as a script) that has imported those libraries once to ``fork()`` a child for each
run. The child is a process of its own, as with ``python -m``: its own environment (replaced, not merged), argv,
working directory, stdin from ``/dev/null``, stdout and stderr captured, and it ends as an interpreter ends (the
module's ``SystemExit`` code or 1 on an exception, non-daemon threads joined, ``atexit`` run, streams flushed), less
the seconds the interpreter spends freeing torch's modules at exit. Only
third-party libraries are preloaded, never ``sim2real``, so every run imports the code under test afresh under its own
environment; the preloaded ones read no setting the tests vary at import time. The server imports nothing that starts
a thread, so forking it is safe.

The answer is a :class:`subprocess.CompletedProcess` as :func:`subprocess.run` gives (``capture_output=True,
text=True``); a run past its timeout is killed and raises :class:`subprocess.TimeoutExpired`.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: Imported once by the server; each is what the trainer or the evaluator imports on its first step.
PRELOAD = ("numpy", "torch", "torch._dynamo", "torch.distributed", "torch.utils.tensorboard", "gymnasium",
           "gymnasium.envs.mujoco", "mujoco", "skrl.agents.torch.ppo", "skrl.memories.torch", "skrl.models.torch",
           "skrl.trainers.torch", "skrl.envs.wrappers.torch", "skrl.resources.preprocessors.torch", "mlflow")


def _serve() -> dict | None:
    """The server's loop: one JSON request a line on stdin, one JSON answer a line on stdout. Returns the request
    in a forked child (which then runs it); returns ``None`` in the server at the end of its input."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    assert threading.active_count() == 1, [t.name for t in threading.enumerate()]  # fork only a lone thread
    # the preloaded libraries' objects live as long as each run: its collector skips them (and so does not touch,
    # and copy, the pages it shares with this server)
    gc.collect()
    gc.freeze()
    answers = os.fdopen(os.dup(1), "w")
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            answers.close()
            return request
        print(json.dumps({"pid": pid}), file=answers, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=answers, flush=True)
    return None


def _become(request: dict) -> None:
    """In the forked child: take the request's environment, argv, working directory and streams."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(out, fd)
        os.close(out)
    served = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # as ``python -m`` with this environment: the working directory, then PYTHONPATH, then the interpreter's own
    wanted = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.getcwd(), *wanted, *(p for p in sys.path[1:] if p not in served)]
    sys.argv = ["-m", *request["args"][1:]]  # runpy puts the module's file first
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin, for its life


class _Server:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True)
            ready = self.proc.stdout.readline()
            if not ready:
                raise RuntimeError("the warm Python server ended before it was ready (see stderr)")
            atexit.register(self.close)
        return self.proc

    def close(self) -> None:
        """End the server (the end of its input) and wait for it: no process outlives the test process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def run(self, module: str, args: list[str], env: dict[str, str], cwd: str | None,
            timeout: float) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", module, *args]
        with self.lock, tempfile.TemporaryDirectory(prefix="warm-python-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            out.touch(), err.touch()
            proc = self._ensure()
            proc.stdin.write(json.dumps({"args": [module, *args], "env": env, "cwd": cwd or os.getcwd(),
                                         "stdout": str(out), "stderr": str(err)}) + "\n")
            proc.stdin.flush()
            pid = json.loads(proc.stdout.readline())["pid"]
            answer: list[str] = []
            reader = threading.Thread(target=lambda: answer.append(proc.stdout.readline()), daemon=True)
            reader.start()
            reader.join(timeout)
            if reader.is_alive():
                os.kill(pid, 9)
                reader.join()
                raise subprocess.TimeoutExpired(argv, timeout, output=out.read_text(errors="replace"),
                                                stderr=err.read_text(errors="replace"))
            returncode = json.loads(answer[0])["returncode"]
            return subprocess.CompletedProcess(argv, returncode, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))


_SERVER = _Server()


def run_module(module: str, *args: str, env: dict[str, str], cwd: str | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout)``, forked from a server that has the heavy libraries imported (see the module)."""
    return _SERVER.run(module, list(args), env, cwd, timeout)


def _run_and_exit(module: str) -> None:
    """Run ``module`` as ``__main__`` and end the process the way the interpreter ends one (``Py_FinalizeEx``): the
    exit code of its ``SystemExit`` (or 1 and the traceback on stderr for an exception), non-daemon threads joined,
    every ``atexit`` handler run (those the preloaded libraries registered too), the streams flushed. Then
    ``os._exit``: what is left is freeing the preloaded libraries' objects, seconds with torch loaded, nothing a
    run can observe."""
    import atexit
    import runpy

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined] - the interpreter's own first step at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    _request = _serve()
    if _request is None:  # the test process is done: nothing to flush, and freeing torch's modules takes seconds
        os._exit(0)
    _become(_request)
    _run_and_exit(_request["args"][0])
