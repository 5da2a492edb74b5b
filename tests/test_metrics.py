"""Tests of scoremix.metrics against hand arithmetic, sklearn, brute force and real data."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.spatial import ConvexHull
from scipy.stats import norm
from sklearn.metrics import roc_curve

from scoremix.metrics import (
    EER_METHODS,
    DetCurve,
    MetricInputError,
    act_dcf,
    bayes_threshold,
    cllr,
    dcf,
    det_axis_ticks,
    det_curve,
    eer,
    eer_threshold,
    min_cllr,
    min_dcf,
    probit,
    rates_at,
)
from scoremix.trials import LabelError, NonFiniteScoreError, SingleClassError

# Tiny table with ties. Positives: 2, 3. Negatives: 0, 0, 4.  N1 = 2, N0 = 3.
TIE_S = np.array([2.0, 3.0, 0.0, 0.0, 4.0])
TIE_Y = np.array([1, 1, 0, 0, 0])
# Operating points (accept s >= tau):
#   tau   #pos<tau  P_miss   #neg>=tau  P_fa
#   0     0         0        3          1
#   2     0         0        1          1/3
#   3     1         1/2      1          1/3
#   4     2         1        1          1/3
#   inf   2         1        0          0


def test_det_curve_hand():
    d = det_curve(TIE_S, TIE_Y)
    assert isinstance(d, DetCurve)
    assert d.thresholds.tolist() == [0.0, 2.0, 3.0, 4.0, math.inf]
    np.testing.assert_array_equal(d.p_miss, [0, 0, 0.5, 1, 1])
    np.testing.assert_array_equal(d.p_fa, [1, 1 / 3, 1 / 3, 1 / 3, 0])
    assert (d.n_pos, d.n_neg) == (2, 3)
    assert len(d) == 5


def test_eer_methods_hand():
    # interp: d = P_miss - P_fa = -1, -1/3, 1/6, 2/3, 1 changes sign between tau=2
    #   (0, 1/3) and tau=3 (1/2, 1/3); P_fa is 1/3 on that segment -> EER = 1/3.
    assert eer(TIE_S, TIE_Y, "interp") == pytest.approx(1 / 3, abs=1e-15)
    # rocch: points (P_fa, P_miss) = (0,1) (1/3,1) (1/3,1/2) (1/3,0) (1,0); the lower hull
    #   is (0,1) -> (1/3,0) -> (1,0). Segment P_miss = 1 - 3 P_fa meets P_miss = P_fa at 1/4.
    assert eer(TIE_S, TIE_Y, "rocch") == pytest.approx(0.25, abs=1e-15)
    # asvspoof: trials sorted, positives first among ties: 0n 0n 2p 3p 4n. After
    #   rejecting j trials: (frr, far) = (0,1) (0,2/3) (0,1/3) (1/2,1/3) (1,1/3) (1,0);
    #   |frr-far| = 1, 2/3, 1/3, 1/6, 2/3, 1 -> j=3, EER = (1/2 + 1/3)/2 = 5/12.
    assert eer(TIE_S, TIE_Y, "asvspoof") == pytest.approx(5 / 12, abs=1e-15)
    # voxceleb: roc_curve, thresholds 4,3,2,0 have fps 1,1,1,3 and tps 0,1,2,2;
    #   drop_intermediate removes tau=3 (second differences of fps and tps are 0 there).
    #   With the added (0,0): fnr = 1, 1, 0, 0; fpr = 0, 1/3, 1/3, 1 -> argmin at tau=2,
    #   EER = fnr = 0.
    assert eer(TIE_S, TIE_Y, "voxceleb") == 0.0
    assert eer(TIE_S, TIE_Y) == eer(TIE_S, TIE_Y, "rocch")


def test_eer_thresholds_hand():
    # rocch: the EER is at t = 3/4 of the hull segment tau=inf -> tau=2; nearer vertex: 2
    assert eer_threshold(TIE_S, TIE_Y, "rocch") == 2.0
    # interp: d = -1/3 at tau=2 and 1/6 at tau=3: t = (1/3)/(1/2) = 2/3 -> nearer is 3
    assert eer_threshold(TIE_S, TIE_Y, "interp") == 3.0
    # asvspoof: script threshold = 3rd smallest score 2 meaning reject s <= 2 -> next float
    assert eer_threshold(TIE_S, TIE_Y, "asvspoof") == np.nextafter(2.0, np.inf)
    assert eer_threshold(TIE_S, TIE_Y, "voxceleb") == 2.0


def test_eer_no_ties_all_methods_agree_on_exact_crossing():
    # pos 3, 4; neg 1, 2 plus pos 1.5 and neg 3.5:  sorted 1n 1.5p 2n 3p 3.5n 4p
    s = np.array([3, 4, 1.5, 1, 2, 3.5])
    y = np.array([1, 1, 1, 0, 0, 0])
    # tau=3: P_miss = 1/3 (1.5), P_fa = 1/3 (3.5) -> a reachable point on the diagonal
    for m in EER_METHODS:
        assert eer(s, y, m) == pytest.approx(1 / 3, abs=1e-15), m


def test_min_dcf_hand():
    # p_target = 0.5, costs 1: C = 0.5 P_miss + 0.5 P_fa = 1/2, 1/6, 5/12, 2/3, 1/2
    r = min_dcf(TIE_S, TIE_Y, p_target=0.5)
    assert r.value == pytest.approx(1 / 6, abs=1e-15)
    assert r.threshold == 2.0 and r.p_miss == 0.0 and r.p_fa == pytest.approx(1 / 3)
    # normalised by min(0.5, 0.5): 1/3
    assert min_dcf(TIE_S, TIE_Y, p_target=0.5, normalize=True).value == pytest.approx(1 / 3)
    # p_target = 0.05: C = 0.95, 0.95/3, 0.025+0.95/3, 0.05+0.95/3, 0.05 -> reject all
    r = min_dcf(TIE_S, TIE_Y)
    assert r.value == pytest.approx(0.05) and r.threshold == math.inf
    assert min_dcf(TIE_S, TIE_Y, normalize=True).value == pytest.approx(1.0)
    # c_fa = 10, p_target = 0.5: C = 5 at tau=0 ... at tau=2: 10*0.5/3 = 5/3; reject all 0.5
    assert min_dcf(TIE_S, TIE_Y, p_target=0.5, c_fa=10).value == pytest.approx(0.5)


def test_dcf_hand():
    # tau = 2.5: P_miss = 1/2 (score 2), P_fa = 1/3 (score 4)
    # C = 1*0.2*0.5 + 2*0.8*(1/3) = 0.1 + 0.5333...
    assert dcf(TIE_S, TIE_Y, 2.5, p_target=0.2, c_fa=2) == pytest.approx(0.1 + 1.6 / 3)
    # normalised by min(0.2, 1.6) = 0.2
    assert dcf(TIE_S, TIE_Y, 2.5, p_target=0.2, c_fa=2, normalize=True) == pytest.approx(
        (0.1 + 1.6 / 3) / 0.2)
    # accept = score >= threshold: tau = 3 rejects only the positive at 2
    assert dcf(TIE_S, TIE_Y, 3.0, p_target=0.5) == pytest.approx(0.5 * 0.5 + 0.5 / 3)


def test_cllr_hand():
    ln3 = math.log(3)
    llr = np.array([0.0, ln3, 0.0, -ln3])
    y = np.array([1, 1, 0, 0])
    # pos: log2(1+e^0) = 1, log2(1+1/3) = log2(4/3); neg: 1, log2(4/3)
    # Cllr = ((1 + log2(4/3))/2 + (1 + log2(4/3))/2) / 2 = (1 + log2(4/3)) / 2
    assert cllr(llr, y) == pytest.approx((1 + math.log2(4 / 3)) / 2, rel=1e-14)
    # all-zero LLRs carry no information: 1 bit
    assert cllr(np.zeros(4), y) == pytest.approx(1.0, rel=1e-14)


def test_min_cllr_hand():
    # PAV on ascending scores: 0 -> 0/2, 2 -> 1/1, 3 -> 1/1, 4 -> 0/1; pooling 1, 1, 0
    # gives block {2,3,4} posterior 2/3. Prior log odds log(2/3) -> LLR = log 2 - log(2/3)
    # = log 3; block {0} is -inf (negatives only, contribute 0).
    # pos: 2 x log2(1 + 1/3); neg: 2 x 0 and 1 x log2(1 + 3) = 2
    expected = (math.log2(4 / 3) + 2 / 3) / 2
    assert min_cllr(TIE_S, TIE_Y) == pytest.approx(expected, rel=1e-14)


def test_cllr_infinite_llrs():
    y = np.array([1, 1, 0, 0])
    # right-way infinities cost nothing: pos +inf, neg -inf; finite ones: 0 -> 1 bit each
    llr = np.array([np.inf, 0.0, -np.inf, 0.0])
    assert cllr(llr, y) == pytest.approx(0.5, rel=1e-14)  # ((0+1)/2 + (0+1)/2)/2
    assert cllr(np.array([-np.inf, 0, 0, 0]), y) == math.inf
    # separated classes with infinite scores: PAV gives +-inf blocks, min Cllr = 0
    assert min_cllr(np.array([np.inf, 5, -np.inf, 1]), y) == 0.0
    # constant scores: PAV posterior = prior, LLR = 0 -> 1 bit
    assert min_cllr(np.ones(4), y) == pytest.approx(1.0, rel=1e-14)


def test_act_dcf_bayes_threshold():
    # tau* = log(c_fa (1 - p) / (c_miss p)) = log(0.5 / 0.5) = 0 at p = 0.5, costs 1
    assert bayes_threshold(0.5, 1, 1) == 0.0
    assert bayes_threshold(0.05, 1, 1) == pytest.approx(math.log(19))
    llr = np.array([-1.0, 0.0, 2.0, -3.0, 0.5, 4.0])
    y = np.array([1, 1, 1, 0, 0, 0])
    # accept llr >= 0: misses {-1} -> 1/3; false alarms {0.5, 4} -> 2/3
    assert act_dcf(llr, y, p_target=0.5) == pytest.approx(0.5 / 3 + 0.5 * 2 / 3)
    # p_target = 0.05: tau* = log 19 = 2.94: misses {-1, 0, 2} = 1; fa {4} = 1/3
    assert act_dcf(llr, y) == pytest.approx(0.05 + 0.95 / 3)
    assert act_dcf(llr, y) >= min_dcf(llr, y).value


# ----------------------------------------------------------------------------- properties
def _random_table(rng: np.random.Generator, n: int, levels: int | None = None):
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    if levels is None:
        s = rng.normal(size=n) + 1.2 * y
    else:
        s = rng.integers(0, levels, n) + y * rng.integers(0, 3, n)
    return s.astype(float), y


@pytest.mark.parametrize("seed", range(6))
def test_det_curve_counts_equal_sklearn(seed):
    rng = np.random.default_rng(seed)
    s, y = _random_table(rng, 300, levels=None if seed % 2 else 12)
    d = det_curve(s, y)
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    # sklearn: descending thresholds with a leading +inf (accept nothing)
    np.testing.assert_array_equal(d.thresholds[::-1], thr)
    n1, n0 = int(y.sum()), int((1 - y).sum())
    np.testing.assert_array_equal(np.rint(d.p_fa[::-1] * n0), np.rint(fpr * n0))
    np.testing.assert_array_equal(np.rint((1 - d.p_miss[::-1]) * n1), np.rint(tpr * n1))


def _script_eer(s, y):
    """The ASVspoof compute_eer recipe written out as a plain loop over sorted trials."""
    trials = sorted(zip(s.tolist(), (1 - y).tolist()))  # positives (key 0) first on ties
    n1, n0 = int(y.sum()), int((1 - y).sum())
    best, best_e, best_thr = math.inf, None, trials[0][0] - 0.001
    miss, fa = 0, n0
    cand = [(0.0, 1.0, trials[0][0] - 0.001)]
    for score, is_neg in trials:
        if is_neg:
            fa -= 1
        else:
            miss += 1
        cand.append((miss / n1, fa / n0, score))
    for frr, far, thr in cand:
        if abs(frr - far) < best:
            best, best_e, best_thr = abs(frr - far), (frr + far) / 2, thr
    return best_e, best_thr


@pytest.mark.parametrize("seed", range(8))
def test_eer_asvspoof_and_voxceleb_recipes(seed):
    rng = np.random.default_rng(100 + seed)
    s, y = _random_table(rng, int(rng.integers(5, 80)), levels=int(rng.integers(2, 9)))
    e, thr = _script_eer(s, y)
    assert eer(s, y, "asvspoof") == pytest.approx(e, abs=1e-15)
    got_thr = eer_threshold(s, y, "asvspoof")
    assert got_thr == np.nextafter(thr, np.inf) or (thr < s.min() and got_thr == s.min())
    fpr, tpr, thr2 = roc_curve(y, s)  # the VoxCeleb recipe, default drop_intermediate
    i = np.nanargmin(np.abs((1 - tpr) - fpr))
    assert eer(s, y, "voxceleb") == 1 - tpr[i]
    assert eer_threshold(s, y, "voxceleb") == thr2[i]


def _hull_vertices(d: DetCurve) -> np.ndarray:
    """Indices of ROCCH vertices of a DET curve via qhull (independent of scoremix)."""
    pts = np.column_stack([d.p_fa, d.p_miss])
    pts_ext = np.vstack([pts, [[1.0, 1.0]]])  # close the polygon above the curve
    hull = ConvexHull(pts_ext)
    return np.array(sorted(v for v in hull.vertices if v < len(pts)))


@pytest.mark.parametrize("seed", range(6))
def test_rocch_eer_and_min_dcf_on_hull(seed):
    rng = np.random.default_rng(200 + seed)
    s, y = _random_table(rng, 400, levels=None if seed % 2 else 15)
    d = det_curve(s, y)
    v = _hull_vertices(d)
    # the hull meets the diagonal where the segment between two vertices crosses it
    pf, pm = d.p_fa[v], d.p_miss[v]
    order = np.lexsort((-pm, pf))  # P_fa ascending, then P_miss descending
    pf, pm = pf[order], pm[order]
    k = np.flatnonzero(pm - pf <= 0)[0]
    if pm[k] == pf[k]:
        ref = pf[k]
    else:
        t = (pm[k - 1] - pf[k - 1]) / ((pm[k - 1] - pf[k - 1]) - (pm[k] - pf[k]))
        ref = pf[k - 1] + t * (pf[k] - pf[k - 1])
    assert eer(s, y, "rocch") == pytest.approx(ref, abs=1e-12)
    # ROCCH EER = max over w of min over thresholds of w P_miss + (1 - w) P_fa
    w = np.linspace(0, 1, 4001)[:, None]
    grid = np.max(np.min(w * d.p_miss + (1 - w) * d.p_fa, axis=1))
    assert grid <= eer(s, y, "rocch") + 1e-12
    assert eer(s, y, "rocch") - grid < 1e-3
    assert eer(s, y, "rocch") <= eer(s, y, "interp") + 1e-15
    # minDCF over all thresholds equals minDCF over the hull vertices
    for pt, cfa in [(0.05, 1), (0.5, 1), (0.01, 1), (0.05, 10)]:
        cost_hull = np.min(pt * d.p_miss[v] + cfa * (1 - pt) * d.p_fa[v])
        assert min_dcf(s, y, p_target=pt, c_fa=cfa).value == pytest.approx(cost_hull, abs=1e-15)


@pytest.mark.parametrize("seed", range(4))
def test_invariance_under_increasing_transforms(seed):
    rng = np.random.default_rng(300 + seed)
    s, y = _random_table(rng, 500, levels=None if seed % 2 else 10)
    transforms = [lambda x: 3 * x - 7, lambda x: np.exp(x / 2), lambda x: np.arctan(x / 3) ** 3]
    for f in transforms:
        t = f(s)
        assert np.all(np.diff(t[np.argsort(s)]) >= 0)
        for m in EER_METHODS:
            assert eer(t, y, m) == pytest.approx(eer(s, y, m), abs=1e-14), m
        a, b = min_dcf(s, y), min_dcf(t, y)
        assert a.value == pytest.approx(b.value, abs=1e-15)
        assert (a.p_miss, a.p_fa) == (b.p_miss, b.p_fa)
        assert min_cllr(t, y) == pytest.approx(min_cllr(s, y), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_rates_at_and_min_dcf_threshold_reproduces(seed):
    rng = np.random.default_rng(400 + seed)
    s, y = _random_table(rng, 250, levels=None if seed % 2 else 8)
    taus = np.concatenate([np.unique(s), [-np.inf, np.inf], rng.normal(size=20)])
    r = rates_at(s, y, taus)
    pos, neg = s[y == 1], s[y == 0]
    np.testing.assert_array_equal(r.p_miss, [(pos < t).sum() / pos.size for t in taus])
    np.testing.assert_array_equal(r.p_fa, [(neg >= t).sum() / neg.size for t in taus])
    one = rates_at(s, y, 0.3)
    assert isinstance(one.p_miss, float) and one.p_miss == (pos < 0.3).sum() / pos.size
    for pt, cm, cfa, nz in [(0.05, 1, 1, False), (0.01, 1, 1, True), (0.05, 1, 10, True)]:
        r = min_dcf(s, y, p_target=pt, c_miss=cm, c_fa=cfa, normalize=nz)
        # counted by hand at the returned threshold, accept = s >= threshold
        pm = (pos < r.threshold).sum() / pos.size
        pf = (neg >= r.threshold).sum() / neg.size
        assert (pm, pf) == (r.p_miss, r.p_fa)
        assert dcf(s, y, r.threshold, pt, cm, cfa, nz) == r.value  # exact
        brute = min(dcf(s, y, t, pt, cm, cfa, nz) for t in taus)
        assert r.value <= brute + 1e-15 and r.value == pytest.approx(brute, abs=1e-15)


def test_eer_gaussian_known_truth():
    # positives N(2, 1), negatives N(0, 1): EER = Phi(-2/2) = 0.15866
    rng = np.random.default_rng(7)
    n = 100_000
    y = (rng.random(n) < 0.3).astype(np.int8)
    s = rng.normal(size=n) + 2.0 * y
    truth = norm.cdf(-1.0)
    se = math.sqrt(truth * (1 - truth) * (1 / y.sum() + 1 / (n - y.sum())))
    for m in EER_METHODS:
        assert abs(eer(s, y, m) - truth) < 4 * se, m
    # the true LLR of N(2,1) vs N(0,1) is log phi(s-2) - log phi(s) = 2s - 2: it is
    # calibrated, so its Cllr exceeds its min Cllr (PAV-recalibrated) only slightly
    llr = 2.0 * s - 2.0
    assert 0 < min_cllr(llr, y) <= cllr(llr, y) < min_cllr(llr, y) + 0.01


# ----------------------------------------------------------------------------- inputs
def test_string_and_bool_labels():
    labels = np.where(TIE_Y == 1, "bonafide", "spoof")
    assert eer(TIE_S, labels) == eer(TIE_S, TIE_Y)
    assert min_dcf(TIE_S, TIE_Y.astype(bool)).value == min_dcf(TIE_S, TIE_Y).value


def test_input_errors():
    with pytest.raises(SingleClassError, match="only negative"):
        eer([1, 2], [0, 0])
    with pytest.raises(NonFiniteScoreError, match="NaN"):
        eer([1, np.nan], [0, 1])
    # ±inf scores are accepted (order is all a DCF needs); a threshold at +inf is reported as +inf
    r = min_dcf([1, np.inf], [0, 1])
    assert r.value == 0.0 and r.threshold == np.inf
    with pytest.raises(MetricInputError, match="3 values but labels has 2"):
        eer([1, 2, 3], [0, 1])
    with pytest.raises(MetricInputError, match="unknown EER method"):
        eer([1, 2], [0, 1], method="nist")
    with pytest.raises(MetricInputError, match="p_target"):
        min_dcf([1, 2], [0, 1], p_target=1.0)
    with pytest.raises(MetricInputError, match="positive"):
        dcf([1, 2], [0, 1], 0.0, c_fa=0)
    with pytest.raises(MetricInputError, match="empty"):
        eer([], [])
    with pytest.raises(LabelError):
        eer([1, 2], ["yes", "no"])
    with pytest.raises(MetricInputError, match="NaN"):
        rates_at([1, 2], [0, 1], [np.nan])


def test_probit_and_ticks():
    assert probit(0.5) == 0.0
    assert probit([0.0, 1.0]).tolist() == [-math.inf, math.inf]
    assert probit(0.0, eps=1e-3) == pytest.approx(norm.ppf(1e-3))
    t = det_axis_ticks(0.01, 0.2)
    assert t.labels == ["1", "2", "5", "10", "20"]
    np.testing.assert_allclose(t.positions, norm.ppf([0.01, 0.02, 0.05, 0.1, 0.2]))
    with pytest.raises(MetricInputError):
        det_axis_ticks(0.5, 0.1)


# ----------------------------------------------------------------------------- real data
def _asvspoof(shared_data):
    folder = shared_data / "asvspoof2019_la_eval"
    table = pd.read_csv(folder / "asvspoof2019_la_eval.csv.gz")
    return folder, table, (table["label"] == "bonafide").to_numpy().astype(np.int8)


def test_real_asvspoof_eer_matches_check(shared_data):
    folder, t, y = _asvspoof(shared_data)
    check = json.loads((folder / "system_eer_check.json").read_text())
    # system_eer_check.json: EER in percent rounded to 3 decimals, computed with the
    # ASVspoof compute_eer recipe (nearest point); the one-system table is
    # rawnet2_transferfiles, 5.221 %. score_logit is a monotone transform of score_raw.
    ref = check["rawnet2_transferfiles"]["eer_pct"]
    s = t["score_logit"].to_numpy()
    assert check["rawnet2_transferfiles"]["n"] == len(t)
    assert round(100 * eer(s, y, "asvspoof"), 3) == ref
    assert round(100 * eer(t["score_raw"].to_numpy(), y, "asvspoof"), 3) == ref
    # the other definitions differ by a few trials out of 7,355 / 63,882
    for m in ("interp", "voxceleb", "rocch"):
        assert abs(100 * eer(s, y, m) - ref) < 0.05, m
    assert eer(s, y, "rocch") <= eer(s, y, "interp")


def test_real_asvspoof_per_attack_eer(shared_data):
    folder, t, y = _asvspoof(shared_data)
    check = pd.read_csv(folder / "per_attack_eer_check.csv").set_index("attack")
    bona = t["label"] == "bonafide"
    for attack, ref in check["rawnet2_transferfiles"].items():  # percent, 2 decimals
        sub = bona | (t["attack"] == attack)
        e = eer(t.loc[sub, "score_logit"].to_numpy(), y[sub.to_numpy()], "asvspoof")
        assert round(100 * e, 2) == pytest.approx(ref, abs=1e-9), attack


def test_real_asvspoof_min_dcf_against_sklearn(shared_data):
    _, t, y = _asvspoof(shared_data)
    s = t["score_logit"].to_numpy()
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    for pt, cfa in [(0.05, 1), (0.05, 10), (0.01, 1)]:
        cost = pt * (1 - tpr) + cfa * (1 - pt) * fpr  # all thresholds incl. reject-all
        r = min_dcf(s, y, p_target=pt, c_fa=cfa)
        assert r.value == pytest.approx(cost.min(), rel=1e-12, abs=1e-15)
        pos, neg = s[y == 1], s[y == 0]
        assert r.p_miss == np.mean(pos < r.threshold) and r.p_fa == np.mean(neg >= r.threshold)


def test_real_multisystem_eer_matches_check(shared_data):
    folder = shared_data / "asvspoof2019_la_eval"
    check = json.loads((folder / "system_eer_check.json").read_text())
    long = pd.read_csv(folder / "asvspoof2019_la_eval_multisystem_long.csv.gz",
                       usecols=["label", "system", "score"])
    assert set(long["system"]) == set(check)
    for system, g in long.groupby("system"):
        sign = 1.0 if check[system]["higher_is_bonafide"] else -1.0
        yy = (g["label"] == "bonafide").to_numpy()
        assert len(g) == check[system]["n"]
        got = round(100 * eer(sign * g["score"].to_numpy(), yy, "asvspoof"), 3)
        assert got == pytest.approx(check[system]["eer_pct"], abs=1e-9), system


def test_rocch_with_low_block_of_positives():
    # a block of positives scoring below everything (e.g. failed files) makes the hull's
    # last segment long; compare with the qhull construction
    rng = np.random.default_rng(11)
    s, y = _random_table(rng, 3000)
    s[(y == 1) & (rng.random(s.size) < 0.2)] = -50.0
    d = det_curve(s, y)
    v = _hull_vertices(d)
    pf, pm = d.p_fa[v], d.p_miss[v]
    order = np.lexsort((-pm, pf))
    pf, pm = pf[order], pm[order]
    k = np.flatnonzero(pm - pf <= 0)[0]
    t = (pm[k - 1] - pf[k - 1]) / ((pm[k - 1] - pf[k - 1]) - (pm[k] - pf[k]))
    assert eer(s, y, "rocch") == pytest.approx(pf[k - 1] + t * (pf[k] - pf[k - 1]), abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_min_cllr_against_sklearn_isotonic(seed):
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(500 + seed)
    s, y = _random_table(rng, 400, levels=None if seed % 2 else 9)
    # PAV posterior by sklearn (ties pooled), clipped away from 0/1 only where the class
    # cannot occur; LLR = logit(p) - log(N1/N0)
    p = IsotonicRegression(increasing=True).fit_transform(s, y.astype(float))
    n1, n0 = y.sum(), (1 - y).sum()
    pos_terms = [math.log2(1 + (1 - pi) / pi * n1 / n0) for pi in p[y == 1]]
    neg_terms = [0.0 if pi == 0 else math.log2(1 + pi / (1 - pi) * n0 / n1) for pi in p[y == 0]]
    ref = (np.mean(pos_terms) + np.mean(neg_terms)) / 2
    assert min_cllr(s, y) == pytest.approx(ref, rel=1e-10)
