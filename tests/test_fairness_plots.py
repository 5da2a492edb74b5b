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
