"""Nuisance log-likelihood ratios and their two-Gaussian model (studies.md A.2, A.4).

A nuisance feature :math:`w_i` (estimated SNR, proportion of non-speech, …) is measured
on every file.  One Gaussian mixture per class is fitted by EM on the *training* data and
every trial gets the nuisance log-likelihood ratio

.. math::

    \\ell_i = \\log p(w_i \\mid \\text{positive GMM}) - \\log p(w_i \\mid \\text{negative GMM}).

Ideally :math:`\\ell` carries no class information.  :func:`nuisance_model` summarises
how much it does carry with the tied-variance two-Gaussian model

.. math::

    \\ell_i = \\mu_\\ell + d_\\ell\\, y_i + \\varepsilon_i,\\qquad
    \\varepsilon_i \\sim N(0, \\sigma_\\ell^2),\\qquad
    \\mathrm{EER}_N = \\Phi\\!\\left(-\\frac{d_\\ell}{2\\sigma_\\ell}\\right),

(50 % when :math:`d_\\ell = 0`) and its unequal-variance form
:math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from tqdm.auto import tqdm

from scoremix.predictive.mixture import gaussian_eer
from scoremix.trials import SingleClassError

if TYPE_CHECKING:  # sklearn.mixture is imported by the first fit, not by ``import scoremix``
    from sklearn.mixture import GaussianMixture

__all__ = [
    "NuisanceInputError",
    "ConstantFeatureError",
    "TooFewTrialsError",
    "NonFiniteFeatureError",
    "SingleClassError",
    "NuisanceLLR",
    "NuisanceModel",
    "nuisance_model",
]


class NuisanceInputError(ValueError):
    """Base class of the errors raised for unusable nuisance features or labels."""


class ConstantFeatureError(NuisanceInputError):
    """A feature column is constant within one class (its GMM would be degenerate)."""


class TooFewTrialsError(NuisanceInputError):
    """A class has fewer trials than the mixture components asked for."""


class NonFiniteFeatureError(NuisanceInputError):
    """The feature matrix contains NaN or ±inf."""


class SingleClassNuisanceError(NuisanceInputError, SingleClassError):
    """Only one class is present, so no likelihood ratio can be formed.

    Also the one :class:`scoremix.SingleClassError` (:class:`scoremix.trials.SingleClassError`,
    re-exported here as ``SingleClassError``), so either name catches it."""


_CLASS_NAMES = {0: "negative", 1: "positive"}


def _as_feature_matrix(w: Any, what: str = "w") -> tuple[np.ndarray, list[str]]:
    """Return ``(n, k)`` float64 features and a name per column; check finiteness."""
    if isinstance(w, pd.DataFrame):
        names = [str(c) for c in w.columns]
        arr = w.to_numpy(dtype=np.float64)
    elif isinstance(w, pd.Series):
        names = [str(w.name) if w.name is not None else "w[:, 0]"]
        arr = w.to_numpy(dtype=np.float64)[:, None]
    else:
        arr = np.asarray(w, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2:
            raise NuisanceInputError(f"{what} must be 1-D or 2-D, got {arr.ndim} dimensions")
        names = [f"{what}[:, {j}]" for j in range(arr.shape[1])]
    if arr.shape[0] == 0:
        raise NuisanceInputError(f"{what} has no rows")
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise NonFiniteFeatureError(
            f"{what} has {rows.size} row(s) with NaN or inf; first rows: {rows[:5].tolist()}"
        )
    return arr, names


def _binary_labels(labels: Any, positive: Any = None) -> np.ndarray:
    from scoremix.trials import label_to_binary

    return np.asarray(label_to_binary(labels, positive=positive), dtype=np.int8)


class NuisanceLLR(BaseEstimator):
    """Class-conditional Gaussian-mixture likelihood ratio of a nuisance feature.

    One :class:`sklearn.mixture.GaussianMixture` is fitted by EM per class on the
    training features; :meth:`llr` returns
    :math:`\\ell(w) = \\log p(w\\mid\\text{pos}) - \\log p(w\\mid\\text{neg})`.

    Parameters
    ----------
    n_components:
        number of mixture components per class, or ``"bic"`` to choose it per class by
        the Bayesian information criterion
        :math:`\\mathrm{BIC}(K) = -2\\log\\hat L_K + p_K\\log n` over
        :math:`K = 1,\\dots,\\min(\\texttt{max\\_components}, n_{\\text{class}})`.
    max_components:
        largest count tried by ``"bic"``.
    covariance_type:
        passed to ``GaussianMixture`` (``"full"``, ``"diag"``, ``"tied"``, ``"spherical"``).
    n_init:
        EM restarts per fit (``GaussianMixture(n_init=...)``).
    random_state:
        seed of the EM initialisation; the same seed gives the same fit.
    progress:
        show a tqdm bar over the BIC candidates.

    Attributes
    ----------
    gmm_neg_, gmm_pos_:
        the fitted mixtures.
    n_components_:
        ``{0: K_neg, 1: K_pos}`` chosen (or given) component counts.
    bic_:
        with ``"bic"``: DataFrame indexed by K with columns ``neg``/``pos`` (NaN where a
        count was not tried); else ``None``.
    feature_names_:
        column names used in error messages.
    """

    def __init__(
        self,
        n_components: int | Literal["bic"] = "bic",
        max_components: int = 8,
        covariance_type: str = "full",
        n_init: int = 1,
        random_state: int | None = None,
        progress: bool = False,
    ) -> None:
        self.n_components = n_components
        self.max_components = max_components
        self.covariance_type = covariance_type
        self.n_init = n_init
        self.random_state = random_state
        self.progress = progress

    # -- fitting -----------------------------------------------------------------------
    def _gmm(self, k: int) -> GaussianMixture:
        from sklearn.mixture import GaussianMixture

        return GaussianMixture(
            n_components=k,
            covariance_type=self.covariance_type,
            n_init=self.n_init,
            random_state=self.random_state,
        )

    def fit(self, w_train: Any, y_train: Any, positive: Any = None) -> "NuisanceLLR":
        """Fit one mixture per class.

        Parameters
        ----------
        w_train:
            ``(n,)`` or ``(n, k)`` nuisance features (array, Series or DataFrame).
        y_train:
            class labels (0/1, bool, or strings such as ``"bonafide"``/``"spoof"``, read
            by :func:`scoremix.trials.label_to_binary`).
        positive:
            the positive label value when it cannot be inferred.
        """
        w, names = _as_feature_matrix(w_train, "w_train")
        y = _binary_labels(y_train, positive)
        if y.shape[0] != w.shape[0]:
            raise NuisanceInputError(
                f"w_train has {w.shape[0]} rows but y_train has {y.shape[0]} labels"
            )
        present = set(np.unique(y).tolist())
        if present != {0, 1}:
            only = _CLASS_NAMES[int(next(iter(present)))]
            raise SingleClassNuisanceError(
                f"y_train holds only the {only} class ({y.shape[0]} trials); "
                "a likelihood ratio needs both classes"
            )
        if self.n_components != "bic":
            if not (isinstance(self.n_components, (int, np.integer)) and self.n_components >= 1):
                raise NuisanceInputError(
                    f"n_components must be a positive integer or 'bic', got {self.n_components!r}"
                )
        elif int(self.max_components) < 1:
            raise NuisanceInputError(f"max_components must be >= 1, got {self.max_components}")

        self.feature_names_ = names
        self.n_features_in_ = w.shape[1]
        fitted: dict[int, GaussianMixture] = {}
        counts: dict[int, int] = {}
        bic_cols: dict[str, dict[int, float]] = {}
        for cls in (0, 1):
            wc = w[y == cls]
            cname = _CLASS_NAMES[cls]
            n_c = wc.shape[0]
            k_needed = 2 if self.n_components == "bic" else max(2, int(self.n_components))
            if n_c < k_needed:
                what = ("at least 2 are needed to fit a mixture" if self.n_components == "bic"
                        else f"fewer than n_components={self.n_components} (and at least 2 are needed)")
                raise TooFewTrialsError(f"the {cname} class has {n_c} trial(s), {what}")
            spread = np.ptp(wc, axis=0)
            for j, s in enumerate(spread):
                if not s > 0:
                    raise ConstantFeatureError(
                        f"feature {names[j]!r} is constant (= {float(wc[0, j])!r}) in the {cname} "
                        f"class ({n_c} trials); its mixture would be degenerate"
                    )
            if self.n_components == "bic":
                k_max = min(int(self.max_components), n_c)
                bics: dict[int, float] = {}
                models: dict[int, GaussianMixture] = {}
                for k in tqdm(range(1, k_max + 1), disable=not self.progress,
                              desc=f"BIC ({cname})"):
                    g = self._gmm(k).fit(wc)
                    bics[k] = float(g.bic(wc))
                    models[k] = g
                best = min(bics, key=bics.__getitem__)
                fitted[cls], counts[cls] = models[best], best
                bic_cols["neg" if cls == 0 else "pos"] = bics
            else:
                k = int(self.n_components)
                fitted[cls], counts[cls] = self._gmm(k).fit(wc), k
        self.gmm_neg_, self.gmm_pos_ = fitted[0], fitted[1]
        self.n_components_ = counts
        self.bic_ = (
            pd.DataFrame(bic_cols).rename_axis("n_components") if bic_cols else None
        )
        return self

    # -- scoring -----------------------------------------------------------------------
    def llr(self, w: Any) -> np.ndarray:
        """Nuisance LLR :math:`\\log p(w\\mid\\text{pos}) - \\log p(w\\mid\\text{neg})` per trial.

        Parameters
        ----------
        w:
            ``(n,)`` or ``(n, k)`` features with the training dimension ``k``.

        Returns
        -------
        numpy.ndarray
            ``(n,)`` float64 log-likelihood ratios (natural log).
        """
        if not hasattr(self, "gmm_pos_"):
            raise NuisanceInputError("NuisanceLLR is not fitted; call .fit(w_train, y_train) first")
        arr, _ = _as_feature_matrix(w, "w")
        if arr.shape[1] != self.n_features_in_:
            raise NuisanceInputError(
                f"w has {arr.shape[1]} feature column(s) but the model was fitted on "
                f"{self.n_features_in_} ({', '.join(self.feature_names_)})"
            )
        return self.gmm_pos_.score_samples(arr) - self.gmm_neg_.score_samples(arr)

    def fit_llr(self, w_train: Any, y_train: Any, w_test: Any, positive: Any = None) -> np.ndarray:
        """``fit(w_train, y_train)`` then ``llr(w_test)``."""
        return self.fit(w_train, y_train, positive=positive).llr(w_test)


@dataclass(frozen=True)
class NuisanceModel:
    """Tied-variance two-Gaussian model of nuisance LLRs (paper's appendix, Table IX).

    :math:`\\ell_i = \\mu + d\\,y_i + \\varepsilon_i`, fitted by OLS.

    Attributes
    ----------
    mu, d:
        OLS intercept (mean LLR of the negative class) and class effect.
    sigma:
        pooled residual SD :math:`\\sqrt{\\mathrm{RSS}/(n-2)}` of the OLS fit.
    sigma_neg, sigma_pos:
        per-class SDs (ddof = 1).
    eer_model:
        :math:`\\Phi(-d/(2\\sigma))`.
    eer_model_unequal:
        :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))` with the class SDs.
    eer_empirical:
        :func:`scoremix.metrics.eer` of the LLRs as scores.
    n_neg, n_pos:
        trial counts.
    """

    mu: float
    d: float
    sigma: float
    sigma_neg: float
    sigma_pos: float
    eer_model: float
    eer_model_unequal: float
    eer_empirical: float
    n_neg: int
    n_pos: int

    def to_frame(self, name: str = "nuisance") -> pd.DataFrame:
        """One row in the layout of the paper's Table IX.

        Columns: ``mu_l``, ``d_l``, ``sigma2_l`` (tied residual variance), ``eer_model``,
        ``eer_empirical`` (fractions), then ``eer_model_unequal``, ``n_neg``, ``n_pos``.
        """
        return pd.DataFrame(
            {
                "mu_l": [self.mu],
                "d_l": [self.d],
                "sigma2_l": [self.sigma**2],
                "eer_model": [self.eer_model],
                "eer_empirical": [self.eer_empirical],
                "eer_model_unequal": [self.eer_model_unequal],
                "n_neg": [self.n_neg],
                "n_pos": [self.n_pos],
            },
            index=pd.Index([name], name="feature"),
        )


def nuisance_model(llr: Any, labels: Any, positive: Any = None) -> NuisanceModel:
    """Fit the two-Gaussian model :math:`\\ell = \\mu + d\\,y + \\varepsilon` to nuisance LLRs.

    Parameters
    ----------
    llr:
        ``(n,)`` nuisance log-likelihood ratios (e.g. from :meth:`NuisanceLLR.llr`).
    labels:
        class labels, read by :func:`scoremix.trials.label_to_binary`.
    positive:
        the positive label value when it cannot be inferred.

    Returns
    -------
    NuisanceModel
        with :math:`\\mathrm{EER}_N = \\Phi(-d/(2\\sigma))` and its unequal-variance form.
    """
    from scoremix.metrics import eer

    ell = np.asarray(llr, dtype=np.float64).ravel()
    y = _binary_labels(labels, positive)
    if y.shape[0] != ell.shape[0]:
        raise NuisanceInputError(f"llr has {ell.shape[0]} values but labels has {y.shape[0]}")
    bad = ~np.isfinite(ell)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise NonFiniteFeatureError(
            f"llr has {rows.size} NaN/inf value(s); first rows: {rows[:5].tolist()}"
        )
    n_pos = int(y.sum())
    n_neg = int(y.shape[0] - n_pos)
    if n_pos == 0 or n_neg == 0:
        only = "negative" if n_pos == 0 else "positive"
        raise SingleClassNuisanceError(f"labels hold only the {only} class ({y.shape[0]} trials)")
    if min(n_pos, n_neg) < 2:
        cname = "positive" if n_pos < 2 else "negative"
        raise TooFewTrialsError(f"the {cname} class has 1 trial; its SD needs at least 2")
    import statsmodels.api as sm  # noqa: PLC0415  (deferred: 0.45 s of `import scoremix` for one OLS)

    ols = sm.OLS(ell, sm.add_constant(y.astype(np.float64), has_constant="add")).fit()
    mu, d = (float(v) for v in ols.params)
    sigma = float(np.sqrt(ols.scale))
    s0 = float(np.std(ell[y == 0], ddof=1))
    s1 = float(np.std(ell[y == 1], ddof=1))
    return NuisanceModel(
        mu=mu,
        d=d,
        sigma=sigma,
        sigma_neg=s0,
        sigma_pos=s1,
        eer_model=float(gaussian_eer(mean_neg=mu, sd_neg=sigma, mean_pos=mu + d, sd_pos=sigma)),
        eer_model_unequal=float(gaussian_eer(mean_neg=mu, sd_neg=s0, mean_pos=mu + d, sd_pos=s1)),
        eer_empirical=float(eer(ell, y)),
        n_neg=n_neg,
        n_pos=n_pos,
    )
