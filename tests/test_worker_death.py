"""A worker process killed mid-study (the kernel's OOM killer, ``kill -9``) ends in one clear
line naming the signal, not joblib's 40-line ``TerminatedWorkerError`` traceback (issue 24)."""

from __future__ import annotations

import os
import signal

import pytest

from scoremix.study.parallel import Task, WorkerDiedError, run_tasks


def _die_in_worker(parent: int) -> int:
    if os.getpid() != parent:  # only in a worker process
        os.kill(os.getpid(), signal.SIGKILL)
    return 1


def test_killed_worker_is_one_named_error() -> None:
    tasks = [Task(f"t{i}", _die_in_worker, (os.getpid(),)) for i in range(4)]
    with pytest.raises(WorkerDiedError) as e:
        run_tasks(tasks, jobs=2, progress=False, capture_errors=True)
    msg = str(e.value)
    assert "\n" not in msg and "SIGKILL" in msg and "--jobs" in msg
    assert len(msg) < 400


def test_cli_prints_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    import scoremix.study as study
    from scoremix.cli import main

    (tmp_path / "s.toml").write_text('[study]\nname = "w"\n[data]\n[data.simulate]\nkind = "cm"\nn_trials = 300\n',
                                     encoding="utf-8")

    def boom(*a, **k):
        raise WorkerDiedError("a worker process died (signal SIGKILL); run again with fewer --jobs")

    monkeypatch.setattr(study, "run_study", boom)
    rc = main(["study", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip().count("\n") == 0 and "SIGKILL" in err and "Traceback" not in err
