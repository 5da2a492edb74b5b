"""Ctrl-C in ``bayes_lmer`` (issue 24, item 7): PyMC swallows ``KeyboardInterrupt`` chain by
chain (the next chain then starts) and returns the truncated trace.  scoremix interrupts the
whole run at once and never returns a truncated posterior as a normal result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pymc")

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, pandas as pd
    import pymc as pm
    import scoremix as sm
    real = pm.sample
    seen = []
    def first_draw(trace, draw):
        if not seen and draw.draw_idx > 300:  # past the warm-up: really sampling
            seen.append(1)
            print("SAMPLING", flush=True)
    def announce(*a, **k):
        return real(*a, callback=first_draw, **k)
    pm.sample = announce
    rng = np.random.default_rng(0)
    spk = np.repeat(np.arange(10), 10)
    df = pd.DataFrame({"score": rng.normal(size=100) + rng.normal(size=10)[spk], "spk": spk.astype(str)})
    try:
        res = sm.bayes_lmer("score ~ 1 + (1|spk)", df, draws=200000, tune=200, chains=2, cores=1,
                            progressbar=False, random_seed=1)
    except KeyboardInterrupt as exc:
        print("INTERRUPTED", exc, flush=True)
        sys.exit(130)
    print("RESULT", res.idata.posterior.sizes["chain"], res.idata.posterior.sizes["draw"], flush=True)
""")


def test_ctrl_c_interrupts_promptly_and_returns_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "SAMPLING", proc.stderr.read()[-2000:]
        time.sleep(1.0)  # inside the first chain's 200,000 draws
        os.kill(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "RESULT" not in out, out
    assert "INTERRUPTED" in out and proc.returncode == 130, (out, err[-2000:])
    assert waited < 20, f"took {waited:.1f} s to stop after SIGINT"


def test_truncated_posterior_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import arviz as az

    import scoremix as sm
    from scoremix.bayes import api

    real = api._sample

    def truncated(model, sampler, draws, tune, chains, *a, **k):
        idata = real(model, sampler, 20, 20, chains, *a, **k)
        return az.InferenceData(posterior=idata.posterior.isel(chain=[0], draw=slice(0, 7)),
                                sample_stats=idata.sample_stats.isel(chain=[0], draw=slice(0, 7)))

    monkeypatch.setattr(api, "_sample", truncated)
    rng = np.random.default_rng(0)
    spk = np.repeat(np.arange(10), 10)
    df = pd.DataFrame({"score": rng.normal(size=100) + rng.normal(size=10)[spk], "spk": spk.astype(str)})
    with pytest.raises(api.IncompleteSamplingError, match=r"1 of 2 chain\(s\) and 7 of 20 draw"):
        sm.bayes_lmer("score ~ 1 + (1|spk)", df, draws=20, tune=20, chains=2, cores=1, progressbar=False,
                      random_seed=1)
