"""Run many independent study tasks locally (joblib) or on a Dask cluster.

A :class:`Task` is a top-level function plus arguments and a key.  Every random task gets its
seed from :func:`task_seed` (the study seed and the task key), never from the order in which
tasks finish, so ``run_tasks`` returns identical results serially, with ``jobs=N`` and on Dask.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Task", "TaskFailure", "WorkerDiedError", "task_seed", "boot_chunks", "chunk_seeds", "run_tasks", "DaskUnavailableError",
           "dask_available", "stop_workers", "child_processes"]


class WorkerDiedError(RuntimeError):
    """A worker process ended without returning (killed by a signal, e.g. the kernel's
    out-of-memory killer); one line naming the signal replaces joblib's traceback."""


def _worker_died(exc: BaseException) -> WorkerDiedError:
    import re

    m = re.search(r"\{([^}]*)\}", str(exc))  # loky: "The exit codes of the workers are {SIGKILL(-9)}"
    codes = m.group(1) if m else "unknown"
    name = re.match(r"\s*(SIG\w+)", codes)
    hint = (" (SIGKILL: usually the out-of-memory killer)" if name and name.group(1) == "SIGKILL" else "")
    sig = name.group(1) if name else codes
    return WorkerDiedError(f"a worker process died during the study (exit: {sig}){hint}; nothing was written: run "
                           "again with fewer --jobs or on a machine with more memory")


class DaskUnavailableError(ImportError):
    """``--dask`` was asked for but ``dask.distributed`` is not installed."""


@dataclass
class Task:
    """One independent unit of work: ``fn(*args, **kwargs)`` identified by ``key``."""

    key: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


@dataclass
class TaskFailure:
    """What a task that raised returns under ``run_tasks(..., capture_errors=True)``: its key and
    the exception as one line (``"KeyError: 'x'"``), so that the other tasks still finish and
    the caller reports every failure by name."""

    key: str
    error: str


def task_seed(study_seed: int, key: str) -> int:
    """A 31-bit seed from the study seed and a task key (``SeedSequence([seed, crc32(key)])``)."""
    ss = np.random.SeedSequence([int(study_seed), zlib.crc32(key.encode("utf-8"))])
    return int(ss.generate_state(1)[0] % (2**31 - 1))


def boot_chunks(n_boot: int, chunk: int) -> list[int]:
    """Split ``n_boot`` bootstrap replicates into chunks of at most ``chunk`` (0: one chunk).

    ``k = ceil(n_boot / chunk)`` chunks of ``chunk`` replicates, the last one holding the rest;
    ``[]`` when ``n_boot = 0``.

    Examples
    --------
    >>> boot_chunks(1000, 250), boot_chunks(600, 250), boot_chunks(200, 250), boot_chunks(7, 0)
    ([250, 250, 250, 250], [250, 250, 100], [200], [7])
    """
    if n_boot < 0 or chunk < 0:
        raise ValueError(f"n_boot and chunk must be >= 0, got {n_boot} and {chunk}")
    if n_boot == 0:
        return []
    if chunk == 0 or chunk >= n_boot:
        return [int(n_boot)]
    k, rest = divmod(int(n_boot), int(chunk))
    return [int(chunk)] * k + ([rest] if rest else [])


def chunk_seeds(study_seed: int, key: str, n_chunks: int) -> list[int]:
    """Seeds of the ``n_chunks`` bootstrap chunks of task ``key``.

    One chunk gets the task's own seed (:func:`task_seed`), so an unsplit bootstrap is the
    same as before chunking existed; with ``k > 1`` chunks, chunk ``j`` gets the first 32-bit
    word of child ``j`` of ``SeedSequence([study_seed, crc32(key)]).spawn(k)``.  A chunk's
    seed therefore depends on (study seed, task key, chunk index) only, never on where or when
    it runs; changing the chunk size changes the chunks and hence the replicates.
    """
    if n_chunks < 1:
        raise ValueError(f"n_chunks must be >= 1, got {n_chunks}")
    if n_chunks == 1:
        return [task_seed(study_seed, key)]
    root = np.random.SeedSequence([int(study_seed), zlib.crc32(key.encode("utf-8"))])
    return [int(child.generate_state(1)[0]) for child in root.spawn(n_chunks)]


