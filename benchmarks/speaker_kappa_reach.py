"""How far speaker pooling can take ``score_model`` on issue 19's per-speaker line, from the
κ surfaces of every split (issue 19, session 9).

``score_model``'s per-speaker distribution blends the speaker's own counts with the model,
weight :math:`n/(n+\\kappa_c)` per class; the default chooses :math:`(\\kappa_-, \\kappa_+)` by a
within-speaker CV of A.  For every system × share × seed the held-out ratio of each fixed pair
is one cell of a surface (:func:`speaker_pool_kappa_scan.surface`, saved by
``speaker_failure_share_scan.py --save``).  This script reads the surfaces and reports, against
the issue's lines (20 %: median ≤ 0.85, max ≤ 1.0; 50 %: median ≤ 0.95, max ≤ 1.1; per seed,
over the 10 LA systems):

* the best **fixed** pair (one pair for every system and split), ranked by the worst
  line-relative value over the six share × seed cells (value / bound; ≤ 1 meets every line);
* the **oracle** pair: for every split its own best pair, chosen on B — what no rule using A
  alone can beat;
* the **per-system oracle**: for every system and share one pair for all its seeds, the one with
  the smallest mean ratio over them (chosen on B);
* the model alone (:math:`\\kappa = \\infty`).

    python3 benchmarks/speaker_failure_share_scan.py --variants mean --n-parts 2 \\
        --shares 0.2 0.5 --seeds 1 2 3 --rules 1s-fold --save /tmp/surfaces
    python3 benchmarks/speaker_kappa_reach.py /tmp/surfaces
"""

from __future__ import annotations

import argparse
import itertools
import pickle
from pathlib import Path

import numpy as np

#: the issue's per-speaker EER lines: share → (median bound, max bound)
LINES = {0.2: (0.85, 1.0), 0.5: (0.95, 1.1)}


def load(folder: Path, variant: str = "mean") -> tuple[dict, tuple]:
    """``{(system, share, seed): surface}`` and the κ grid."""
    out, kappas = {}, None
    for f in sorted(folder.glob(f"*_{variant}.pkl")):
        system, share, seed, _ = f.stem.rsplit("_", 3)
        with open(f, "rb") as fh:
            o = pickle.load(fh)
        out[(system, float(share), int(seed))] = o["surf"]
        kappas = o["kappas"]
    return out, kappas


def line_cells(values: dict, shares_seeds: list) -> dict:
    """Per (share, seed): (median, max) over systems of ``values[(system, share, seed)]``."""
    out = {}
    for share, seed in shares_seeds:
        v = np.array([x for k, x in values.items() if k[1] == share and k[2] == seed])
        out[(share, seed)] = (float(np.median(v)), float(v.max()), v.size)
    return out


def worst(cells: dict) -> float:
    """Largest value / bound over every cell's median and max (≤ 1: every line met)."""
    return max(max(m / LINES[sh][0], x / LINES[sh][1]) for (sh, _), (m, x, _) in cells.items())


def fmt(cells: dict) -> str:
    return "  ".join(f"{sh:g}/s{sd}: {m:.3f} ({x:.3f})" for (sh, sd), (m, x, _) in cells.items())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--variant", default="mean")
    ap.add_argument("--measure", default="eer", choices=["eer", "min_dcf"])
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    surf, kappas = load(a.folder, a.variant)
    cells = sorted({(k[1], k[2]) for k in surf})
    print(f"{len(surf)} splits; cells share/seed: median (max) over systems of the {a.measure} ratio to counting")
    ranked = []
    for i, j in itertools.product(range(len(kappas)), repeat=2):
        c = line_cells({k: s[a.measure][i, j] for k, s in surf.items()}, cells)
        ranked.append((worst(c), kappas[i], kappas[j], c))
    ranked.sort(key=lambda r: r[0])
    print("\nbest fixed pairs (worst value/bound; <= 1 meets every line):")
    for w, kn, kp, c in ranked[: a.top]:
        print(f"  kappa-={kn:g} kappa+={kp:g}  worst {w:.3f}  {fmt(c)}")
    alone = next(r for r in ranked if np.isinf(r[1]) and np.isinf(r[2]))
    print(f"\nmodel alone  worst {alone[0]:.3f}  {fmt(alone[3])}")
    oracle = line_cells({k: float(np.min(s[a.measure])) for k, s in surf.items()}, cells)
    print(f"oracle pair per split (chosen on B)  worst {worst(oracle):.3f}  {fmt(oracle)}")
    per_system = {}
    for system, share in {(k[0], k[1]) for k in surf}:
        mean = np.mean([s[a.measure] for k, s in surf.items() if k[:2] == (system, share)], axis=0)
        i, j = np.unravel_index(int(np.argmin(mean)), mean.shape)
        for k, s in surf.items():
            if k[:2] == (system, share):
                per_system[k] = float(s[a.measure][i, j])
    c = line_cells(per_system, cells)
    print(f"oracle pair per system and share (one over its seeds)  worst {worst(c):.3f}  {fmt(c)}")


if __name__ == "__main__":
    main()
