"""The supernodal sparse Cholesky of the rest block (scoremix.lme.sparse_chol).

Checked against numpy/scipy dense linear algebra on random symmetric positive-definite
matrices with the patterns of crossed random-effect designs (log-determinant, triangular
solves and the selected inverse to 1e-10), against the dense blocked factor on whole models
(criterion, gradient, estimates), and without numba (the dense path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

from scoremix.lme import sparse_chol
from scoremix.lme.conditional import estimates_at
from scoremix.lme.crossprod import crossproducts
from scoremix.lme.deviance import profiled_deviance, profiled_deviance_grad
from scoremix.lme.factor import factorize, rest_symbolic
from scoremix.lme.model_frame import build_model_spec
from scoremix.lme.relcov import theta_to_T

pytestmark = pytest.mark.skipif(not sparse_chol.AVAILABLE, reason="numba is not installed")

ROOT = Path(__file__).resolve().parents[1]


def _crossed_pattern(rng, n_a: int, n_b: int, per_a: int, pb: int = 1):
    """Pattern of ``Z_b' Z_a Z_a' Z_b`` (+ ``Z_b'Z_b``) for a random crossed design: ``n_a``
    levels of a, each linked to ``per_a`` random levels of b (``pb`` columns per b level)."""
    rows, cols = [], []
    for a in range(n_a):
        bs = rng.choice(n_b, size=per_a, replace=False)
        rows.append(np.full(per_a, a))
        cols.append(bs)
    inc = sp.csr_matrix((np.ones(n_a * per_a), (np.concatenate(rows), np.concatenate(cols))),
                        shape=(n_a, n_b))
    G = (inc.T @ inc) + sp.identity(n_b)
    G = sp.kron(G, np.ones((pb, pb)), format="csr")
    return (G != 0).astype(float).tocsr()


def _spd_with_pattern(rng, pattern, n_dense: int) -> np.ndarray:
    """A random SPD ``m × m`` matrix (``m = q + n_dense``) whose ``q × q`` block has the
    given pattern and whose last ``n_dense`` rows are dense."""
    q = pattern.shape[0]
    m = q + n_dense
    B = pattern.toarray() * rng.standard_normal((q, q))
    B = np.tril(B, -1)
    S = np.zeros((m, m))
    S[:q, :q] = B + B.T
    S[:q, :q] += np.diag(np.abs(S[:q, :q]).sum(axis=1) + 1.0 + rng.uniform(0, 1, q))
    X = rng.standard_normal((n_dense, m)) * 0.1
    S[q:, :] = X
    S[:, q:] = X.T
    S[q:, q:] = X[:, q:] @ X[:, q:].T + m * np.eye(n_dense)
    return S


@pytest.mark.parametrize("seed,n_a,n_b,per_a,pb,n_dense", [
    (1, 300, 120, 4, 1, 3),
    (2, 200, 80, 3, 2, 4),
    (3, 60, 150, 2, 1, 1),
    (4, 400, 60, 6, 2, 2),
])
def test_kernel_matches_dense_cholesky(seed, n_a, n_b, per_a, pb, n_dense):
    rng = np.random.default_rng(seed)
    pat = _crossed_pattern(rng, n_a, n_b, per_a, pb)
    q = pat.shape[0]
    S = _spd_with_pattern(rng, pat, n_dense)
    m = S.shape[0]
    sym = sparse_chol.analyse(pat, m)
    # every row once, Z rows first, X/y rows kept last
    assert np.array_equal(np.sort(sym.perm), np.arange(m))
    assert np.array_equal(sym.perm[q:], np.arange(q, m))
    Lp = sparse_chol.factor_numeric(S, sym)
    Sp = S[np.ix_(sym.perm, sym.perm)]
    Ld = np.linalg.cholesky(Sp)
    # log-determinants of every leading block used by the criterion
    for n in (q, m - 1, m):
        ld_sparse = 2 * np.sum(np.log(np.diagonal(Lp)[:n]))
        ld_dense = np.linalg.slogdet(Sp[:n, :n])[1]
        assert ld_sparse == pytest.approx(ld_dense, rel=1e-10, abs=1e-10)
    # the factor itself on its supernodal pattern, and zero-free (L L' = P S P')
    L = np.zeros((m, m))
    for J in range(sym.n_supernodes):
        c0, c1 = sym.sn_start[J], sym.sn_start[J + 1]
        for r in sym.sn_rows[sym.sn_ptr[J]:sym.sn_ptr[J + 1]]:
            L[r, c0:min(c1, r + 1)] = Lp[r, c0:min(c1, r + 1)]
    np.testing.assert_allclose(L, Ld, rtol=0, atol=1e-10 * np.abs(Ld).max())
    # solves L_n' x = b
    for n in (q, m - 1):
        b = rng.standard_normal(n)
        x = sparse_chol.solve_lt(Lp, sym, b, n)
        np.testing.assert_allclose(x, sla.solve_triangular(Ld[:n, :n], b, lower=True, trans="T"),
                                   rtol=1e-10, atol=1e-12)
    # the selected inverse on the pattern of L, read in the original order
    for n in (q, m - 1):
        Z = sparse_chol.selected_inverse(Lp, sym, n)
        inv = np.linalg.inv(Sp[:n, :n])
        on = np.abs(L[:n, :n]) + np.abs(L[:n, :n]).T > 0
        pi, pj = np.nonzero(on)
        got = Z[sym.perm[pi], sym.perm[pj]]
        np.testing.assert_allclose(got, inv[pi, pj], rtol=0, atol=1e-10 * np.abs(inv).max())
        np.testing.assert_allclose(Z.diagonal(), np.diagonal(inv)[np.argsort(sym.perm[:n])],
                                   rtol=1e-10)


def test_min_degree_reduces_fill_and_flops():
    rng = np.random.default_rng(7)
    pat = _crossed_pattern(rng, 300, 400, 2)      # ~3 neighbours per column
    sym = sparse_chol.analyse(pat, pat.shape[0] + 2)
    assert sym.flops < 0.1 * sym.dense_flops()
    # supernodes partition the columns and hold their own columns first
    assert sym.sn_start[0] == 0 and sym.sn_start[-1] == sym.m
    for J in range(sym.n_supernodes):
        c0, c1 = sym.sn_start[J], sym.sn_start[J + 1]
        rows = sym.sn_rows[sym.sn_ptr[J]:sym.sn_ptr[J + 1]]
        assert np.array_equal(rows[: c1 - c0], np.arange(c0, c1))
        assert np.all(np.diff(rows) > 0)


def test_non_positive_definite_raises():
    rng = np.random.default_rng(3)
    pat = _crossed_pattern(rng, 100, 50, 3)
    S = _spd_with_pattern(rng, pat, 2)
    sym = sparse_chol.analyse(pat, S.shape[0])
    S[5, 5] = -1.0
    with pytest.raises(np.linalg.LinAlgError):
        sparse_chol.factor_numeric(S, sym)


# ------------------------------------------------------------------ whole models, forced path
def _crossed_data(seed: int, n_s: int = 900, n_d: int = 300, per_s: int = 6) -> pd.DataFrame:
    """Partially crossed students × lecturers with a lecturer slope on a binary covariate."""
    rng = np.random.default_rng(seed)
    s = np.repeat(np.arange(n_s), per_s)
    d = rng.integers(0, n_d, s.size)
    x = rng.integers(0, 2, s.size).astype(float)
    bs = rng.normal(0, 0.5, n_s)
    bd = rng.normal(0, [0.6, 0.3], (n_d, 2))
    y = 1 + 0.3 * x + bs[s] + bd[d, 0] + bd[d, 1] * x + rng.normal(0, 1, s.size)
    return pd.DataFrame({"y": y, "x": np.where(x > 0, "b", "a"), "xn": x,
                         "s": s.astype(str), "d": d.astype(str)})


@pytest.fixture
def force_sparse(monkeypatch):
    monkeypatch.setattr(sparse_chol, "MIN_SIZE", 1)
    monkeypatch.setattr(sparse_chol, "MAX_FLOP_SHARE", 10.0)


def _cp_pair(formula: str, data: pd.DataFrame):
    spec = build_model_spec(formula, data)
    cps = crossproducts(spec)
    cps.sparse_ar1 = True
    cpd = crossproducts(spec)
    cpd.sparse_ar1 = True
    cpd._rest_sym = False          # the dense blocked factor
    return cps, cpd


@pytest.mark.parametrize("formula,theta", [
    ("y ~ x + (1 | s) + (x | d)", [0.5, 0.6, 0.1, 0.3]),
    ("y ~ x + (1 | s) + (1 | d)", [0.5, 0.7]),
    ("y ~ x + (1 | s) + (1 | d) + (0 + xn | d)", [0.4, 0.5, 0.2]),
])
@pytest.mark.parametrize("reml", [True, False], ids=["REML", "ML"])
def test_model_criterion_gradient_estimates_match_dense(force_sparse, formula, theta, reml):
    cps, cpd = _cp_pair(formula, _crossed_data(11))
    assert rest_symbolic(cps) is not None
    th = np.asarray(theta)
    fs = factorize(th, cps, need_lr1=False, sparse_ok=True)
    assert fs.sparse is not None and fs.Lrr is None
    fd = factorize(th, cpd, need_lr1=False, sparse_ok=True)
    assert fd.sparse is None
    for name in ("ldL2", "ldRX2", "pwrss"):
        assert getattr(fs, name) == pytest.approx(getattr(fd, name), rel=1e-11)
    assert profiled_deviance(th, cps, reml) == pytest.approx(profiled_deviance(th, cpd, reml), rel=1e-12)
    cs, gs = profiled_deviance_grad(th, cps, reml)
    cd, gd = profiled_deviance_grad(th, cpd, reml)
    assert cs == pytest.approx(cd, rel=1e-12)
    np.testing.assert_allclose(gs, gd, rtol=1e-8, atol=1e-8)
    es, ed = estimates_at(cps, th, reml), estimates_at(cpd, th, reml)
    for key in ("beta", "vcov"):
        np.testing.assert_allclose(es[key], ed[key], rtol=1e-9, atol=1e-12)
    assert es["sigma"] == pytest.approx(ed["sigma"], rel=1e-11)
    for a, b in zip(es["b"], ed["b"]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    for a, b in zip(es["condvar"], ed["condvar"]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)


def test_fit_with_sparse_factor_reaches_dense_optimum(force_sparse):
    from scoremix.lme.engine import fit_native
    data = _crossed_data(5)
    spec = build_model_spec("y ~ x + (1 | s) + (x | d)", data)
    cps, cpd = _cp_pair("y ~ x + (1 | s) + (x | d)", data)
    ms = fit_native(spec, cp=cps, control={"warn": False})
    md = fit_native(spec, cp=cpd, control={"warn": False})
    assert rest_symbolic(cps) is not None and rest_symbolic(cpd) is None
    assert ms.opt.criterion <= md.opt.criterion + 1e-9 * abs(md.opt.criterion)
    assert ms.opt.criterion == pytest.approx(md.opt.criterion, rel=1e-10)
    np.testing.assert_allclose(ms.estimates["beta"], md.estimates["beta"], rtol=1e-5)


def test_pattern_assembler_matches_dense_assembly(force_sparse):
    cps, _ = _cp_pair("y ~ x + (1 | s) + (x | d)", _crossed_data(3))
    sym = rest_symbolic(cps)
    T = theta_to_T(np.array([0.5, 0.6, -0.2, 0.3]), cps.term_p)
    A = sp.csc_matrix(cps.ar1_sparse()[0])
    A.sort_indices()
    asm = sparse_chol.PatternAssembler(A, cps.Arr[0], sym, cps.term_p, cps.term_nlev)
    c = np.random.default_rng(0).uniform(0, 0.2, A.shape[1])
    got = asm(c, T)
    W = cps.Arr[0] - (A @ sp.diags(c) @ A.T).toarray()
    lam = sp.block_diag([sp.kron(sp.identity(nk), Tk) for Tk, nk in
                         zip(T[1:], cps.term_nlev[1:])] + [sp.identity(cps.p + 1)]).toarray()
    want = lam.T @ W @ lam + np.diag(np.r_[np.ones(cps.q_rest), np.zeros(cps.p + 1)])
    want = want[np.ix_(sym.perm, sym.perm)]
    for J in range(sym.n_supernodes):
        c0, c1 = sym.sn_start[J], sym.sn_start[J + 1]
        for r in sym.sn_rows[sym.sn_ptr[J]:sym.sn_ptr[J + 1]]:
            hi = min(c1, r + 1)
            np.testing.assert_allclose(got[r, c0:hi], want[r, c0:hi], rtol=0, atol=1e-10)
    # off the pattern the dense matrix is zero: nothing is lost
    mask = np.zeros_like(want, dtype=bool)
    for J in range(sym.n_supernodes):
        c0, c1 = sym.sn_start[J], sym.sn_start[J + 1]
        for r in sym.sn_rows[sym.sn_ptr[J]:sym.sn_ptr[J + 1]]:
            mask[r, c0:min(c1, r + 1)] = True
    assert np.all(np.tril(want)[~mask] == 0)


def test_dense_path_when_numba_unavailable(force_sparse, monkeypatch):
    monkeypatch.setattr(sparse_chol, "AVAILABLE", False)
    cps, cpd = _cp_pair("y ~ x + (1 | s) + (x | d)", _crossed_data(2))
    assert rest_symbolic(cps) is None
    th = np.array([0.5, 0.6, 0.1, 0.3])
    assert factorize(th, cps, need_lr1=False, sparse_ok=True).sparse is None
    assert profiled_deviance(th, cps, True) == profiled_deviance(th, cpd, True)


def test_package_works_without_numba(tmp_path):
    """A fresh interpreter in which ``import numba`` fails: the package imports, reports
    the kernel unavailable and fits with the dense factor."""
    script = textwrap.dedent("""
        import sys
        sys.modules["numba"] = None            # any 'import numba' raises ImportError
        import numpy as np, pandas as pd
        from scoremix.lme import sparse_chol
        assert not sparse_chol.AVAILABLE
        import scoremix as sm
        d = pd.read_csv(sys.argv[1], dtype={"s": str, "d": str})
        m = sm.lmer("y ~ x + (1 | s) + (x | d)", d)
        print(repr(-2 * m.loglik))
    """)
    data = _crossed_data(8, n_s=200, n_d=60)
    csv = tmp_path / "d.csv"
    data.to_csv(csv, index=False)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", script, str(csv)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    crit = float(out.stdout.strip().splitlines()[-1])
    # the same fit in this process (numba present; this small model is on the dense path)
    from scoremix.lme.api import lmer
    m = lmer("y ~ x + (1 | s) + (x | d)", pd.read_csv(csv, dtype={"s": str, "d": str}))
    assert crit == pytest.approx(-2 * m.loglik, rel=1e-10)


def test_vector_term_one_and_dispersion_match_dense(force_sparse):
    """The general assembly (vector-valued term 1: a dense downdate, then Λ and the
    permutation in one pass) and a dispersion model (relative residual variances ρ)."""
    data = _crossed_data(21, n_s=500, n_d=150, per_s=8)
    cps, cpd = _cp_pair("y ~ x + (x | s) + (1 | d)", data)
    assert cps.term_p[0] == 2 and rest_symbolic(cps) is not None
    th = np.array([0.5, 0.2, 0.3, 0.6])
    for reml in (True, False):
        assert profiled_deviance(th, cps, reml) == pytest.approx(profiled_deviance(th, cpd, reml),
                                                                 rel=1e-12)
        cs, gs = profiled_deviance_grad(th, cps, reml)
        cd, gd = profiled_deviance_grad(th, cpd, reml)
        np.testing.assert_allclose(gs, gd, rtol=1e-8, atol=1e-8)
        es, ed = estimates_at(cps, th, reml), estimates_at(cpd, th, reml)
        for a, b in zip(es["condvar"] + es["b"], ed["condvar"] + ed["b"]):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    spec = build_model_spec("y ~ x + (1 | s) + (x | d)", data, dispersion="~ x")
    cps = crossproducts(spec)
    cps.sparse_ar1 = True
    cpd = crossproducts(spec)
    cpd.sparse_ar1 = True
    cpd._rest_sym = False
    assert cps.n_disp == 2 and rest_symbolic(cps) is not None
    th = np.array([0.5, 0.6, 0.1, 0.3])
    rho = np.array([1.0, 1.7])
    fs = factorize(th, cps, rho, need_lr1=False, sparse_ok=True)
    assert fs.sparse is not None
    for reml in (True, False):
        assert profiled_deviance(th, cps, reml, rho) == pytest.approx(
            profiled_deviance(th, cpd, reml, rho), rel=1e-12)


def test_scalar_terms_without_pair_structure_match_dense(force_sparse, monkeypatch):
    """Scalar terms whose pair structure is not built (too many pairs): the gradient's
    trace is the column-by-column quadratic form on the selected inverse."""
    from scoremix.lme import pairs
    monkeypatch.setattr(pairs, "PAIR_MAX_NNZ", 0)
    cps, cpd = _cp_pair("y ~ x + (1 | s) + (1 | d)", _crossed_data(13))
    assert cps.pair_structure() is None and rest_symbolic(cps) is not None
    th = np.array([0.5, 0.7])
    for reml in (True, False):
        cs, gs = profiled_deviance_grad(th, cps, reml)
        cd, gd = profiled_deviance_grad(th, cpd, reml)
        assert cs == pytest.approx(cd, rel=1e-12)
        np.testing.assert_allclose(gs, gd, rtol=1e-8, atol=1e-8)


# ------------------------------------------------ in-place LAPACK, work arrays, lazy results
def test_inplace_lapack_matches_copy_path_and_dense(monkeypatch):
    """The trailing block's dpotrf/dpotri through scipy's Cython LAPACK in place (leading
    dimension m) against the copying f2py path and numpy's dense inverse."""
    rng = np.random.default_rng(31)
    pat = _crossed_pattern(rng, 300, 120, 5, 2)
    S = _spd_with_pattern(rng, pat, 3)
    m, q = S.shape[0], pat.shape[0]
    sym = sparse_chol.analyse(pat, m)
    assert sym.m - sym.sn_start[-2] > 10      # a real dense trailing block
    Lp = sparse_chol.factor_numeric(S, sym).copy()
    Z = sparse_chol.selected_inverse(Lp, sym, m - 1).dense()
    monkeypatch.setattr(sparse_chol, "_LAPACK", {"dpotrf": False, "dpotri": False})
    Lc = sparse_chol.factor_numeric(S, sym)
    Zc = sparse_chol.selected_inverse(Lc, sym, m - 1).dense()
    low = np.tril(np.ones((m, m), bool))
    np.testing.assert_allclose(Lp[low], Lc[low], rtol=0, atol=1e-12 * np.abs(Lc).max())
    np.testing.assert_allclose(Z, Zc, rtol=0, atol=1e-12 * np.abs(Zc).max())
    # the in-place trailing block is the dense factor's and inverse's
    Sp = S[np.ix_(sym.perm, sym.perm)]
    c0 = int(sym.sn_start[-2])
    Ld = np.linalg.cholesky(Sp)
    np.testing.assert_allclose(np.tril(Lp[c0:, c0:]), Ld[c0:, c0:], rtol=0,
                               atol=1e-10 * np.abs(Ld).max())
    inv = np.linalg.inv(Sp[:m - 1, :m - 1])
    back = np.argsort(sym.perm[:m - 1])
    np.testing.assert_allclose(Z[np.ix_(sym.perm[c0:m - 1], sym.perm[c0:m - 1])],
                               inv[c0:, c0:], rtol=0, atol=1e-10 * np.abs(inv).max())
    assert back.size == m - 1 and q < m


def test_work_arrays_are_not_shared_with_a_held_factor(force_sparse):
    """A factor (or selected inverse) still held by the caller keeps its array: later
    evaluations on the same model write elsewhere."""
    cps, cpd = _cp_pair("y ~ x + (1 | s) + (x | d)", _crossed_data(4))
    th1, th2 = np.array([0.5, 0.6, 0.1, 0.3]), np.array([0.9, 0.2, -0.3, 0.7])
    f1 = factorize(th1, cps, need_lr1=False, sparse_ok=True)
    Z1 = f1.rest_inverse(cps.q_rest)
    d1 = (f1.ldL2, f1.pwrss, Z1.diagonal())
    for th in (th2, th1 * 1.1, th2 * 0.9):       # more evaluations than pooled arrays
        f = factorize(th, cps, need_lr1=False, sparse_ok=True)
        f.rest_inverse(cps.q_rest)
        assert f.sparse[0] is not f1.sparse[0]
    assert (f1.ldL2, f1.pwrss) == d1[:2]
    np.testing.assert_array_equal(Z1.diagonal(), d1[2])
    fd = factorize(th1, cpd, need_lr1=False, sparse_ok=True)
    assert f1.ldL2 == pytest.approx(fd.ldL2, rel=1e-11)
    # once released, an array is reused (no new 40 MB array per evaluation of a big model)
    del f, Z1
    sym = rest_symbolic(cps)
    pool = list(sym.extra["work_mm"])
    for th in (th2, th1 * 1.1):
        factorize(th, cps, need_lr1=False, sparse_ok=True)
    assert all(any(b is p for p in pool) for b in sym.extra["work_mm"])
    # factors and selected inverses share the pool: a run of gradient evaluations needs at
    # most three arrays, and a selected inverse never takes its own factor's array
    for th in (th2, th1 * 1.1, th2 * 0.9, th1):
        f = factorize(th, cps, need_lr1=False, sparse_ok=True)
        Z = f.rest_inverse(cps.q_rest)
        assert Z.Zp is not f.sparse[0]
        g = profiled_deviance_grad(th, cps, True)[1]
        np.testing.assert_allclose(g, profiled_deviance_grad(th, cpd, True)[1], rtol=1e-8,
                                   atol=1e-8)
    assert len(sym.extra["work_mm"]) <= sparse_chol.WORK_POOL == 3


def test_last_factor_is_reused_only_at_the_same_theta(force_sparse):
    from scoremix.lme.factor import last_factor
    cps, cpd = _cp_pair("y ~ x + (1 | s) + (x | d)", _crossed_data(6))
    th = np.array([0.5, 0.6, 0.1, 0.3])
    f = factorize(th, cps, need_lr1=False, sparse_ok=True)
    assert last_factor(th.copy(), cps) is f
    assert last_factor(th + 1e-12, cps) is None
    es = estimates_at(cps, th, True)                  # from the kept factor
    ed = estimates_at(cpd, th, True)
    for key in ("beta", "vcov"):
        np.testing.assert_allclose(es[key], ed[key], rtol=1e-9, atol=1e-12)
    for a, b in zip(es["condvar"], ed["condvar"]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)


def test_lazy_conditional_variances_equal_eager_ones(force_sparse):
    """A supernodal fit leaves the conditional variances to first use (as lme4's lmer
    leaves them to ranef(condVar = TRUE)); they equal the eager ones, and the result and
    the lazy computation (with its cross-products) pickles without the work arrays."""
    import pickle
    from scoremix.lme.engine import fit_native
    from scoremix.lme.result import LmerResult
    data = _crossed_data(9)
    spec = build_model_spec("y ~ x + (1 | s) + (x | d)", data)
    cps, _ = _cp_pair("y ~ x + (1 | s) + (x | d)", data)
    nf = fit_native(spec, cp=cps, control={"warn": False})
    assert "condvar" not in nf.estimates
    sym = rest_symbolic(cps)
    assert not any(k.startswith("work_") or k == "last_factor" for k in sym.extra)
    m = LmerResult.from_native(nf)
    assert m._condvar_fn is not None
    eager = estimates_at(cps, m.theta.to_numpy(), True)["condvar"]
    fn = pickle.loads(pickle.dumps(m._condvar_fn))
    assert not any(k.startswith("work_") for k in fn.args[0]._rest_sym.extra)
    for a, b in zip(m.condvar, eager):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    assert not any(k.startswith("work_") for k in sym.extra)   # not kept with the result
    sds = m.ranef_condsd
    for t, V in zip(spec.terms, eager):
        np.testing.assert_allclose(sds[t.group_factor][t.term_names].to_numpy(),
                                   np.sqrt(np.einsum("lii->li", V)), rtol=1e-12)
    for a, b in zip(fn(), eager):                      # computed after unpickling
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=0)
    m.condvar = None                                    # an explicit value wins
    assert m.condvar is None