def dask_available() -> bool:
    """Whether ``dask.distributed`` can be imported."""
    try:
        import dask.distributed  # noqa: F401 - availability check
    except ImportError:
        return False
    return True


def _call(task: Task) -> Any:
    return task()


def _call_captured(task: Task) -> Any:
    """``task()``, with an ``Exception`` turned into a :class:`TaskFailure` (interrupts and
    other ``BaseException`` still propagate)."""
    try:
        return task()
    except Exception as exc:  # noqa: BLE001 - reported by name by the caller
        msg = " ".join((str(exc) or "").split())
        return TaskFailure(task.key, f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__)


def child_processes(pid: int | None = None) -> list[int]:
    """Process ids of every descendant of ``pid`` (default: this process), read from ``/proc``
    (Linux); empty where ``/proc`` is missing."""
    import os

    root = os.getpid() if pid is None else int(pid)
    parent: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            parent[int(d.name)] = int(fields[1])
    out, frontier = [], [root]
    while frontier:
        nxt = [c for c, pp in parent.items() if pp in frontier]
        out.extend(nxt)
        frontier = nxt
    return out


def _is_resource_tracker(pid: int) -> bool:
    try:
        return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _call_quietly(call: Callable[[Task], Any], ignore: tuple[type[Warning], ...], task: Task) -> Any:
    """``call(task)`` with the warning categories ``ignore`` silenced (in the worker)."""
    import warnings

    with warnings.catch_warnings():
        for category in ignore:
            warnings.simplefilter("ignore", category)
        return call(task)


@dataclass
class _Recorded:
    """A task's result with the warnings it raised (recorded where it ran, named by its key)."""

    value: Any
    warnings: list


def _call_recording(call: Callable[[Task], Any], task: Task) -> _Recorded:
    """``call(task)`` with its warnings recorded (not printed) as
    :class:`~scoremix.study.warnlog.StudyWarning` named after the task, so that a worker's
    warnings reach the main process and are printed there once."""
    from scoremix.study.warnlog import recording, where_of_task

    rec: list = []
    with recording(where_of_task(task.key), rec):
        value = call(task)
    return _Recorded(value, rec)


