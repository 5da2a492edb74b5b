"""Plots return Figures and mark unreliable subgroups."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from scoremix.fairness import compare_subgroup_dcf, subgroup_dcf  # noqa: E402
from scoremix.fairness.plots import plot_ratio_scatter  # noqa: E402


@pytest.fixture(scope="module")
def result():
    rng = np.random.default_rng(0)
    n = 1500
    spk = rng.integers(0, 30, n)
    y = rng.random(n) < 0.4
    df = pd.DataFrame({"speaker": spk, "sex": np.array(["f", "m"])[spk % 2], "nat": np.array(["a", "b", "c"])[spk % 3],
                       "label": y.astype(int), "score": rng.normal(0, 1, n) + 2 * y})
    df2 = pd.concat([df.assign(system="A"), df.assign(system="B", score=df.score + rng.normal(0, .3, n))])
    return (subgroup_dcf(df, ["sex", "nat"], n_boot=30, random_state=0, progress=False),
            compare_subgroup_dcf(df2, ["sex"], n_boot=30, random_state=0, progress=False))


def test_det_plot(result):
    res, _ = result
    fig = res.plot_det()
    assert isinstance(fig, Figure)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "overall" in labels
    unreliable = res.table.loc[~res.table["reliable"], "subgroup"]
    assert all(any(u in lab and "unreliable" in lab for lab in labels) for u in unreliable)


def test_other_plots(result):
    res, cmp = result
    assert isinstance(res.plot_scores(), Figure)
    fig = res.plot_forest("ratio_overall")
    assert isinstance(fig, Figure)
    assert len(fig.axes[0].get_yticklabels()) == len(res.table)
    assert isinstance(plot_ratio_scatter(cmp), Figure)
    assert isinstance(plot_ratio_scatter((res.table, res.table), names=("x", "y")), Figure)


def test_det_bootstrap_band_one_replicate_matches_brute_force():
    from scipy.stats import norm

    from scoremix.resampling.bootstrap import draw_cluster_weights
    from scoremix.fairness.plots import det_bootstrap_band

    rng = np.random.default_rng(3)
    n = 400
    spk = rng.integers(0, 12, n)
    y = rng.random(n) < 0.4
    s = np.round(rng.normal(0, 1, n) + 2 * y + 0.3 * (spk % 3), 1)  # ties
    xs = np.linspace(-2.5, 1.5, 41)
    lo, hi = det_bootstrap_band(s, y, spk, xs, n_boot=1, random_state=7, n_thresholds=10_000)
    np.testing.assert_array_equal(lo, hi)
    # the same replicate by brute force: repeat every trial by its speaker's multiplicity
    m = draw_cluster_weights(np.zeros(12, dtype=np.int64), 1, np.random.default_rng(7))[:, 0]
    w = m[np.unique(spk, return_inverse=True)[1]].astype(int)
    sr, yr = np.repeat(s, w), np.repeat(y, w)
    thr = np.r_[np.unique(s), np.inf]
    pm = np.array([(sr[yr] < t).mean() for t in thr])
    pf = np.array([(sr[~yr] >= t).mean() for t in thr])
    clip = lambda p: norm.ppf(np.clip(p, 1e-5, 1 - 1e-5))  # noqa: E731
    expect = np.interp(xs, clip(pf)[::-1], clip(pm)[::-1])
    np.testing.assert_allclose(lo, expect, atol=1e-9)


def test_det_plot_with_bands(result):
    from matplotlib.collections import PolyCollection

    res, _ = result
    fig = res.plot_det(bands=True, n_boot=50, random_state=1)
    n_bands = sum(isinstance(c, PolyCollection) for c in fig.axes[0].collections)
    assert n_bands == int(((res.table["n_pos"] > 0) & (res.table["n_neg"] > 0)).sum())


def test_intervals_that_exclude_the_point_are_drawn_as_segments():
    """A percentile/credible interval need not contain the point estimate (here subgroup a:
    point 1.2, interval [1.3, 1.5]); the plots draw the interval ends as given."""
    import pandas as pd
    from scoremix.fairness.plots import plot_forest, plot_ratio_scatter

    t = pd.DataFrame({"subgroup": ["a", "b"], "ratio_overall": [1.2, 0.8],
                      "ratio_overall_lo": [1.3, 0.5], "ratio_overall_hi": [1.5, 0.9],
                      "reliable": [True, False]})
    fig = plot_forest(t)
    segs = fig.axes[0].collections[0].get_segments()
    assert [tuple(s[:, 0]) for s in segs] == [(1.3, 1.5), (0.5, 0.9)]
    fig2 = plot_ratio_scatter((t, t))
    ends = sorted(tuple(s[:, 0]) for s in fig2.axes[0].collections[0].get_segments())
    assert ends == [(0.5, 0.9), (1.3, 1.5)]