def _data_with_empty_slopes(seed: int) -> pd.DataFrame:
    """Students × lecturers where 40 % of the lecturers have only level "a" of ``x`` (an
    empty slope column: that row of ``Λ'WΛ`` is zero but for the identity) and ``x3`` has
    three levels, some lecturers lacking "c"."""
    d = _crossed_data(seed, n_s=700, n_d=240, per_s=7)
    rng = np.random.default_rng(seed)
    lect = d["d"].astype(int).to_numpy()
    only_a = lect < 96
    d.loc[only_a, "x"] = "a"
    x3 = rng.choice(["a", "b", "c"], size=len(d))
    x3[(lect >= 96) & (lect < 160) & (x3 == "c")] = "b"
    d["x3"] = x3
    d["y"] = d["y"] + np.where(d["x3"] == "c", 0.4, 0.0)
    return d


@pytest.mark.parametrize("formula,theta", [
    ("y ~ x + (1 | s) + (x | d)", [0.5, 0.6, 0.1, 0.3]),
    ("y ~ x3 + (1 | s) + (x3 | d)", [0.5, 0.6, 0.1, -0.2, 0.4, 0.05, 0.3]),
])
def test_empty_slope_rows_keep_their_own_pattern(force_sparse, formula, theta):
    """Λ_k = I ⊗ T_k is lower triangular, so a level's last columns keep their own
    pattern (an empty slope row costs no fill): the criterion, gradient, estimates and
    conditional variances (which read the within-level blocks of S⁻¹) still equal the
    dense factor's."""
    cps, cpd = _cp_pair(formula, _data_with_empty_slopes(17))
    sym = rest_symbolic(cps)
    assert sym is not None
    th = np.asarray(theta)
    for reml in (True, False):
        assert profiled_deviance(th, cps, reml) == pytest.approx(profiled_deviance(th, cpd, reml),
                                                                 rel=1e-12)
        cs, gs = profiled_deviance_grad(th, cps, reml)
        cd, gd = profiled_deviance_grad(th, cpd, reml)
        assert cs == pytest.approx(cd, rel=1e-12)
        np.testing.assert_allclose(gs, gd, rtol=1e-8, atol=1e-8)
        es, ed = estimates_at(cps, th, reml), estimates_at(cpd, th, reml)
        for key in ("beta", "vcov"):
            np.testing.assert_allclose(es[key], ed[key], rtol=1e-9, atol=1e-12)
        for a, b in zip(es["condvar"] + es["b"], ed["condvar"] + ed["b"]):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    # the lower-triangular closure is smaller than the full per-level one
    qr = cps.q_rest
    pk, nk = cps.term_p[1], cps.term_nlev[1]
    full = sp.kron(sp.identity(nk), np.ones((pk, pk)))
    pat = sp.csr_matrix(cps.Arr[:, :qr, :qr].any(axis=0))
    Az = abs(sp.csr_matrix(cps.ar1_sparse()[0][:qr]))
    pat = ((pat + Az @ Az.T) != 0).astype(float)
    old = sparse_chol.analyse(((full @ pat @ full) != 0).astype(float).tocsr(), cps.Arr.shape[1])
    assert sym.nnz < old.nnz


