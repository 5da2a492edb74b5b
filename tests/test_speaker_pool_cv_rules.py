"""Session-7 changes of the per-speaker shape pooling CV (:mod:`scoremix.locscale.speaker_pool`)
and of the lower hull (:func:`scoremix.metrics._lower_hull`).

* Repeated operating points enter the hull once: the ROCCH EER of a speaker's counts at a
  threshold set with many thresholds between the speaker's scores equals ``sm.eer`` (before,
  both twins of a repeated point were dropped and the EER came out as 0.5).
* The CV's κ = 0 entries are the counts: each speaker's EER/minDCF at κ = (0, 0) on a training
  half equals the empirical value of that half (1e-12), so the CV's absolute error at (0, 0) is
  |counts − held-out| exactly.
* Choice rules on CV losses with a closed-form answer (``_entries``), per-speaker averaging of
  repeated halvings, and determinism under the seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.locscale.speaker_pool import (SpeakerPoolingError, _rocch_eer, _speaker_rate_parts, rates_cv_entries,
                                            speaker_pooling_rates_cv)
from scoremix.metrics import _lower_hull
from scoremix.predictive.attainable import hull_eer

from test_locscale_speaker_pool import _fit, _sim  # noqa: E402  (same simulated speakers)


def _count_rates(s: np.ndarray, y: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sp, sn = np.sort(s[y == 1]), np.sort(s[y == 0])
    return np.searchsorted(sp, tau, side="left") / sp.size, 1.0 - np.searchsorted(sn, tau, side="left") / sn.size


def test_repeated_points_enter_the_hull_once():
    rng = np.random.default_rng(0)
    s = np.r_[rng.normal(2, 1, 15), rng.normal(0, 1, 60)]
    y = np.r_[np.ones(15, int), np.zeros(60, int)]
    # thresholds: the group's scores plus 500 others (most fall between the group's scores)
    tau = np.unique(np.r_[s, rng.normal(1, 2, 500)])
    fnr, fpr = _count_rates(s, y, tau)
    want = float(sm.eer(s, y))
    assert _rocch_eer(fnr[None], fpr[None])[0] == pytest.approx(want, abs=1e-12)
    assert hull_eer(fpr, fnr)[0] == pytest.approx(want, abs=1e-12)
    # the hull of the repeated points has the vertices of the hull without repeats
    x = np.r_[1.0, fpr, 0.0][::-1]
    yy = np.r_[0.0, fnr, 1.0][::-1]
    keep = np.r_[True, (np.diff(x) != 0) | (np.diff(yy) != 0)]
    h_rep, h_one = _lower_hull(x, yy), _lower_hull(x[keep], yy[keep])
    np.testing.assert_array_equal(x[h_rep], x[keep][h_one])
    np.testing.assert_array_equal(yy[h_rep], yy[keep][h_one])
    assert h_rep.size >= 3      # not only the two end points


@pytest.fixture(scope="module")
def small():
    df = _sim(11, 10, 24, 60)
    return df, _fit(df, failure_quantile=None)


def test_cv_counts_entries_are_each_halfs_empirical_rates(small):
    """κ = (0, 0): the pooled rates are the training half's counts; their ROCCH EER and minimum
    DCF equal ``sm.eer`` / ``sm.min_dcf`` of the half."""
    df, fit = small
    data = fit._data
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    rng = np.random.default_rng(4)
    train = rng.random(spk.size) < 0.5
    parts = _speaker_rate_parts(fit, data.frame, data.score, spk, data.y, train, np.unique(spk), 256, 0.05,
                                with_speaker=True)
    assert len(parts) >= 8
    for sp, (tau, _, _, e_fnr, e_fpr, *_rest) in parts:
        m = (spk == sp) & train
        s, y = data.score[m], data.y[m]
        assert _rocch_eer(e_fnr[None], e_fpr[None])[0] == pytest.approx(float(sm.eer(s, y)), abs=1e-12)
        d = min(float(np.min(0.05 * e_fnr + 0.95 * e_fpr)), 0.05)
        assert d == pytest.approx(float(sm.min_dcf(s, y, p_target=0.05).value), abs=1e-12)


def _entries(loss_eer: np.ndarray, loss_dcf: np.ndarray, who: list) -> dict:
    return {"per": {"eer": list(loss_eer), "min_dcf": list(loss_dcf)}, "who": list(who), "split": [0] * len(who)}


def test_rules_on_known_losses(small):
    """Three κ values per class; per-speaker losses built so that the answers are known:
    (0, 0) (counts) is best by a margin far above the paired noise but inside the spread of the
    speakers' loss levels."""
    _, fit = small
    kap = (0.0, 10.0, np.inf)
    rng = np.random.default_rng(1)
    n = 30
    level = rng.uniform(0.5, 1.5, n)            # how hard each speaker is: a wide spread
    bonus = np.zeros((3, 3))
    bonus[0, 0] = -0.04                          # counts best by 4 %
    bonus[1, 1] = -0.02
    noise = rng.normal(0, 0.01, (n, 3, 3))       # small paired noise
    L = level[:, None, None] * (1.0 + bonus[None] + noise)
    ent = _entries(L, L, [f"s{i}" for i in range(n)])
    p_min = speaker_pooling_rates_cv(fit, kappas=kap, rule="min", _entries=ent)
    p_pair = speaker_pooling_rates_cv(fit, kappas=kap, rule="1se-paired", _entries=ent)
    p_1se = speaker_pooling_rates_cv(fit, kappas=kap, rule="1se", _entries=ent)
    assert p_min.kappa == {0: 0.0, 1: 0.0}
    assert p_pair.kappa == {0: 0.0, 1: 0.0}      # the gain (4 %) is > 10 paired SEs
    # the SE of the best pair's loss level (the speakers' difficulty spread) covers every pair
    loss00 = 2 * L[:, 0, 0] / L[:, 0, 0].mean()
    se_level = np.std(loss00, ddof=1) / np.sqrt(n)
    gap = 2 * L[:, 2, 2].mean() / L[:, 0, 0].mean() - loss00.mean()
    assert 0 < gap < se_level
    assert p_1se.kappa == {0: np.inf, 1: np.inf}
    # each class's relative loss is what the table reports (mean over speakers, halved)
    t = p_min.table.set_index(["kappa_negative", "kappa_positive"])
    base = L[:, 0, 0].mean()
    np.testing.assert_allclose(t.loc[(10.0, 10.0), "cv_relative"], (L[:, 1, 1] / base).mean(), rtol=1e-12)


