"""``lmer`` on Dask input: the native engine run on summed cross-products.

The fit is the in-memory one (:func:`scoremix.lme.native.fit` with ``cp=`` the summed
:class:`~scoremix.lme.crossprod.CrossProducts`); the profiled REML/ML criterion and every
estimate depend on the rows only through those sums.  Per-row quantities are lazy:
:attr:`DaskLmerResult.fitted`, :attr:`~DaskLmerResult.residuals` and
:meth:`~DaskLmerResult.predict` return Dask Series computed partition by partition, and
:meth:`~DaskLmerResult.model_eer` merges per-partition counts of the per-trial Gaussians.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.distributed.design import PartitionEncoder
from scoremix.distributed.inputs import DaskInputError, tree_reduce
from scoremix.distributed.spec import DaskModelSpec, build_dask_model_spec
from scoremix.lme.native import fit as native_fit
from scoremix.lme.result import LmerResult

__all__ = ["DaskLmerResult", "lmer_dask", "predict_rows", "fitted_partition", "moment_cells", "response_frame"]


def predict_rows(part: pd.DataFrame, fixed_design: Any, random_design: Any, keep: np.ndarray | None,
                 beta: np.ndarray, b: list[np.ndarray], population: bool = False) -> np.ndarray:
    """``x_i'β + Σ_k z_ik' b_{k,g_k(i)}`` of pandas rows (random effect 0 for unseen levels;
    ``population``: ``x_i'β`` only)."""
    X = np.asarray(fixed_design(part), dtype=np.float64)
    if keep is not None:
        X = X[:, keep]
    out = X @ beta
    if not population:
        for (codes, Xk), bk in zip(random_design(part), b):
            codes = np.asarray(codes, dtype=np.int64)
            ok = codes >= 0
            contrib = np.zeros(codes.shape[0])
            contrib[ok] = np.einsum("ij,ij->i", np.asarray(Xk, float)[ok], bk[codes[ok]])
            out = out + contrib
    return out


def fitted_partition(part: pd.DataFrame, enc: PartitionEncoder, keep: np.ndarray, beta: np.ndarray,
                     b: list[np.ndarray], population: bool = False) -> pd.Series:
    """Fitted values ``x_i'β + Σ_k z_ik' b_{k,g_k(i)}`` of the complete rows of one partition."""
    part = part.dropna(subset=enc.used)
    out = predict_rows(part, enc.fixed_design, enc.random_design, keep, beta, b, population)
    if enc.offset_design is not None:
        out = out + np.asarray(enc.offset_design(part), dtype=np.float64)
    return pd.Series(out, index=part.index, name="fitted")


def _predict_partition(part: pd.DataFrame, fixed_design: Any, random_design: Any, beta: np.ndarray,
                       b: list[np.ndarray], population: bool, offset_design: Any = None) -> pd.Series:
    out = predict_rows(part, fixed_design, random_design, None, beta, b, population)
    if offset_design is not None:
        out = out + np.asarray(offset_design(part), dtype=np.float64)
    return pd.Series(out, index=part.index, name="predicted")


def moment_cells(part: pd.DataFrame, enc: PartitionEncoder, keep: np.ndarray, beta: np.ndarray,
                 b: list[np.ndarray], sd_by: np.ndarray, covs: list[np.ndarray] | None,
                 label: str, positive: Any, by: list[str], score: bool) -> pd.DataFrame:
    """Counts of trials per distinct ``(by…, y, mean, sd[, score])`` in one partition, with
    ``N(mean, sd²)`` the trial's score distribution (conditional: ``covs=None``)."""
    from scoremix.trials import label_to_binary

    part = part.dropna(subset=enc.used)
    mean = fitted_partition(part, enc, keep, beta, b, population=covs is not None).to_numpy()
    _, _, design, w, dcodes = enc.encode(part)
    var = sd_by[dcodes] ** 2
    if w is not None:
        var = (sd_by[dcodes] / np.sqrt(w)) ** 2
    if covs is not None:
        for (_, Xk), cov in zip(design, covs):
            Z = np.asarray(Xk, dtype=np.float64)
            var = var + np.einsum("ij,jk,ik->i", Z, cov, Z)
    cols = {c: part[c].to_numpy() for c in by}
    cols.update(y=np.asarray(label_to_binary(part[label], positive=positive), dtype=np.int8),
                mean=mean, sd=np.sqrt(var))
    if score:
        cols["score"] = enc.response_values(part)
    df = pd.DataFrame(cols)
    keys = list(df.columns)
    return df.groupby(keys, sort=False, dropna=False).size().rename("n").reset_index()


def _merge_cells(parts: list[pd.DataFrame]) -> pd.DataFrame:
    df = pd.concat(parts, ignore_index=True)
    keys = [c for c in df.columns if c != "n"]
    return df.groupby(keys, sort=False, dropna=False)["n"].sum().reset_index()


class DaskLmerResult(LmerResult):
    """An :class:`~scoremix.lme.result.LmerResult` fitted on Dask rows.

    Every estimate, ``summary()`` and ``to_dict()`` are those of ``LmerResult``; per-row
    quantities are lazy Dask Series (``fitted``, ``residuals``, ``predict()``), computed only
    when asked for (``.compute()``, ``.to_parquet(...)``).  ``spec`` is a
    :class:`~scoremix.distributed.spec.DaskModelSpec`.
    """

    spec: DaskModelSpec

    @classmethod
    def from_result(cls, res: LmerResult) -> "DaskLmerResult":
        out = cls.__new__(cls)
        out.__dict__.update(res.__dict__)
        return out

    def _lazy(self, population: bool = False) -> Any:
        spec = self.spec
        beta = self.fixef.to_numpy().copy()
        b = [np.asarray(x) for x in self._b]
        return spec.frame.map_partitions(fitted_partition, spec.encoder, spec.keep, beta, b,
                                         population, meta=pd.Series(dtype=np.float64, name="fitted"))

    @property
    def fitted(self) -> Any:  # type: ignore[override]
        """Lazy ``Xβ̂ + Zb̂`` of the rows used (a Dask Series)."""
        return self._lazy()

    @property
    def residuals(self) -> Any:  # type: ignore[override]
        """Lazy ``y − fitted`` (a Dask Series)."""
        enc = self.spec.encoder
        y = self.spec.frame.map_partitions(
            lambda part: pd.Series(enc.response_values(part.dropna(subset=enc.used)),
                                   index=part.dropna(subset=enc.used).index),
            meta=pd.Series(dtype=np.float64))
        return (y - self._lazy()).rename("residuals")

    def predict(self, newdata: Any = None, re_form: str | None = None,
                allow_new_levels: bool | None = None) -> Any:
        """As :meth:`LmerResult.predict`; without ``newdata`` or with Dask ``newdata`` the
        result is a lazy Dask Series."""
        population = re_form is not None and str(re_form).replace(" ", "") in ("~0", "NA", "~1-1")
        if re_form is not None and not population:
            raise ValueError(f"re_form must be None (all random effects) or '~0', not {re_form!r}")
        if newdata is None:
            return self._lazy(population).rename("predicted")
        if hasattr(newdata, "map_partitions"):
            return newdata.map_partitions(
                _predict_partition, self.spec.fixed_design, self.spec.random_design,
                self.fixef.to_numpy().copy(), [np.asarray(x) for x in self._b], population,
                self.spec.encoder.offset_design, meta=pd.Series(dtype=np.float64, name="predicted"))
        return super().predict(newdata, re_form, allow_new_levels)

    def summary(self, ddf: str | None = None) -> str:
        """lme4-style summary; the scaled-residual quantiles are left out (they would need
        a pass over all rows: compute ``residuals`` if wanted).  ``ddf`` as in
        :meth:`LmerResult.summary` (the base's signature, kept)."""
        plain = LmerResult.__new__(LmerResult)
        plain.__dict__.update(self.__dict__)
        plain.spec = None
        return plain.summary(ddf)

    def refit(self, REML: bool | None = None, y: Any = None, **control: Any) -> "DaskLmerResult":
        """Refit from the summed cross-products (e.g. ``REML=False``); a new response needs
        the rows and is refused."""
        if y is not None:
            raise DaskInputError("refit(y=...) needs the rows; fit the new response with sm.lmer")
        res = native_fit(self.spec, REML=self.REML if REML is None else REML,
                         control=control or None, cp=self.spec.cp)
        out = DaskLmerResult.from_result(res)
        out.fit_info["dask"] = dict(self.fit_info.get("dask", {}))
        return out

    # ------------------------------------------------------------------ model-based EER
    def _sd_by(self) -> np.ndarray:
        if self.sigma_by is not None:
            return np.asarray(self.sigma_by.to_numpy(), dtype=np.float64)
        return np.array([self.sigma])

    def moment_cells(self, conditional: bool = True, label: str = "label", positive: Any = None,
                     by: Sequence[str] = (), score: bool = False, split_every: int = 8) -> pd.DataFrame:
        """Distinct per-trial Gaussians ``(by…, y, mean, sd)`` with their trial counts ``n``,
        merged over partitions (the mixture of :func:`scoremix.model_eer.trial_moments`
        without a row per trial)."""
        import dask
        from dask import delayed

        from scoremix.model_eer import ModelEERError

        spec = self.spec
        missing = [c for c in [label, *by] if c not in spec.frame.columns]
        if missing:
            raise ModelEERError(f"column(s) {missing} are not in the Dask data "
                                f"(columns: {list(spec.frame.columns)})")
        covs = None
        if not conditional:
            covs = [np.asarray(S) for S in self.cov_re()]
        beta = self.fixef.to_numpy().copy()
        b = [np.asarray(x) for x in self._b]
        leaves = [delayed(moment_cells)(p, spec.encoder, spec.keep, beta, b, self._sd_by(), covs,
                                        label, positive, list(by), score)
                  for p in spec.frame.to_delayed()]
        (cells,) = dask.compute(tree_reduce(leaves, _merge_cells, split_every))
        return cells

    def dask_model_eer(self, by: str | Sequence[str] | None = None, conditional: bool = True,
                       label: str = "label", positive: Any = None) -> float | pd.DataFrame:
        """:func:`scoremix.model_eer` of this fit without collecting rows: the class
        mixtures are built from merged counts of distinct per-trial Gaussians (exactly the
        equal-weight mixtures over trials), and the empirical EER per subgroup from exact
        score counts."""
        from scoremix.model_eer import mixture_eer

        names = [] if by is None else ([by] if isinstance(by, str) else list(by))
        cells = self.moment_cells(conditional, label, positive, names)

        def eer_of(g: pd.DataFrame) -> float:
            neg, pos = g[g["y"] == 0], g[g["y"] == 1]
            if neg.empty or pos.empty:
                return float("nan")
            neg = neg.groupby(["mean", "sd"], sort=False)["n"].sum().reset_index()
            pos = pos.groupby(["mean", "sd"], sort=False)["n"].sum().reset_index()
            return float(mixture_eer(neg["mean"].to_numpy(), neg["sd"].to_numpy(),
                                     pos["mean"].to_numpy(), pos["sd"].to_numpy(),
                                     neg["n"].to_numpy(float), pos["n"].to_numpy(float)))

        if not names:
            return eer_of(cells)
        from scoremix.metrics import eer as empirical_eer

        # the empirical EER of each subgroup: exact, range-partitioned score counts of its rows
        resp = self.spec.frame.map_partitions(response_frame, self.spec.encoder, label, positive, names,
                                              meta={**{c: self.spec.frame[c].dtype for c in names},
                                                    "y": "i1", "score": "f8"})
        rows = []
        for key, g in cells.groupby(names, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            n_pos = int(g.loc[g["y"] == 1, "n"].sum())
            n_neg = int(g.loc[g["y"] == 0, "n"].sum())
            emp = float("nan")
            if n_pos and n_neg:
                mask = None
                for c, k in zip(names, key):
                    hit = resp[c].isna() if pd.isna(k) else (resp[c] == k)
                    mask = hit if mask is None else (mask & hit)
                sub = resp[mask]
                emp = float(empirical_eer(sub["score"], sub["y"]))
            rows.append((*key, n_neg, n_pos, eer_of(g), emp))
        out = pd.DataFrame(rows, columns=[*names, "n_neg", "n_pos", "eer_model", "eer_empirical"])
        return out.set_index(names)


def response_frame(part: pd.DataFrame, enc: PartitionEncoder, label: str, positive: Any,
                   by: list[str]) -> pd.DataFrame:
    """The ``by`` columns, the class ``y`` (0/1) and the response ``score`` of the complete
    rows of one partition (those the fit used)."""
    from scoremix.trials import label_to_binary

    part = part.dropna(subset=enc.used)
    out = part[by].copy()
    out["y"] = (np.asarray(label_to_binary(part[label], positive=positive), dtype=np.int8) if len(part)
                else np.zeros(0, np.int8))
    out["score"] = enc.response_values(part) if len(part) else np.zeros(0)
    return out


def lmer_dask(formula: str, data: Any, REML: bool = True, weights: str | None = None,
              dispersion: str | None = None, na_action: str = "omit", control: Any = None,
              contrasts: dict[str, str] | None = None, offset: str | None = None,
              split_every: int = 8) -> DaskLmerResult:
    """:func:`scoremix.lmer` for a Dask DataFrame or a parquet path/glob (native engine).

    Pass 1 finds the factor levels; pass 2 forms the cross-products per partition on the
    workers and sums them by tree reduction (``split_every`` summaries per task); the
    native optimiser then runs on the client on the summed cross-products.
    """
    spec = build_dask_model_spec(formula, data, weights=weights, dispersion=dispersion,
                                 na_action=na_action, contrasts=contrasts, offset=offset,
                                 split_every=split_every)
    res = native_fit(spec, REML=REML, control=control, cp=spec.cp)
    out = DaskLmerResult.from_result(res)
    out.fit_info["dask"] = dict(npartitions=int(spec.frame.npartitions), n_dropped=spec.n_dropped)
    return out