def test_trace_from_the_assembly_pass_equals_its_own_pass(force_sparse):
    """``P c2`` formed in the assembly's pass over the pairs (for the gradient's trace)
    equals ``A diag(c2) A'`` on the pattern, and the trace read from it equals the trace
    with its own pass; other weights are not mistaken for the kept ones."""
    cps, _ = _cp_pair("y ~ x + (1 | s) + (x | d)", _crossed_data(12))
    sym = rest_symbolic(cps)
    th = np.array([0.5, 0.6, -0.2, 0.3])
    T = theta_to_T(th, cps.term_p)
    A = sp.csc_matrix(cps.ar1_sparse()[0])
    A.sort_indices()
    asm = sparse_chol.PatternAssembler(A, cps.Arr[0], sym, cps.term_p, cps.term_nlev)
    rng = np.random.default_rng(1)
    c, c2 = rng.uniform(0, 0.2, A.shape[1]), rng.uniform(0, 0.05, A.shape[1])
    Lp = sparse_chol.factor_numeric(asm(c, T, c2=c2), sym, assembled=True)
    kept_c2, Pc2 = asm._pc2
    dense = (A @ sp.diags(c2) @ A.T).toarray()
    W0 = asm.W0
    m = cps.Arr.shape[1]
    # the lower-triangle entries w of W in the assembler's order: rows/cols from W0's map
    tri = np.tril(np.ones((m, m), bool)) & ((cps.Arr[0] != 0) | (dense != 0) | np.eye(m, dtype=bool))
    np.testing.assert_allclose(np.sort(Pc2), np.sort(dense[tri]), rtol=1e-12, atol=1e-15)
    assert W0.size == Pc2.size
    Z = sparse_chol.selected_inverse(Lp, sym, cps.q_rest + cps.p)
    t_kept = asm.trace_downdate(Z, c2, T)
    asm._pc2 = None
    t_own = asm.trace_downdate(Z, c2, T)
    assert t_kept == pytest.approx(t_own, rel=1e-13)
    Lp = sparse_chol.factor_numeric(asm(c, T, c2=c2), sym, assembled=True)
    assert asm.trace_downdate(Z, c2 * 1.5, T) == pytest.approx(1.5 * t_own, rel=1e-12)


