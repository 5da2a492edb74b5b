r"""Tandem ASV + countermeasure metrics with speaker-cluster bootstrap intervals.

* :func:`tdcf` — normalised minimum t-DCF (ASVspoof 2019; 2021 revision), the ASV fixed at its
  EER threshold as the official ``evaluate_tDCF_asvspoof19.py`` / ``eval_metrics.py`` fix it;
* :func:`adcf` — minimum normalised a-DCF of one spoofing-aware (SASV) score (ASVspoof 5);
* :func:`teer` — concurrent tandem EER of an ASV and a CM score per trial (ASVspoof 5);
* :func:`sasv_eer` — SASV-EER, SV-EER and SPF-EER of one score (SASV 2022);
* :func:`cascade_scores` — the one score of a cascade: the CM score where the ASV accepts.

Intervals (``n_boot > 0``): speakers are drawn with replacement (the same draw for the ASV and
the CM trials of a speaker); a replicate repeats every trial of a speaker as often as the speaker
was drawn and recomputes the metric *including* the ASV threshold.  Minima over thresholds (min
t-DCF, a-DCF) get the expanded percentile interval shifted by twice the bootstrap bias
(``"shift-t"``), the EERs the expanded percentile interval (Hesterberg 2015), both from
:mod:`scoremix.resampling.intervals`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scoremix.tandem import kernels as K
from scoremix.tandem.costs import (
    ADCF_COST_MODELS,
    TDCF_COST_MODELS,
    TandemCostModel,
    resolve_cost_model,
)
from scoremix.tandem.errors import TandemInputError
from scoremix.tandem.result import SasvEER, TandemEstimate

__all__ = [
    "TandemInputError",
    "adcf",
    "asv_keys_codes",
    "cascade_scores",
    "cm_keys_codes",
    "sasv_eer",
    "tdcf",
    "teer",
]


_ASV_VOCAB = {"target": 0, "tar": 0, "nontarget": 1, "nontar": 1, "spoof": 2, "spoofed": 2}
_CM_VOCAB = {"bonafide": 0, "genuine": 0, "real": 0, "spoof": 1, "spoofed": 1, "fake": 1}


def _norm(v: Any) -> str:
    return str(v).lower().replace(" ", "").replace("-", "").replace("_", "")


def _codes(keys: Any, vocab: dict[str, int], name: str, need: Sequence[int], n: int) -> np.ndarray:
    import pandas as pd

    raw = pd.Series(np.asarray(keys, dtype=object).ravel())
    if raw.shape[0] != n:
        raise TandemInputError(f"{name} has {raw.shape[0]} values but the scores have {n}")
    uniq = raw.unique()
    mapping = {}
    for u in uniq:
        c = vocab.get(_norm(u))
        if c is None:
            row = int(np.flatnonzero((raw == u).to_numpy())[0])
            raise TandemInputError(f"{name} has the value {u!r} at row {row}; expected one of "
                                   f"{list(dict.fromkeys(k for k in vocab))}")
        mapping[u] = c
    codes = raw.map(mapping).to_numpy(np.int64)
    names = {v: k for k, v in reversed(list(vocab.items()))}  # the first spelling of each code
    for c in need:
        if not np.any(codes == c):
            raise TandemInputError(f"{name} has no {names[c]!r} trial; the metric needs all of "
                                   f"{[names[x] for x in need]}")
    return codes


def asv_keys_codes(keys: Any, n: int, name: str = "asv_keys") -> np.ndarray:
    """``target``/``nontarget``/``spoof`` keys as codes 0/1/2 (spellings as :func:`scoremix.label_to_binary`)."""
    return _codes(keys, _ASV_VOCAB, name, (0, 1, 2), n)


def cm_keys_codes(keys: Any, n: int, name: str = "cm_keys") -> np.ndarray:
    """``bonafide``/``spoof`` keys as codes 0/1."""
    return _codes(keys, _CM_VOCAB, name, (0, 1), n)


def _scores(x: Any, name: str) -> np.ndarray:
    try:
        s = np.asarray(x, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise TandemInputError(f"{name} must be numbers (one score per trial)") from None
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        raise TandemInputError(f"{name} has a non-finite score ({s[bad[0]]}) at row {int(bad[0])}")
    return s


# ----------------------------------------------------------------------------- bootstrap
def _cluster_codes(speakers: Sequence[Any], sizes: Sequence[int]) -> tuple[list[np.ndarray], int]:
    """One cluster code per trial of every table; speakers with equal names share a code;
    ``None`` for a table makes each of its trials its own cluster."""
    names: list[np.ndarray] = []
    for t, (spk, n) in enumerate(zip(speakers, sizes)):
        if spk is None:
            names.append(np.array([f"\0trial{t}:{i}" for i in range(n)], dtype=object))
            continue
        a = np.asarray(spk, dtype=object).ravel()
        if a.shape[0] != n:
            raise TandemInputError(f"speaker column {t} has {a.shape[0]} values but its scores have {n}")
        miss = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in a])
        if miss.any():
            raise TandemInputError(f"speaker column {t} is missing at row(s) {np.flatnonzero(miss)[:5].tolist()}")
        names.append(a.astype(str))
    uniq, inv = np.unique(np.concatenate(names), return_inverse=True)
    out, start = [], 0
    for n in sizes:
        out.append(inv[start:start + n])
        start += n
    return out, int(uniq.size)


def bootstrap_interval(point: float, stat: Callable[[list[np.ndarray]], float], clusters: list[np.ndarray],
                       n_clusters: int, n_boot: int, seed: Any, level: float, minimum: bool
                       ) -> tuple[float, float, np.ndarray, str]:
    """Speaker-cluster bootstrap of ``stat(trial weights per table)``; ``(lo, hi, replicates, method)``."""
    from scoremix.resampling.bootstrap import draw_cluster_weights
    from scoremix.resampling.intervals import (
        expanded_percentile_interval,
        shift_t_interval,
    )

    if int(n_boot) < 2:
        raise TandemInputError(f"n_boot must be >= 2 for an interval, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise TandemInputError(f"level must be in (0, 1), got {level}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    M = draw_cluster_weights(np.zeros(n_clusters, np.int64), int(n_boot), rng).astype(np.int64)
    reps = np.empty(int(n_boot))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for b in range(int(n_boot)):
            try:
                reps[b] = stat([M[cl, b] for cl in clusters])
            except (ValueError, IndexError, ZeroDivisionError):
                reps[b] = np.nan  # a replicate without a class
    nn = np.array([float(n_clusters)])
    if minimum:
        lo, hi = shift_t_interval(np.array([point]), reps[None, :], nn, level)
        return max(float(lo[0]), 0.0), float(hi[0]), reps, "shift-t"
    lo, hi = expanded_percentile_interval(reps[None, :], nn, level)
    return float(lo[0]), float(hi[0]), reps, "expanded"


def _est(value: float, metric: str, boot: tuple | None, n_clusters: int, level: float, n_boot: int,
         **kw: Any) -> TandemEstimate:
    if boot is None:
        return TandemEstimate(value, metric=metric, level=level, **kw)
    lo, hi, reps, method = boot
    return TandemEstimate(value, lo, hi, level, n_boot, n_clusters, method, metric=metric, replicates=reps, **kw)


# ----------------------------------------------------------------------------- t-DCF
def _tdcf_point(asv: K.SortedTrials, cm: K.SortedTrials, cm_model: TandemCostModel) -> tuple[float, dict]:
    tn_mask = asv.cls < 2
    tn = K.SortedTrials(asv.s[tn_mask], asv.cls[tn_mask], 2)
    eer_asv, thr, _ = K.asv_eer_threshold(tn)
    pfa, pmiss, pmiss_spf, pfa_spf = K.asv_rates(asv.s, asv.cls, thr)
    curve, c0, c1, c2 = K.tdcf_curve(cm, pfa, pmiss, pmiss_spf, pfa_spf, cm_model.p_tar, cm_model.p_non,
                                     cm_model.p_spoof, cm_model.c_miss, cm_model.c_fa, cm_model.c_fa_spoof,
                                     cm_model.c_miss_cm, cm_model.revision)
    if min(c0, c1, c2) < 0:
        raise TandemInputError(f"t-DCF weights C0={c0}, C1={c1}, C2={c2} are negative: the ASV error rates "
                               "at its EER threshold are not those of a working ASV (check the keys and direction)")
    k = int(np.argmin(curve))
    return float(curve[k]), {"eer_asv": eer_asv, "asv_threshold": thr, "pfa_asv": pfa, "pmiss_asv": pmiss,
                             "pmiss_spoof_asv": pmiss_spf, "pfa_spoof_asv": pfa_spf, "C0": c0, "C1": c1,
                             "C2": c2, "cm_position": k, "cm_script_threshold": float(cm.thresholds()[k])}


def tdcf(asv_scores: Any, asv_keys: Any, cm_scores: Any, cm_keys: Any, cost_model: str | TandemCostModel = "asvspoof2019",
         *, asv_speaker: Any = None, cm_speaker: Any = None, n_boot: int = 0,
         seed: int | np.random.Generator | None = None, level: float = 0.95) -> TandemEstimate:
    r"""Normalised minimum tandem detection cost function (t-DCF) of a countermeasure in tandem with an ASV.

    The ASV threshold :math:`τ_\text{asv}` is placed as the official ASVspoof 2019 scripts place
    it: ``compute_eer`` on the target and nontarget ASV scores (stable sort, targets first among
    ties, first :math:`\arg\min |P_\text{miss} − P_\text{fa}|` over rejected positions), and the
    resulting score is applied as accept :math:`s_\text{asv} ≥ τ_\text{asv}` to give
    :math:`P^\text{asv}_\text{fa}, P^\text{asv}_\text{miss}, P^\text{asv}_\text{miss,spoof}`.
    Then (``cost_model="asvspoof2019"``, Kinnunen et al. 2018)

    .. math::

        \text{t-DCF}_\text{norm}(τ) = \frac{C_1 P^\text{cm}_\text{miss}(τ) + C_2 P^\text{cm}_\text{fa}(τ)}{\min(C_1, C_2)},

    or the 2021 revision (``"asvspoof2021"``, Kinnunen et al. 2020) with the constant
    :math:`C_0` of the ASV's own errors; see :func:`scoremix.tandem.kernels.tdcf_curve`.  The
    minimum over all CM thresholds is returned.

    Parameters
    ----------
    asv_scores, asv_keys
        ASV scores (higher = same speaker) and keys ``target``/``nontarget``/``spoof``.
    cm_scores, cm_keys
        CM scores (higher = bona fide) and keys ``bonafide``/``spoof``.
    cost_model
        ``"asvspoof2019"``, ``"asvspoof2021"`` or a :class:`~scoremix.tandem.costs.TandemCostModel`.
    asv_speaker, cm_speaker, n_boot, seed, level
        with ``n_boot > 0``: a speaker-cluster bootstrap interval (claimed speaker of each ASV
        trial, speaker of each CM trial; equal names are one cluster).

    Returns
    -------
    TandemEstimate
        the min t-DCF; ``threshold``: the CM threshold (accept :math:`s_\text{cm} ≥ τ`),
        ``asv_threshold``, and ``details`` (ASV rates, :math:`C_0, C_1, C_2`).

    Examples
    --------
    >>> import numpy as np, scoremix as sm
    >>> asv = np.array([3., 2.5, 2., -1., -2., 1.5, 2.2, 1.0])
    >>> akeys = ["target"] * 3 + ["nontarget"] * 3 + ["spoof"] * 2
    >>> cm = np.array([2., 1., 0.5, -1., -2., 0.8])
    >>> ckeys = ["bonafide"] * 3 + ["spoof"] * 3
    >>> round(float(sm.tdcf(asv, akeys, cm, ckeys)), 6)
    0.333333
    """
    model = resolve_cost_model(cost_model, TDCF_COST_MODELS)
    sa, sc = _scores(asv_scores, "asv_scores"), _scores(cm_scores, "cm_scores")
    ka = asv_keys_codes(asv_keys, sa.shape[0])
    kc = cm_keys_codes(cm_keys, sc.shape[0])
    oa = _order(sa, ka, 3)
    oc = _order(sc, kc, 2)
    asv, cm = K.SortedTrials(sa[oa], ka[oa], 3), K.SortedTrials(sc[oc], kc[oc], 2)
    value, det = _tdcf_point(asv, cm, model)
    det["cost_model"] = model.name
    boot, C = None, 0
    if n_boot:
        (cla, clc), C = _cluster_codes([asv_speaker, cm_speaker], [sa.shape[0], sc.shape[0]])
        cla, clc = cla[oa], clc[oc]
        boot = bootstrap_interval(value, lambda w: _tdcf_point(asv.repeat(w[0]), cm.repeat(w[1]), model)[0],
                                  [cla, clc], C, n_boot, seed, level, minimum=True)
    elif asv_speaker is not None or cm_speaker is not None:
        raise TandemInputError("asv_speaker= / cm_speaker= are only used with n_boot > 0")
    thr = K.accept_threshold(det["cm_script_threshold"], det["cm_position"])
    return _est(value, f"min_tdcf_{model.name}", boot, C, level, n_boot, threshold=thr,
                asv_threshold=det["asv_threshold"], details=det)


def _order(s: np.ndarray, codes: np.ndarray, n_classes: int) -> np.ndarray:
    perm = np.concatenate([np.flatnonzero(codes == c) for c in range(n_classes)])
    return perm[np.argsort(s[perm], kind="stable")]


# ----------------------------------------------------------------------------- a-DCF
def adcf(scores: Any, keys: Any, cost_model: str | TandemCostModel = "asvspoof5", *, speaker: Any = None,
         n_boot: int = 0, seed: int | np.random.Generator | None = None, level: float = 0.95) -> TandemEstimate:
    r"""Minimum normalised architecture-agnostic DCF (a-DCF, Shim et al. 2024; ASVspoof 5) of one
    spoofing-aware score per trial (``keys`` ``target``/``nontarget``/``spoof``):

    .. math::

        \text{a-DCF}(τ) = \frac{C_\text{miss}π_\text{tar}P_\text{miss}(τ) + C_\text{fa,non}π_\text{non}
        P_\text{fa,non}(τ) + C_\text{fa,spoof}π_\text{spoof}P_\text{fa,spoof}(τ)}
        {\min(C_\text{fa,non}π_\text{non} + C_\text{fa,spoof}π_\text{spoof},\ C_\text{miss}π_\text{tar})},

    minimised over all thresholds (the ASVspoof 5 ``a_dcf.py`` positions).  For a tandem of an ASV
    and a CM pass :func:`cascade_scores`.  ``threshold``: accept :math:`s ≥ τ`.

    Examples
    --------
    >>> import scoremix as sm
    >>> round(float(sm.adcf([3., 2., 1., -1., 0.5, -2.], ["target"] * 3 + ["nontarget", "spoof", "spoof"])), 6)
    0.0
    """
    model = resolve_cost_model(cost_model, ADCF_COST_MODELS)
    s = _scores(scores, "scores")
    k = asv_keys_codes(keys, s.shape[0], "keys")
    o = _order(s, k, 3)
    t = K.SortedTrials(s[o], k[o], 3)

    def point(tt: K.SortedTrials) -> tuple[float, float, int]:
        return K.min_adcf(tt, model.p_tar, model.p_non, model.p_spoof, model.c_miss, model.c_fa, model.c_fa_spoof)

    value, sthr, j = point(t)
    boot, C = _maybe_boot(value, lambda w: point(t.repeat(w[0]))[0], speaker, s.shape[0], o, n_boot, seed, level,
                          minimum=True)
    return _est(value, f"min_adcf_{model.name}", boot, C, level, n_boot, threshold=K.accept_threshold(sthr, j),
                details={"cost_model": model.name, "script_threshold": sthr, "position": j})


def _maybe_boot(value: float, stat: Callable, speaker: Any, n: int, order: np.ndarray, n_boot: int, seed: Any,
                level: float, minimum: bool) -> tuple[tuple | None, int]:
    if not n_boot:
        if speaker is not None:
            raise TandemInputError("speaker= is only used with n_boot > 0")
        return None, 0
    (cl,), C = _cluster_codes([speaker], [n])
    return bootstrap_interval(value, stat, [cl[order]], C, n_boot, seed, level, minimum), C


# ----------------------------------------------------------------------------- t-EER
def teer(asv_scores: Any, cm_scores: Any, keys: Any, *, speaker: Any = None, n_boot: int = 0,
         seed: int | np.random.Generator | None = None, level: float = 0.95) -> TandemEstimate:
    r"""Concurrent tandem equal error rate (t-EER; Kinnunen et al. 2023, IEEE TPAMI; ASVspoof 5) of an
    ASV and a CM that both score every trial (``keys`` ``target``/``nontarget``/``spoof``).

    The t-EER is the error rate at the pair of thresholds where the tandem miss rate, the tandem
    false-acceptance rate of nontargets and that of spoofs coincide; it is located as the ASVspoof 5
    evaluation package locates it (:func:`scoremix.tandem.kernels.teer_concurrent`), with the
    countermeasure treating targets and nontargets as bona fide.  ``threshold``: the CM threshold,
    ``asv_threshold``: the ASV threshold (both accept :math:`s ≥ τ`).  A fraction, not a percentage.
    """
    sa, sc = _scores(asv_scores, "asv_scores"), _scores(cm_scores, "cm_scores")
    if sa.shape[0] != sc.shape[0]:
        raise TandemInputError(f"asv_scores has {sa.shape[0]} values but cm_scores has {sc.shape[0]} "
                               "(join the CM scores to the ASV trials first, e.g. on the utterance id)")
    k = asv_keys_codes(keys, sa.shape[0], "keys")
    oa = _order(sa, k, 3)
    kc = (k == 2).astype(np.int64)
    oc = _order(sc, kc, 2)
    asv, cm = K.SortedTrials(sa[oa], k[oa], 3), K.SortedTrials(sc[oc], kc[oc], 2)
    value, a, c = K.teer_concurrent(asv, cm)
    thr_a = K.accept_threshold(asv.thresholds()[a], a) if a >= 0 else np.nan
    thr_c = K.accept_threshold(cm.thresholds()[c], c) if c >= 0 else np.nan
    boot, C = None, 0
    if n_boot:
        (cl,), C = _cluster_codes([speaker], [sa.shape[0]])
        cla, clc = cl[oa], cl[oc]
        boot = bootstrap_interval(value, lambda w: K.teer_concurrent(asv.repeat(w[0]), cm.repeat(w[1]))[0],
                                  [cla, clc], C, n_boot, seed, level, minimum=False)
    elif speaker is not None:
        raise TandemInputError("speaker= is only used with n_boot > 0")
    return _est(value, "teer", boot, C, level, n_boot, threshold=thr_c, asv_threshold=thr_a,
                details={"asv_position": a, "cm_position": c})


# ----------------------------------------------------------------------------- SASV EERs
def sasv_eer(scores: Any, keys: Any, *, speaker: Any = None, n_boot: int = 0,
             seed: int | np.random.Generator | None = None, level: float = 0.95) -> SasvEER:
    r"""SASV-EER, SV-EER and SPF-EER of the SASV 2022 challenge (Jung et al. 2022) for one score per trial.

    Each is the point where the linearly interpolated ROC meets :math:`P_\text{miss} = P_\text{fa}`
    (the challenge's ``roc_curve`` + ``brentq`` recipe): targets against nontargets and spoofs
    (SASV), against nontargets (SV) and against spoofs (SPF).  The three intervals come from the
    same speaker draws.
    """
    s = _scores(scores, "scores")
    k = asv_keys_codes(keys, s.shape[0], "keys")
    subsets = {"sasv_eer": np.ones(s.shape[0], bool), "sv_eer": k < 2, "spf_eer": k != 1}
    out = {}
    C = 0
    cl = None
    if n_boot:
        (cl,), C = _cluster_codes([speaker], [s.shape[0]])
    elif speaker is not None:
        raise TandemInputError("speaker= is only used with n_boot > 0")
    if isinstance(seed, np.random.Generator):  # one int seed: the three EERs share their speaker draws
        seed = int(seed.integers(2 ** 63))
    for name, m in subsets.items():
        ss, pos = s[m], k[m] == 0
        value = K.interp_eer(ss, pos)
        boot = None
        if n_boot:
            boot = bootstrap_interval(value, lambda w, ss=ss, pos=pos: K.interp_eer(ss, pos, w[0]), [cl[m]], C,
                                      n_boot, seed, level, minimum=False)
        out[name] = _est(value, name, boot, C, level, n_boot)
    return SasvEER(out["sasv_eer"], out["sv_eer"], out["spf_eer"])


def cascade_scores(asv_scores: Any, cm_scores: Any, keys: Any, *, asv_threshold: float | None = None) -> np.ndarray:
    r"""One score per trial for a cascade (tandem) ASV → CM system: the CM score where the ASV
    accepts (:math:`s_\text{asv} ≥ τ_\text{asv}`) and :math:`\min s_\text{cm} − 1` where it rejects,
    so that every threshold on it is a tandem decision at a fixed ASV operating point.
    ``asv_threshold=None`` places it at the ASV EER as :func:`tdcf` does."""
    sa, sc = _scores(asv_scores, "asv_scores"), _scores(cm_scores, "cm_scores")
    if sa.shape[0] != sc.shape[0]:
        raise TandemInputError(f"asv_scores has {sa.shape[0]} values but cm_scores has {sc.shape[0]}")
    k = asv_keys_codes(keys, sa.shape[0], "keys")
    if asv_threshold is None:
        m = k < 2
        o = _order(sa[m], k[m], 2)
        _, asv_threshold, _ = K.asv_eer_threshold(K.SortedTrials(sa[m][o], k[m][o], 2))
    return np.where(sa >= asv_threshold, sc, sc.min() - 1.0)
