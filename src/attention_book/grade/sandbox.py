"""Where a submission's code runs: forked processes, each with limits, none of them the grader
(for every chapter's student notebook).

A grading worker imports torch and the exercise registry once, never runs a student's code, and
forks for every submission:

* a **student process** runs the notebook's cells (:func:`run_cells`) in a fresh IPython shell,
  in an empty working folder, with a deadline, a memory limit, a file-size limit and its output
  thrown away, then writes each answer it defined with cloudpickle (by value: the functions and
  classes the notebook defined travel with their code, modules by name);
* a **check process** per exercise, forked from the untouched worker, loads that answer and
  judges it with :func:`attention_book.exercises.evaluate` (:func:`run_check`).

So what the notebook's cells did to ``check``, to ``attention_book.exercises`` or to torch stays in
the student process: the checks run in processes where those cells never ran. Each process is
the leader of its own process group, killed whole when it runs past its time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A check or a notebook that overruns its time by this much is killed from outside (the deadline
# inside the process, a Python signal, cannot stop C code or an `except BaseException:`).
GRACE_SECONDS = 5.0
# What one answer may weigh once pickled: an answer is code and a few small tensors.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
# What a check process reports back at most (a one-line hint).
MAX_REPORT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one notebook may use: seconds for its cells (and again for each check), memory above
    what the grader itself holds, and the size of any one file it writes."""

    timeout: float = 120.0
    memory_bytes: int = 4 * 2**30
    file_bytes: int = 256 * 2**20


class Deadline(BaseException):
    """Raised inside a student or check process when its time is up (not an ``Exception``, so the
    checker's own ``except Exception`` around the answer does not take it for a crash)."""


@dataclass
class StudentRun:
    """What the student process left: the answers it pickled and what went wrong on the way."""

    answers: dict[str, Path] = field(default_factory=dict)  # exercise id -> pickled answer
    missing: dict[str, str] = field(default_factory=dict)  # exercise id -> why there is no answer
    cell_errors: list[str] = field(default_factory=list)  # "cell 12 (`def f(`): NameError: ..."
    stopped: str | None = None  # the notebook stopped early: why (killed, exited, out of time)
    timed_out: bool = False


def _memory_in_use() -> int | None:
    """This process's virtual memory in bytes (Linux), or None where /proc cannot tell."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _confine(limits: Limits, folder: Path) -> None:
    """In a freshly forked child: its own process group, limits, an empty folder, no terminal."""
    os.setsid()
    in_use = _memory_in_use()
    if in_use is not None:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (in_use + limits.memory_bytes, in_use + limits.memory_bytes))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file too large: an OSError, not a killed process
    os.chdir(folder)
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(null, descriptor)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr = _Discard()
    os.environ["MPLBACKEND"] = "Agg"


class _Discard(io.TextIOBase):
    """Where a confined process prints: nothing is kept, so megabytes of output cost nothing."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


def _arm(seconds: float) -> None:
    def expire(signum, frame):
        raise Deadline()

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _fork(child, *args) -> int:
    """Fork; the child runs ``child(*args)`` and always ends with ``os._exit``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, whose coverage is not collected
        code = 0
        try:
            child(*args)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, seconds: float) -> tuple[str, int]:
    """Wait for ``pid`` at most ``seconds``: ("exited", code), ("signal", number) or ("killed", 0)
    after killing its process group when it ran past its time."""
    deadline = time.monotonic() + seconds
    pause = 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # whatever it started goes with it
            if os.WIFSIGNALED(status):
                return "signal", os.WTERMSIG(status)
            return "exited", os.WEXITSTATUS(status)
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "killed", 0
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()[:60]
    return source.strip().splitlines()[0][:60] if source.strip() else ""


def describe_cell(number: int, source: str) -> str:
    """How a report names a cell: its position in the notebook (counted from 1) and first line."""
    if number < 0:
        return "the notebook's import lines"
    return f"cell {number + 1} (`{_first_line(source)}`)"


def _shell():
    """A fresh IPython shell (magics work as in Jupyter) that keeps no history on disk."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    return InteractiveShell(config=config)


def _student_child(cells, exercises, names, limits: Limits, folder: Path, report: Path) -> None:
    _confine(limits, folder)
    shell = _shell()
    progress = report.with_suffix(".cell")
    errors: list[str] = []
    stopped = None
    _arm(limits.timeout)
    try:
        for number, source in cells:
            progress.write_text(describe_cell(number, source))
            result = shell.run_cell(source, store_history=False, silent=True)
            if isinstance(result.error_in_exec, Deadline) or isinstance(result.error_before_exec, Deadline):
                raise Deadline()
            error = result.error_before_exec or result.error_in_exec
            if error is not None:
                errors.append(f"{describe_cell(number, source)} raised {type(error).__name__}: {error}"[:300])
    except Deadline:
        stopped = progress.read_text()
    finally:
        _disarm()
    answers, missing = _pickle_answers(shell.user_ns, exercises, names, folder=report.parent)
    text = json.dumps({"errors": errors, "timeout_in": stopped, "answers": answers, "missing": missing})
    report.write_text(text)