# ------------------------------------------------ compiled symbolic phase (issue 20, s8)
def _pattern_by_products(cp) -> sp.csr_matrix:
    """The rest block's Z-row pattern by scipy sparse products (the definition):
    ``Bl'(A_rr ≠ 0 ∪ Az Az')Bl + blockdiag(ones)`` with ``Az`` the union of ``|A_r1,d|`` and
    ``Bl = ⊕_k I ⊗ tril(1_{p_k × p_k})``."""
    qr = cp.q_rest
    pat = sp.csr_matrix(cp.Arr[:, :qr, :qr].any(axis=0))
    Az = sum(abs(sp.csr_matrix(A[:qr])) for A in cp.ar1_sparse()).tocsr()
    Az.data = np.ones_like(Az.data)
    pat = pat + Az @ Az.T
    tri = [sp.kron(sp.identity(nk, format="csr"), np.tril(np.ones((pk, pk))), format="csr")
           for pk, nk in zip(cp.term_p[1:], cp.term_nlev[1:])]
    full = [sp.kron(sp.identity(nk, format="csr"), np.ones((pk, pk)), format="csr")
            for pk, nk in zip(cp.term_p[1:], cp.term_nlev[1:])]
    Bl = sp.block_diag(tri, format="csr")
    out = (Bl.T @ pat @ Bl + sp.block_diag(full, format="csr")).tocsr()
    out.data = out.data != 0
    out.eliminate_zeros()
    return out


