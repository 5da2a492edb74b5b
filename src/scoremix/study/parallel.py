"""Run many independent study tasks locally (joblib) or on a Dask cluster.

A :class:`Task` is a top-level function plus arguments and a key.  Every random task gets its
seed from :func:`task_seed` (the study seed and the task key), never from the order in which
tasks finish, so ``run_tasks`` returns identical results serially, with ``jobs=N`` and on Dask.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Task", "task_seed", "boot_chunks", "chunk_seeds", "run_tasks", "DaskUnavailableError", "dask_available"]


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


def _run_dask(tasks: Sequence[Task], address: str, jobs: int, progress: bool) -> list[Any]:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise DaskUnavailableError('--dask needs dask.distributed: pip install "dask[distributed]"') from exc
    from tqdm.auto import tqdm

    cluster = None
    if address == "local":
        cluster = LocalCluster(n_workers=max(1, jobs), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        client = Client(address)
    try:
        futures = [client.submit(_call, t, key=f"scoremix-{i}-{t.key}", pure=False) for i, t in enumerate(tasks)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(tasks)
        with tqdm(total=len(tasks), desc="study tasks (dask)", disable=not progress) as bar:
            for fut in as_completed(futures):
                results[index[fut.key]] = fut.result()
                bar.update(1)
        return results
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_tasks(tasks: Sequence[Task], jobs: int = 1, dask: str | None = None, progress: bool = True,
              desc: str = "study tasks") -> list[Any]:
    """Run ``tasks`` and return their results in the order given.

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
    """
    if not tasks:
        return []
    if dask:
        return _run_dask(tasks, dask, jobs, progress)
    from tqdm.auto import tqdm

    if jobs <= 1:
        out = []
        for t in tqdm(tasks, desc=desc, disable=not progress):
            out.append(t())
        return out
    from joblib import Parallel, delayed

    par = Parallel(n_jobs=jobs, return_as="generator")
    gen = par(delayed(_call)(t) for t in tasks)
    return list(tqdm(gen, total=len(tasks), desc=desc, disable=not progress))