def _pickle_answers(namespace: dict, exercises, names, folder: Path) -> tuple[dict, dict]:
    import cloudpickle

    answers: dict[str, str] = {}
    missing: dict[str, str] = {}
    for exercise_id in exercises:
        absent = [name for name in names[exercise_id] if name not in namespace]
        if absent:
            missing[exercise_id] = "undefined:" + ",".join(absent)
            continue
        values = [namespace[name] for name in names[exercise_id]]
        value = values[0] if len(values) == 1 else tuple(values)
        try:
            data = cloudpickle.dumps(value)
        except BaseException as error:
            missing[exercise_id] = f"unpicklable:{type(error).__name__}: {error}"[:300]
            continue
        if len(data) > MAX_ANSWER_BYTES:
            missing[exercise_id] = f"too large:{len(data) / 2**20:.0f} MB"
            continue
        path = folder / f"answer-{exercise_id}.pickle"
        path.write_bytes(data)
        answers[exercise_id] = path.name
    return answers, missing


def run_cells(cells, exercises, names, limits: Limits, folder: Path) -> StudentRun:
    """Run a notebook's cells in a student process; ``names[exercise]`` are the answer's names.

    ``folder`` is private to this submission: the process works in ``folder/work`` and leaves its
    answers in ``folder``.
    """
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    report = folder / "student.json"
    pid = _fork(_student_child, cells, exercises, names, limits, work, report)
    how, code = _wait(pid, limits.timeout + GRACE_SECONDS)
    cell_file = report.with_suffix(".cell")
    at = cell_file.read_text() if cell_file.exists() else "its first cell"
    if how == "killed":
        return StudentRun(stopped=f"the notebook did not finish in {limits.timeout:g} s ({at} was still running)",
                          timed_out=True)  # fmt: skip
    if not report.exists():
        cause = f"signal {code}" if how == "signal" else f"exit status {code}"
        return StudentRun(stopped=f"the notebook's process ended in {at} ({cause}) before the grader could read "
                          "its answers: remove any os._exit, os.kill or sys.exit there, or it ran out of memory")  # fmt: skip
    return _read_student_report(report, folder, limits)


def _read_student_report(report: Path, folder: Path, limits: Limits) -> StudentRun:
    try:
        data = json.loads(report.read_text())
        answers = {str(key): folder / Path(str(value)).name for key, value in dict(data["answers"]).items()}
        run = StudentRun(answers=answers, missing={str(k): str(v) for k, v in dict(data["missing"]).items()})
        run.cell_errors = [str(error) for error in list(data["errors"])]
        if data["timeout_in"]:
            run.stopped = (
                f"the notebook did not finish in {limits.timeout:g} s ({data['timeout_in']} was still running)"
            )
            run.timed_out = True
    except (ValueError, KeyError, TypeError, OSError) as error:
        return StudentRun(stopped=f"the notebook's process left an unreadable report ({error})")
    return run


def autograd_problem() -> str | None:
    """Why autograd cannot run in this process, or None. PyTorch refuses a backward pass in a process
    forked from one whose autograd engine had started its device threads (a backward pass run on a
    machine with CUDA): a check forked from such a grader would blame the student's answer for it."""
    import torch

    try:
        leaf = torch.ones(1, requires_grad=True)
        (2 * leaf).sum().backward()
    except RuntimeError as error:
        return str(error).strip().splitlines()[0]
    return None


GRADER_FORK_HINT = (
    "the grader could not run autograd in its check process ({problem}); the process that called "
    "grade_file had run a backward pass on a machine with CUDA before forking. This is the grader's fault, "
    "not the answer's: grade with `python -m attention_book.grade`, which starts clean processes"
)


def _check_child(exercise_id: str, answer: Path, limits: Limits, folder: Path, report: Path) -> None:
    _confine(limits, folder)
    import cloudpickle  # noqa: F401 - registers what pickle needs to rebuild answers pickled by value

    from ..exercises import evaluate

    problem = autograd_problem()
    if problem is not None:
        report.write_text(json.dumps({"status": "error", "hint": GRADER_FORK_HINT.format(problem=problem)}))
        return
    _arm(limits.timeout)
    try:
        try:
            import pickle

            value: Any = pickle.loads(answer.read_bytes())
        except Exception as error:
            outcome = {
                "status": "error",
                "hint": f"the grader could not load this answer ({type(error).__name__}: {error})",
            }
        else:
            result = evaluate(exercise_id, value)
            outcome = {"status": result.status, "hint": result.hint}
    except Deadline:
        outcome = {
            "status": "timeout",
            "hint": f"the check did not finish in {limits.timeout:g} s: does your code loop forever?",
        }
    finally:
        _disarm()
    report.write_text(json.dumps(outcome)[:MAX_REPORT_BYTES])


def run_check(exercise_id: str, answer: Path, limits: Limits, folder: Path) -> tuple[str, str]:
    """(status, hint) of one exercise, judged in a check process of its own."""
    report = folder / f"check-{exercise_id}.json"
    pid = _fork(_check_child, exercise_id, answer, limits, folder / "work", report)
    how, code = _wait(pid, limits.timeout + GRACE_SECONDS)
    if how == "killed":
        return "timeout", f"the check did not finish in {limits.timeout:g} s: does your code loop forever?"
    try:
        outcome = json.loads(report.read_text())
        return str(outcome["status"]), str(outcome["hint"])
    except (OSError, ValueError, KeyError, TypeError):
        cause = f"signal {code}" if how == "signal" else f"exit status {code}"
        return (
            "error",
            f"the check's process ended ({cause}) while running your code: does it exit or run out of memory?",
        )