@pytest.mark.parametrize("formula,dispersion", [
    ("y ~ x + (1 | s) + (x | d)", None),
    ("y ~ x + (1 | s) + (1 | d)", None),
    ("y ~ x3 + (1 | s) + (x3 | d)", None),
    ("y ~ x + (1 | s) + (x | d)", "~ x"),
])
def test_compiled_pattern_and_analysis_equal_their_definitions(formula, dispersion):
    """``rest_pattern`` (one compiled pass) gives exactly the pattern of the sparse products,
    and the compiled ``analyse`` exactly the Python analysis (order, supernodes, rows,
    nnz, flops) at several relaxations."""
    spec = build_model_spec(formula, _data_with_empty_slopes(5), dispersion=dispersion)
    cp = crossproducts(spec)
    cp.sparse_ar1 = True
    P = sparse_chol.rest_pattern(cp.Arr, cp.ar1_sparse(), cp.q_rest, cp.term_p, cp.term_nlev)
    Q = _pattern_by_products(cp)
    assert P.shape == Q.shape and P.nnz == Q.nnz and (P != Q).nnz == 0
    m = cp.Arr.shape[1]
    for relax in (0.0, 0.2, 0.8):
        a, b = sparse_chol._analyse_py(P, m, relax), sparse_chol.analyse(P, m, relax)
        for key in ("perm", "iperm", "sn_start", "sn_ptr", "sn_rows"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
        assert (a.m, a.qz, a.nnz, a.flops) == (b.m, b.qz, b.nnz, b.flops)
