"""scoremix chooses the BLAS threads of its hot paths (threadpoolctl, scoped, restored afterwards),
so a fit's result does not depend on the threads a user's environment sets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

import scoremix as sm
from scoremix import _threads
from scoremix.lme import native


def _blas_threads() -> set[int]:
    return {c.num_threads for c in ThreadpoolController().lib_controllers if c.user_api == "blas"}


@pytest.fixture
def data():
    r = np.random.default_rng(4)
    spk = np.repeat(np.arange(40), 25)
    y = np.tile([0, 1], 500)
    score = 1.3 * y + r.normal(0, 0.6, 40)[spk] + r.normal(0, 1, spk.size)
    return pd.DataFrame({"score": score, "label": np.where(y == 1, "target", "nontarget"), "speaker": spk.astype(str)})


@pytest.fixture(autouse=True)
def _reset(monkeypatch):
    monkeypatch.delenv(_threads.ENV_VAR, raising=False)
    _threads._STATE["n"] = _threads._UNSET
    yield
    _threads._STATE["n"] = _threads._UNSET


def test_hot_path_runs_with_chosen_threads_and_restores_the_callers(data, monkeypatch):
    if not _blas_threads():
        pytest.skip("no BLAS library visible to threadpoolctl")
    seen = []
    real = native.fit_native

    def spy(*a, **k):
        seen.append(_blas_threads())
        return real(*a, **k)

    monkeypatch.setattr(native, "fit_native", spy)
    with threadpool_limits(limits=2, user_api="blas"):
        fit = sm.lmer("score ~ label + (1 | speaker)", data)
        assert _blas_threads() == {2}  # restored after the fit
    assert seen == [{1}] and np.isfinite(fit.loglik)


def test_results_do_not_depend_on_the_callers_threads(data):
    fits = []
    for outer in (1, 2):
        with threadpool_limits(limits=outer, user_api="blas"):
            fits.append(sm.lmer("score ~ label + (1 | speaker)", data))
    a, b = fits
    assert a.loglik == b.loglik
    np.testing.assert_array_equal(a.fixef.to_numpy(), b.fixef.to_numpy())


def test_override_by_function_and_environment(monkeypatch):
    assert sm.get_threads() == 1
    monkeypatch.setenv(_threads.ENV_VAR, "3")
    assert sm.get_threads() == 3
    monkeypatch.setenv(_threads.ENV_VAR, "off")
    assert sm.get_threads() is None
    monkeypatch.setenv(_threads.ENV_VAR, "many")
    with pytest.raises(ValueError, match="SCOREMIX_BLAS_THREADS"):
        sm.get_threads()
    sm.set_threads(2)  # the function wins over the environment
    assert sm.get_threads() == 2
    sm.set_threads(None)
    assert sm.get_threads() is None
    with pytest.raises(ValueError, match="positive integer"):
        sm.set_threads(0)


def test_none_leaves_the_blas_alone(data, monkeypatch):
    if not _blas_threads():
        pytest.skip("no BLAS library visible to threadpoolctl")
    seen = []
    real = native.fit_native
    monkeypatch.setattr(native, "fit_native", lambda *a, **k: (seen.append(_blas_threads()), real(*a, **k))[1])
    sm.set_threads(None)
    with threadpool_limits(limits=2, user_api="blas"):
        sm.lmer("score ~ label + (1 | speaker)", data)
    assert seen == [{2}]
