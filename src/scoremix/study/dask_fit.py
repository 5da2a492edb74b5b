"""``scoremix study --dask ADDRESS`` on partitioned parquet data: each model fitted once over
the partitions, on the cluster.

When the study's ``[data] files`` are parquet files (e.g. the glob ``trials/*.parquet``) and
``--dask`` is given, every native Gaussian model is fitted with
:func:`scoremix.lmer` on a ``dask.dataframe`` of those files: the partitions are prepared
row by row as the in-memory load prepares the table
(:func:`scoremix.study.data.prepare_partition`), restricted to the model's system and
``filters``, and the cross-products are summed on the workers.  The fit equals the in-memory
fit up to the order of floating-point summation.  Models that cannot be fitted that way run as
ordinary study tasks, with a logged reason: Bayesian and non-native backends, transformation
models, simulated data, and data steps that act on the whole table (``sample_per_system``,
``standardize``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from scoremix.study.config import ModelConfig, StudyConfig
from scoremix.study.data import expand_data_files, prepare_partition, select_partition_rows
from scoremix.study.parallel import DaskUnavailableError, Task, TaskFailure

__all__ = ["dask_fit_reason", "model_dask_frame", "split_dask_fits", "run_dask_fits"]

PARQUET_SUFFIXES = (".parquet", ".pq")


def dask_fit_reason(cfg: StudyConfig, model: ModelConfig) -> str | None:
    """``None`` when ``model`` can be fitted over the partitions of the study's data, else why not."""
    d = cfg.data
    if d.simulate is not None:
        return "the study's data are simulated, not partitioned files"
    files = expand_data_files(d.files)
    if not files or not all(str(p).lower().endswith(PARQUET_SUFFIXES) for p in files):
        return "[data] files are not all parquet files"
    if d.sample_per_system:
        return "[data] sample_per_system samples the whole table"
    if d.standardize:
        return "[data] standardize uses whole-table means and SDs"
    if model.auto:  # s5trust-auto
        return "auto = true (score_model needs the rows)"
    if model.backend != "native":
        return f"backend {model.backend!r} (only the native engine sums cross-products over partitions)"
    if model.transform:
        return f"transform = {model.transform!r} (transformation models need the rows)"
    return None


def model_dask_frame(cfg: StudyConfig, model: ModelConfig, system: str) -> Any:
    """The rows ``model`` is fitted to on ``system``, as a lazy ``dask.dataframe``."""
    import dask.dataframe as dd

    files = [str(p) for p in expand_data_files(cfg.data.files)]
    raw = dd.read_parquet(files)
    meta = prepare_partition(raw._meta, cfg.data)
    ddf = raw.map_partitions(prepare_partition, cfg.data, meta=meta)
    sys_col = cfg.data.system if model.per_system else None
    return ddf.map_partitions(select_partition_rows, sys_col, system, dict(model.filters), meta=meta)


def split_dask_fits(cfg: StudyConfig, tasks: Sequence[Task], log: Callable[[str], None]
                    ) -> tuple[list[int], list[int]]:
    """Positions of the model tasks to fit over partitions and of all other tasks; logs why a
    model task stays an ordinary task."""
    by_name = {m.name: m for m in cfg.models}
    on_dask, rest = [], []
    for i, t in enumerate(tasks):
        if t.fn.__name__ == "model_task":
            model = t.args[0]
            why = dask_fit_reason(cfg, by_name.get(model.name, model))
            if why is None:
                on_dask.append(i)
                continue
            log(f"[scoremix study] {t.key}: fitted as a task in memory, not over partitions ({why})")
        rest.append(i)
    return on_dask, rest


def run_dask_fits(cfg: StudyConfig, tasks: Sequence[Task], address: str, progress: bool = True,
                  log: Callable[[str], None] | None = None) -> list[Any]:
    """Run the model tasks ``tasks`` with their fit over the partitions, connected to ``address``
    (``"local"``: a ``LocalCluster`` of threads in this process).  Returns their results in order
    (a :class:`~scoremix.study.parallel.TaskFailure` for a task that raised); each fit's notes
    (analyses left out because they need the rows) go to ``log``."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise DaskUnavailableError('--dask needs dask.distributed: pip install "dask[distributed]"') from exc
    from tqdm.auto import tqdm

    from scoremix.study import tasks as T

    cluster = LocalCluster(processes=False, dashboard_address=None) if address == "local" else None
    client = Client(cluster if cluster is not None else address)
    out = []
    try:
        for t in tqdm(tasks, desc="models over partitions (dask)", disable=not progress):
            model, system = t.args[0], t.args[1]
            try:
                r = T.model_task(*t.args, fit_data=model_dask_frame(cfg, model, system))
            except Exception as exc:  # noqa: BLE001 - reported by name like any failed task
                r = TaskFailure(t.key, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            for note in (r.get("notes", []) if isinstance(r, dict) else []):
                if log is not None:
                    log(f"[scoremix study] {t.key}: {note}")
            out.append(r)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return out
