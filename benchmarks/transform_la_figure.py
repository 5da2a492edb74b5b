"""Figure and tables of the LA comparison page (docs/transform-la.md).

Reads ``docs/data/transform_la.csv`` and ``docs/data/transform_la_attack.csv`` (written by
``benchmarks/transform_la.py``: columns ``system, eer_empirical, eer_transform, eer_gaussian,
relerr_transform, relerr_gaussian, …`` and per attack ``system, attack, eer_empirical,
eer_transform, eer_gaussian, relerr_*``) and, when present, ``docs/data/transform_la_gof.csv``
(``benchmarks/transform_la_gof.py``: the speaker-bootstrap interval and ``fit_ok``), and writes
``docs/img/transform_la.png`` (model vs empirical EER, log axes: Gaussian vs transformation
model, overall and per attack) plus the Markdown tables printed to stdout.

Usage::

    PYTHONPATH=src python3 benchmarks/transform_la_figure.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs"


def figure(tab: pd.DataFrame, att: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.8))
    for ax, d, title in ((axes[0], tab, "overall (10 systems)"), (axes[1], att, f"per attack ({len(att)} cells)")):
        e = 100 * d["eer_empirical"].to_numpy()
        for col, mk, lab in (("eer_gaussian", "o", "Gaussian LMM"), ("eer_transform", "s", 'transform="monotone"')):
            if col in d.columns and d[col].notna().any():
                ax.scatter(e, 100 * d[col].to_numpy(), marker=mk, s=22 if len(d) > 20 else 40, alpha=0.75,
                           label=f"{lab} (median rel. error {100 * np.nanmedian(d[col.replace('eer', 'relerr')]):.0f} %)")
        pos = e[e > 0]
        lo, hi = max(pos.min() / 3, 1e-3), max(e.max() * 3, 1.0)
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=1)
        ax.fill_between([lo, hi], [lo / 1.15, hi / 1.15], [lo * 1.15, hi * 1.15], color="0.85", lw=0,
                        label="±15 %")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo / 10, hi * 10)
        ax.set_xlabel("empirical EER (%, ROCCH)")
        ax.set_ylabel("model EER (%, conditional)")
        ax.set_title(title)
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def markdown(tab: pd.DataFrame, gof: pd.DataFrame | None) -> str:
    lines = ["| system | empirical EER % | Gaussian % | rel. err. | transformed % | rel. err. |"
             + (" 95 % interval (speaker bootstrap) | Gaussian fits | transformed fits |" if gof is not None else ""),
             "|---|---|---|---|---|---|" + ("---|---|---|" if gof is not None else "")]
    for _, r in tab.iterrows():
        row = (f"| {r['system']} | {100 * r['eer_empirical']:.3f} | {100 * r['eer_gaussian']:.3f} | "
               f"{100 * r['relerr_gaussian']:.0f} % | {100 * r['eer_transform']:.3f} | "
               f"{100 * r['relerr_transform']:.1f} % |")
        if gof is not None:
            g = gof[gof["system"] == r["system"]].set_index("model")
            if len(g):
                row += (f" [{100 * g['eer_empirical_lo'].iloc[0]:.3f}, {100 * g['eer_empirical_hi'].iloc[0]:.3f}] | "
                        f"{'yes' if bool(g.loc['gaussian', 'fit_ok']) else '**no**'} | "
                        f"{'yes' if bool(g.loc['transform', 'fit_ok']) else '**no**'} |")
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    data = DOCS / "data"
    tab = pd.read_csv(data / "transform_la.csv")
    att = pd.read_csv(data / "transform_la_attack.csv")
    gof_path = data / "transform_la_gof.csv"
    gof = pd.read_csv(gof_path) if gof_path.exists() else None
    figure(tab, att, DOCS / "img" / "transform_la.png")
    print(markdown(tab, gof))
    print()
    for d, name in ((tab, "overall"), (att, "per attack")):
        print(f"{name}: median relative error Gaussian {100 * d['relerr_gaussian'].median():.1f} % "
              f"(max {100 * d['relerr_gaussian'].max():.0f} %), transformed {100 * d['relerr_transform'].median():.1f} % "
              f"(max {100 * d['relerr_transform'].max():.1f} %)")


if __name__ == "__main__":
    main()
