"""Default intervals that cannot be right (issue 24, item 4).

* interval ends never exceed what the measure can take: ``ratio_overall = C_g(τ*)/minDCF``
  is at most ``(a + b)/minDCF`` (``C_g(τ*) ≤ a·1 + b·1``), ``fpr_ratio ≤ 1/fpr_overall``,
  ``fnr_ratio ≤ 1/fnr_overall``;
* the reliability flag counts the errors of *each* class: a subgroup whose positives are too
  few to have :data:`~scoremix.fairness.reliability.MIN_CLASS_ERRORS` misses is not reliable,
  whatever its false alarms;
* a subgroup EER interval is not stretched to the ½ cap by replicates whose studentisation
  broke down (a zero standard error): it stays within the range the replicates reach;
* ``eer(n_boot=1 or 2)`` is refused by name (each tail of a 95 % interval needs a replicate).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.fairness import subgroup_dcf
MIN_CLASS_ERRORS = 10  # scoremix.fairness.reliability.MIN_CLASS_ERRORS


def _table(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    # A, B: large; C: 8 speakers with one positive trial each (8 positives), 480 negatives
    for g, nspk, npos, nneg in (("A", 60, 20, 20), ("B", 30, 20, 20), ("C", 8, 1, 60)):
        for s in range(nspk):
            b = rng.normal(0, 0.5)
            rows += [(g, f"{g}{s}", 1, 3.0 + b + rng.normal()) for _ in range(npos)]
            rows += [(g, f"{g}{s}", 0, b + rng.normal() + 0.0) for _ in range(nneg)]
    return pd.DataFrame(rows, columns=["grp", "speaker", "label", "score"])


@pytest.fixture(scope="module")
def result():
    # p_target = 0.5: τ* near the middle, so that both kinds of errors are plentiful overall
    return subgroup_dcf(_table(), ["grp"], n_boot=200, random_state=0, progress=False, p_target=0.5)


def test_ratio_ends_within_the_measures_maximum(result) -> None:
    t = result.table
    a, b = 0.5 * 1.0, 0.5 * 1.0  # p_target·c_miss, (1 − p_target)·c_fa (unnormalised)
    cap = (a + b) / result.min_dcf
    assert (t["ratio_overall_hi"].dropna() <= cap * (1 + 1e-12)).all(), t["ratio_overall_hi"].tolist()
    assert (t["fpr_ratio_hi"].dropna() <= 1 / result.overall["fpr"] * (1 + 1e-12)).all()
    assert (t["fnr_ratio_hi"].dropna() <= 1 / result.overall["fnr"] * (1 + 1e-12)).all()


def test_few_positives_are_not_reliable_even_with_many_false_alarms(result) -> None:
    c = result.table.set_index("subgroup").loc["C"]
    assert c["n_pos"] == 8 and c["n_errors"] >= 30  # the old rule (30 errors in all) passed it
    assert not c["reliable"]
    assert "misses" in c["note"] and str(MIN_CLASS_ERRORS) in c["note"]


def test_data_summary_rule_and_table_rule_agree_on_class_errors() -> None:
    from scoremix.fairness.reliability import flag_rows

    ok, notes = flag_rows(np.array([60, 60]), np.array([40, 40]), np.array([4, 500]), np.array([900, 900]),
                          n_miss=np.array([4, 20]), n_fa=np.array([36, 20]))
    assert list(ok) == [False, True]
    assert "4 misses" in notes[0]


def test_subgroup_eer_interval_within_replicate_range() -> None:
    # few bona fide trials per subgroup (the issue: 35–83) with a low EER: the studentised upper
    # end hit the ½ cap while every replicate stayed below 5 %
    rng = np.random.default_rng(7)
    rows = []
    for g, nspk in (("A", 40), ("B", 12)):
        for s in range(nspk):
            rows += [(g, f"{g}{s}", 1, 4.0 + rng.normal()) for _ in range(4)]
            rows += [(g, f"{g}{s}", 0, rng.normal()) for _ in range(40)]
    df = pd.DataFrame(rows, columns=["grp", "speaker", "label", "score"])
    res = subgroup_dcf(df, ["grp"], n_boot=300, random_state=1, progress=False)
    reps = res.replicates["eer"]
    for i, row in res.table.reset_index(drop=True).iterrows():
        r = reps[i][np.isfinite(reps[i])]
        assert row["eer_lo"] <= row["eer"] <= row["eer_hi"]
        # within the replicates' range widened by the expanded-percentile levels: never the ½ cap
        assert row["eer_hi"] < 0.5 and row["eer_hi"] <= 2 * r.max() + 1e-12, (row["eer_hi"], r.max())


@pytest.mark.parametrize("n_boot", [1, 2, 39])
def test_eer_refuses_too_few_replicates(n_boot: int) -> None:
    df = _table()
    with pytest.raises(sm.metrics.BootstrapSizeError, match=r"n_boot=\d+ .*at least 40"):
        sm.eer(df.score, df.label, n_boot=n_boot, speaker=df.speaker, seed=0)


def test_eer_interval_with_enough_replicates_contains_the_estimate() -> None:
    df = _table()
    e = sm.eer(df.score, df.label, n_boot=40, speaker=df.speaker, seed=0)
    assert e.lo <= float(e) <= e.hi