def test_speaker_averaging_of_repeated_entries(small):
    """``se_over="speaker"``: two entries of one speaker count as one unit (the relative loss
    is the mean over speakers of their mean entry); the default counts entries."""
    _, fit = small
    kap = (0.0, np.inf)
    a = np.array([[1.0, 2.0], [2.0, 2.0]])
    b = np.array([[1.0, 4.0], [4.0, 4.0]])
    c = np.array([[1.0, 0.5], [0.5, 0.5]])
    ent = _entries([a, b, c], [a, b, c], ["s1", "s1", "s2"])
    p = speaker_pooling_rates_cv(fit, kappas=kap, rule="min", se_over="speaker", _entries=ent)
    t = p.table.set_index(["kappa_negative", "kappa_positive"])
    # per measure: base = mean over entries of the (0,0) error = 1; speaker s1 mean loss at (inf, inf)
    # = (2 + 4)/2 · 2 measures, s2 = 0.5 · 2; mean over speakers / 2 measures = (3 + 0.5)/2
    assert t.loc[(np.inf, np.inf), "cv_relative"] == pytest.approx((3.0 + 0.5) / 2, abs=1e-12)
    assert p.info["n_units"] == 2
    p_fold = speaker_pooling_rates_cv(fit, kappas=kap, rule="min", _entries=ent)     # default: over entries
    assert p_fold.info["n_units"] == 3
    assert p_fold.table.set_index(["kappa_negative", "kappa_positive"]).loc[(np.inf, np.inf), "cv_relative"] \
        == pytest.approx((2 + 4 + 0.5) / 3, abs=1e-12)
    with pytest.raises(SpeakerPoolingError, match="rule must be one of"):
        speaker_pooling_rates_cv(fit, kappas=kap, rule="best", _entries=ent)


def test_repeated_halvings_deterministic_and_nested(small):
    """The first halving of ``n_splits = 2`` is the halving of ``n_splits = 1`` (same seed), and
    the choice is a function of the seed."""
    _, fit = small
    kap = (0.0, 10.0, np.inf)
    e2 = rates_cv_entries(fit, kappas=kap, n_splits=2, seed=3)
    e1 = rates_cv_entries(fit, kappas=kap, n_splits=1, seed=3)
    first = [k for k, h in enumerate(e2["split"]) if h == 0]
    assert [e2["who"][k] for k in first] == e1["who"]
    for m in ("eer", "min_dcf"):
        np.testing.assert_allclose(np.asarray(e2["per"][m])[first], np.asarray(e1["per"][m]), rtol=0, atol=1e-12)
    assert set(e2["split"]) == {0, 1}
    p = speaker_pooling_rates_cv(fit, kappas=kap, n_splits=2, seed=3)
    q = speaker_pooling_rates_cv(fit, kappas=kap, _entries=e2)
    assert p.kappa == q.kappa
    pd.testing.assert_frame_equal(p.table, q.table)


def test_three_part_cv_holds_out_two_thirds(small):
    """s8speaker, ``n_parts = 3`` (default 2): every speaker × stratum cell is dealt into three parts;
    each entry refits on one part and holds out the other two.  At κ = (0, 0) the entry's
    absolute EER error is |sm.eer(training third) − sm.eer(other two thirds)| (1e-12), and every
    speaker has three entries per deal."""
    from scoremix.locscale.speaker_pool import RATES_CV_PARTS, _part_split

    assert RATES_CV_PARTS == 2
    _, fit = small
    data = fit._data
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    cell = pd.MultiIndex.from_arrays([spk, data.core_key]).factorize()[0]
    kap = (0.0, np.inf)
    ent = rates_cv_entries(fit, kappas=kap, n_splits=1, seed=5, n_parts=3)
    part = _part_split(cell, np.random.default_rng(5), 3)
    # cells dealt into nearly equal thirds
    sizes = pd.crosstab(cell, part).to_numpy()
    assert (sizes.max(axis=1) - sizes.min(axis=1) <= 1).all()
    who = pd.Series(ent["who"])
    assert set(who.value_counts()) == {3}
    k = 0
    for p_ in range(3):
        train = part == p_
        for sp in np.unique(spk):
            m = spk == sp
            tr, te = m & train, m & ~train
            if not (data.y[tr].any() and (~data.y[tr].astype(bool)).any() and data.y[te].any()
                    and (~data.y[te].astype(bool)).any()):
                continue
            assert ent["who"][k] == sp
            want = abs(float(sm.eer(data.score[tr], data.y[tr])) - float(sm.eer(data.score[te], data.y[te])))
            assert ent["per"]["eer"][k][0, 0] == pytest.approx(want, abs=1e-12)
            k += 1
    assert k == len(ent["who"])
    with pytest.raises(SpeakerPoolingError, match="n_parts"):
        speaker_pooling_rates_cv(fit, kappas=kap, n_parts=1, _entries=ent)