def stop_workers(grace: float = 1.0, keep: set[int] | frozenset[int] = frozenset()) -> None:
    """Stop the worker processes this process started (joblib/loky workers and their resource
    tracker, Dask nannies and workers): SIGTERM to every descendant not in ``keep`` (those that
    existed before the tasks started), then SIGKILL after ``grace`` seconds.

    loky keeps its workers alive between calls (a reusable executor) and a resource-tracker
    process beside them; after an interrupt they would outlive the study and hold its
    stdout/stderr pipes open.  The resource tracker is left alone: it exits by itself once this
    process and the workers are gone (killing it makes loky relaunch it and print warnings).
    Safe to call when none were started."""
    import os
    import signal
    import time

    kids = [pid for pid in child_processes() if pid not in keep and not _is_resource_tracker(pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in kids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 0.5)
        while time.monotonic() < deadline:
            for pid in kids:  # reap the ones that are our own children
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            kids = [pid for pid in kids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
            if not kids:
                return
            time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].split()[:1] == ["Z"]


def _run_dask(tasks: Sequence[Task], address: str, jobs: int, progress: bool,
              call: Callable[[Task], Any] = _call) -> list[Any]:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise DaskUnavailableError('--dask needs dask.distributed: pip install "dask[distributed]"') from exc
    from tqdm.auto import tqdm

    before = set(child_processes())
    cluster = None
    if address == "local":
        cluster = LocalCluster(n_workers=max(1, jobs), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        client = Client(address)
    interrupted = False
    try:
        futures = [client.submit(call, t, key=f"scoremix-{i}-{t.key}", pure=False) for i, t in enumerate(tasks)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(tasks)
        with tqdm(total=len(tasks), desc="study tasks (dask)", disable=not progress) as bar:
            for fut in as_completed(futures):
                results[index[fut.key]] = fut.result()
                bar.update(1)
        return results
    except BaseException as exc:
        interrupted = not isinstance(exc, Exception)
        raise
    finally:
        if interrupted:
            # stopping: kill the LocalCluster's processes first, so that closing cannot wait on
            # them (and silence distributed's warnings about the workers it then finds dead)
            import logging

            logging.getLogger("distributed").setLevel(logging.CRITICAL)
            stop_workers(keep=before)
        client.close(timeout=5 if interrupted else None)
        if cluster is not None:
            cluster.close(timeout=5 if interrupted else None)


def run_tasks(tasks: Sequence[Task], jobs: int = 1, dask: str | None = None, progress: bool = True,
              desc: str = "study tasks", capture_errors: bool = False,
              ignore_warnings: tuple[type[Warning], ...] = (), warnings_into: list | None = None) -> list[Any]:
    """Run ``tasks`` and return their results in the order given.

    An interrupt (``KeyboardInterrupt``, or the command line's SIGTERM handler) stops the
    workers (:func:`stop_workers`; a Dask cluster is closed) before it propagates.

    Parameters
    ----------
    tasks:
        independent tasks (their functions must be importable top-level functions when run in
        other processes).
    jobs:
        local worker processes (joblib ``loky``); 1 runs in this process.  With ``dask="local"``
        the number of ``LocalCluster`` workers.
    dask:
        ``None`` (local), ``"local"`` (start a ``dask.distributed.LocalCluster``) or a scheduler
        address such as ``"tcp://10.0.0.5:8786"``.
    progress:
        show a tqdm bar of finished tasks.
    capture_errors:
        return a :class:`TaskFailure` for a task that raises instead of stopping at it.
    ignore_warnings:
        warning categories silenced while the tasks run (in every worker).
    warnings_into:
        a list: every other warning a task raises (wherever it runs) is recorded into it as a
        :class:`~scoremix.study.warnlog.StudyWarning` named after the task's key, instead of
        being printed by the worker (:mod:`scoremix.study.warnlog` prints them once).
    """
    if not tasks:
        return []
    from functools import partial

    call = _call_captured if capture_errors else _call
    if ignore_warnings:
        call = partial(_call_quietly, call, tuple(ignore_warnings))
    if warnings_into is None:
        return _dispatch(tasks, call, jobs, dask, progress, desc)
    results = _dispatch(tasks, partial(_call_recording, call), jobs, dask, progress, desc)
    for r in results:
        warnings_into.extend(r.warnings)
    return [r.value for r in results]


def _dispatch(tasks: Sequence[Task], call: Callable[[Task], Any], jobs: int, dask: str | None, progress: bool,
              desc: str) -> list[Any]:
    if dask:
        return _run_dask(tasks, dask, jobs, progress, call)
    from tqdm.auto import tqdm

    if jobs <= 1:
        return [call(t) for t in tqdm(tasks, desc=desc, disable=not progress)]
    from joblib import Parallel, delayed

    before = set(child_processes())
    par = Parallel(n_jobs=jobs, return_as="generator")
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    try:
        gen = par(delayed(call)(t) for t in tasks)
        return list(tqdm(gen, total=len(tasks), desc=desc, disable=not progress))
    except TerminatedWorkerError as exc:
        stop_workers(keep=before)
        raise _worker_died(exc) from None
    except BaseException as exc:
        if not isinstance(exc, Exception):  # interrupted: loky would keep its workers alive
            stop_workers(keep=before)
        raise
