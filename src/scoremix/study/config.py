"""Study files: a TOML description of data, models, analyses and output (see ``docs/study-format.md``).

:func:`load_study` reads a study file (``tomllib``), applies ``--set``-style overrides, expands
``${VAR}`` / ``${VAR:-default}`` in paths, resolves paths relative to the file and validates
every key.  A relative path that starts with a variable set in the environment is resolved
from the current folder (that is where ``export VAR=relative/path`` was typed); a ``:-default``
and any other relative path is resolved from the study file's folder.  Every problem raises :class:`StudyConfigError` naming the offending key, e.g.
``models[1].backend: unknown backend 'lme5'; choose one of native, statsmodels, lme4, bayes``.

The result is a :class:`StudyConfig` of plain dataclasses; :meth:`StudyConfig.to_dict` gives the
resolved configuration back (written to ``study.json`` by the runner).
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = [
    "StudyConfigError", "StudyConfig", "StudyInfo", "DataConfig", "SimulateConfig", "ModelConfig",
    "MetricsConfig", "ModelEERConfig", "FairnessConfig", "BreakdownConfig", "CompareConfig",
    "NuisanceConfig", "SystemsConfig", "TandemConfig", "AnalysesConfig", "BACKENDS", "ANALYSES",
    "load_study", "parse_study", "apply_overrides", "expand_vars",
]

#: Model backends accepted in ``[[models]]``.
BACKENDS = ("native", "statsmodels", "lme4", "bayes")
#: values of a model's ``transform`` key (see docs/study-format.md)
TRANSFORMS = ("monotone", "monotone-by-class")
#: Analysis tables accepted under ``[analyses]``.
ANALYSES = ("metrics", "model_eer", "fairness", "breakdown", "compare", "nuisance", "systems",
            "contrasts", "checks", "tandem")  # s5postfit: contrasts, checks; s5deteval: tandem
EER_METHODS = ("rocch", "interp", "asvspoof", "voxceleb")

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class StudyConfigError(ValueError):
    """A study file is invalid; the message starts with the key (``models[0].formula: …``)."""

    def __init__(self, key: str, message: str, source: str | Path | None = None) -> None:
        self.key = key
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}")


# ---------------------------------------------------------------------------------------
# dataclasses
# ---------------------------------------------------------------------------------------

@dataclass
class StudyInfo:
    """``[study]``: name (used in file names), title, seed, output folder."""

    name: str
    title: str
    seed: int = 0
    output: Path | None = None
    description: str = ""


@dataclass
class SimulateConfig:
    """``[data.simulate]``: simulated trials instead of files (``kind = "cm"`` or ``"sv"``)."""

    kind: str = "cm"
    n_trials: int = 20000
    seed: int | None = None
    subgroup_shift: dict[str, list[float]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig:
    """``[data]``: where the trials come from and what their columns mean."""

    files: list[Path] = field(default_factory=list)
    simulate: SimulateConfig | None = None
    score: str = "score"
    label: str = "label"
    positive: Any = None
    rename: dict[str, str] = field(default_factory=dict)
    filters: dict[str, list[Any]] = field(default_factory=dict)
    negate: dict[str, list[Any]] = field(default_factory=dict)
    system: str | None = None
    speaker: str = "speaker"
    subgroups: list[str] = field(default_factory=list)
    transform: str = "none"
    standardize: bool = False
    standardize_by: list[str] = field(default_factory=list)
    indicators: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    sample_per_system: int = 0
    sample_by: str | None = None
    min_speakers: int = 5
    min_class_trials: int = 30


@dataclass
class ModelConfig:
    """``[[models]]``: one mixed model, fitted once per system (``per_system``)."""

    name: str
    formula: str
    backend: str = "native"
    REML: bool = True
    dispersion: str | None = None
    per_system: bool = True
    filters: dict[str, list[Any]] = field(default_factory=dict)
    draws: int = 500
    tune: int = 500
    chains: int = 2
    method: str = "collapsed"
    compare_with: str = "native"
    #: ``"monotone"``: a transformation (latent-Gaussian) mixed model, ``h(score) = Xβ + Zb + ε``
    #: with ``h`` increasing and estimated (``lmer(..., transform="monotone")``); ``None``: Gaussian
    transform: str | None = None
    #: with ``transform = "monotone-by-class"``: the strata column (one transform per level;
    #: ``control=dict(strata=...)`` of ``lmer``); ``None``: ``"label"``
    strata: str | None = None
    # s5trust-auto: ``auto = true`` — the specification is chosen by :func:`scoremix.score_model`
    #: ``True``: fit :func:`scoremix.score_model` (no formula) and validate it out of sample
    auto: bool = False
    #: with ``auto``: columns whose levels get their own transform within each class
    factors: list[str] = field(default_factory=list)
    #: with ``auto``: columns entering the location per class
    covariates: list[str] = field(default_factory=list)
    #: with ``auto``: splits of the out-of-sample check (``"trials"``, ``"speakers"``; empty: none)
    validate: list[str] = field(default_factory=lambda: ["trials", "speakers"])
    #: with ``auto``: fitted share A of the out-of-sample check
    validate_share: float = 0.2
    #: with ``auto``: also consider per-level shapes pooled toward a shared class shape
    pool_shapes: bool = False


@dataclass
class MetricsConfig:
    """``[analyses.metrics]``: empirical EER/minDCF/Cllr per system and per ``by`` cell."""

    eer_method: str = "rocch"
    p_target: float = 0.05
    c_miss: float = 1.0
    c_fa: float = 1.0
    normalize: bool = False
    by: list[list[str]] = field(default_factory=list)
    filters: dict[str, list[Any]] = field(default_factory=dict)
    negatives_by: list[str] = field(default_factory=list)
    #: speaker-cluster bootstrap replicates for EER/minDCF intervals (0: none), level and seed; on by
    #: default for the overall rows, so that the report's headline numbers carry intervals (issue 24)
    n_boot: int = 200
    #: intervals for the per-cell rows too (default: only when ``n_boot`` is given in the study file;
    #: a non-ROCCH EER costs one sort per replicate and cell)
    cell_intervals: bool = False
    ci: float = 0.95
    seed: int = 0
    #: cluster column of that bootstrap (``[data].speaker``; absent column: every trial its own cluster)
    speaker: str | None = None
    #: scores are calibrated log-likelihood ratios: also actDCF (at the Bayes threshold) and Cllr
    llr: bool = False


@dataclass
class ModelEERConfig:
    """``[analyses.model_eer]``: EER implied by each frequentist model vs the empirical EER.

    ``filters`` picks the rows the model-based (and empirical) EER is evaluated on; the
    model is still fitted to all of its rows."""

    models: list[str] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    conditional: bool = True
    filters: dict[str, list[Any]] = field(default_factory=dict)
    #: speaker-bootstrap replicates of the empirical EER intervals (and refits of the model interval)
    n_boot: int = 200
    #: method of the model-EER interval: "auto" (parametric refits for Gaussian fits), "parametric", "speakers"
    model_interval: str = "auto"
    #: refits of the parametric model interval (0: n_boot)
    n_refits: int = 0


@dataclass
class FairnessConfig:
    """``[analyses.fairness]``: SVEva subgroup DCF table with cluster-bootstrap intervals."""

    groups: list[str] = field(default_factory=list)
    n_boot: int = 200
    boot_chunk: int = 250
    ci: float = 0.95
    #: interval method of :func:`scoremix.fairness.subgroup_dcf` ("studentized", "expanded", "bca-t" or "percentile")
    interval: str = "studentized"
    p_target: float = 0.05
    c_miss: float = 1.0
    c_fa: float = 1.0
    normalize: bool = False
    membership: str = "enrol"
    models: list[str] = field(default_factory=list)
    conditional: bool = True
    filters: dict[str, list[Any]] = field(default_factory=dict)
    #: test speaker column: resample enrolment × test speakers (``subgroup_dcf(resample="two-way")``)
    test_speaker: str | None = None
    #: s5deteval: the demographic-fairness panel (``SubgroupDCFResult.panel``) at the overall EER and at
    #: the overall-FPR targets ``panel_fpr``; ``panel_llr``: scores are LLRs (per-group actDCF, Cllr, APE plot)
    panel: bool = True
    panel_fpr: list[float] = field(default_factory=lambda: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2])
    panel_llr: bool = False


@dataclass
class BreakdownConfig:
    """``[analyses.breakdown]``: per-attribute-value breakdowns (single or intersectional)."""

    by: list[list[str]] = field(default_factory=list)
    n_boot: int = 0
    ci: float = 0.95
    threshold: float | None = None
    filters: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class CompareConfig:
    """``[analyses.compare]``: paired two-system comparison of subgroup measures."""

    systems: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    n_boot: int = 200
    boot_chunk: int = 250
    ci: float = 0.95
    trial_id: str | None = None
    measures: list[str] = field(default_factory=lambda: ["ratio_overall", "ratio_own"])


@dataclass
class SystemsConfig:
    """``[analyses.systems]`` (s4deteval): every pair of systems compared on EER, minDCF, actDCF, Cllr
    or AUC (:func:`scoremix.compare_systems.compare_systems`; paired speaker bootstrap, DeLong, Holm)."""

    metrics: list[str] = field(default_factory=lambda: ["eer", "min_dcf", "auc"])
    systems: list[str] = field(default_factory=list)
    n_boot: int = 200
    ci: float = 0.95
    trial_id: str | None = None
    test: str = "auto"
    adjust: str = "holm"


@dataclass
class TandemConfig:
    """``[analyses.tandem]`` (s5deteval): the study's CM systems in tandem with an ASV score table
    joined on ``join`` (:func:`scoremix.tandem.tandem_table`: min t-DCF 2019/2021, t-EER, a-DCF,
    SASV/SV/SPF-EER, speaker-bootstrap intervals).  The CM key is the study's class: ``y = 1``
    (``[data].positive``) is bona fide."""

    asv_file: Path = Path()
    asv_score: str = "score"
    asv_key: str = "trial_type"
    asv_speaker: str = "claimed_speaker"
    asv_filters: dict[str, list[Any]] = field(default_factory=dict)
    join: str = "utt"
    systems: list[str] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    n_boot: int = 200
    ci: float = 0.95


@dataclass
class NuisanceConfig:
    """``[analyses.nuisance]``: nuisance LLR from class-conditional GMMs of a feature."""

    feature: str = ""
    train: dict[str, list[Any]] = field(default_factory=dict)
    test: dict[str, list[Any]] = field(default_factory=dict)
    n_components: int = 2


@dataclass
class AnalysesConfig:
    """``[analyses]``: an analysis runs when its table is present."""

    metrics: MetricsConfig | None = None
    model_eer: ModelEERConfig | None = None
    fairness: FairnessConfig | None = None
    breakdown: BreakdownConfig | None = None
    compare: CompareConfig | None = None
    nuisance: NuisanceConfig | None = None
    systems: SystemsConfig | None = None
    contrasts: Any = None  # s5postfit: study.postfit.ContrastsConfig
    checks: Any = None     # s5postfit: study.postfit.ChecksConfig (None: the default panel)
    tandem: TandemConfig | None = None  # s5deteval

    def enabled(self) -> list[str]:
        return [a for a in ANALYSES if getattr(self, a) is not None]


@dataclass
class StudyConfig:
    """A validated study."""

    study: StudyInfo
    data: DataConfig
    models: list[ModelConfig]
    analyses: AnalysesConfig
    source: Path | None = None

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The resolved configuration as JSON-friendly data (paths as strings)."""

        def conv(v: Any) -> Any:
            if isinstance(v, Path):
                return str(v)
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [conv(x) for x in v]
            return v

        return conv(asdict(self))


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

def expand_vars(text: str, env: Mapping[str, str] | None = None) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` (an unset ``${VAR}`` without default is an error)."""
    env = os.environ if env is None else env

    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        val = env.get(name)
        if val:
            return val
        if default is not None:
            return default
        raise KeyError(name)

    return _VAR_RE.sub(sub, text)


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", key)
    if not parts:
        raise StudyConfigError(key, "empty override key")
    cur: Any = raw
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if p.startswith("["):
            idx = int(p[1:-1])
            if not isinstance(cur, list) or idx >= len(cur):
                raise StudyConfigError(key, f"index {idx} is out of range")
            if last:
                cur[idx] = value
            else:
                cur = cur[idx]
        else:
            if not isinstance(cur, dict):
                raise StudyConfigError(key, f"{p!r} cannot be set inside a non-table value")
            if last:
                cur[p] = value
            else:
                cur = cur.setdefault(p, {})


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """Return a copy of ``raw`` with dotted-key overrides applied.

    ``overrides`` is ``{"analyses.fairness.n_boot": 20, "models[0].backend": "native"}`` or a
    list of ``"key=value"`` strings whose value is parsed as TOML (a bare word is a string).
    """
    out = copy.deepcopy(raw)
    if not overrides:
        return out
    items: list[tuple[str, Any]]
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
    else:
        items = []
        for s in overrides:
            if "=" not in s:
                raise StudyConfigError(str(s), "an override must be KEY=VALUE")
            k, v = s.split("=", 1)
            try:
                val = tomllib.loads(f"v = {v.strip()}")["v"]
            except tomllib.TOMLDecodeError:
                val = v.strip()
            items.append((k.strip(), val))
    for k, v in items:
        _set_dotted(out, k, v)
    return out


class _Reader:
    """Typed access to one TOML table, tracking unknown keys."""

    def __init__(self, table: Any, path: str, source: Path | None) -> None:
        if not isinstance(table, dict):
            raise StudyConfigError(path, f"must be a table, got {type(table).__name__}", source)
        self.t = table
        self.path = path
        self.source = source
        self.used: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def err(self, k: str, msg: str) -> StudyConfigError:
        return StudyConfigError(self.key(k), msg, self.source)

    def get(self, k: str, default: Any = None) -> Any:
        self.used.add(k)
        return self.t.get(k, default)

    def has(self, k: str) -> bool:
        return k in self.t

    def str(self, k: str, default: str | None = None, required: bool = False,
            choices: Sequence[str] | None = None) -> str | None:
        if required and k not in self.t:
            raise self.err(k, "is required")
        v = self.get(k, default)
        if v is None:
            return None
        if not isinstance(v, str):
            raise self.err(k, f"must be a string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.err(k, f"unknown value {v!r}; choose one of {', '.join(choices)}")
        return v

    def bool(self, k: str, default: bool) -> bool:
        v = self.get(k, default)
        if not isinstance(v, bool):
            raise self.err(k, f"must be true or false, got {v!r}")
        return v

    def int(self, k: str, default: int | None, minimum: int | None = None) -> int | None:
        v = self.get(k, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(k, f"must be an integer, got {v!r}")
        if minimum is not None and v < minimum:
            raise self.err(k, f"must be >= {minimum}, got {v}")
        return v

    def float(self, k: str, default: float | None, lo: float | None = None, hi: float | None = None,
              open_lo: bool = False, open_hi: bool = False) -> float | None:
        v = self.get(k, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(k, f"must be a number, got {v!r}")
        v = float(v)
        if lo is not None and (v < lo or (open_lo and v == lo)):
            raise self.err(k, f"must be {'>' if open_lo else '>='} {lo}, got {v}")
        if hi is not None and (v > hi or (open_hi and v == hi)):
            raise self.err(k, f"must be {'<' if open_hi else '<='} {hi}, got {v}")
        return v

    def strlist(self, k: str, default: Sequence[str] = ()) -> list[str]:
        v = self.get(k, list(default))
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.err(k, f"must be a string or a list of strings, got {v!r}")
        return list(v)

    def groupings(self, k: str) -> list[list[str]]:
        """A list whose items are a column name or a list of column names (an intersection)."""
        v = self.get(k, [])
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list):
            raise self.err(k, f"must be a list, got {v!r}")
        out = []
        for i, item in enumerate(v):
            if isinstance(item, str):
                out.append([item])
            elif isinstance(item, list) and item and all(isinstance(x, str) for x in item):
                out.append(list(item))
            else:
                raise StudyConfigError(f"{self.key(k)}[{i}]", f"must be a column name or a list of names, got {item!r}",
                                       self.source)
        return out

    def filters(self, k: str) -> dict[str, list[Any]]:
        v = self.get(k, {})
        if not isinstance(v, dict):
            raise self.err(k, f"must be a table column = value(s), got {v!r}")
        out = {}
        for col, val in v.items():
            vals = val if isinstance(val, list) else [val]
            if not vals or any(isinstance(x, (dict, list)) for x in vals):
                raise StudyConfigError(f"{self.key(k)}.{col}", f"must be a value or a non-empty list of values, "
                                       f"got {val!r}", self.source)
            out[str(col)] = list(vals)
        return out

    def finish(self) -> None:
        unknown = sorted(set(self.t) - self.used)
        if unknown:
            raise self.err(unknown[0], f"unknown key (known keys here: {', '.join(sorted(self.used))})")


def _path(value: Any, key: str, base: Path, source: Path | None) -> Path:
    if not isinstance(value, str) or not value:
        raise StudyConfigError(key, f"must be a non-empty path string, got {value!r}", source)
    try:
        text = expand_vars(value)
    except KeyError as exc:
        raise StudyConfigError(key, f"environment variable {exc.args[0]} is not set (write "
                                    f"${{{exc.args[0]}:-default}} to give a default)", source) from None
    p = Path(os.path.expanduser(text))
    if p.is_absolute():
        return p
    lead = _VAR_RE.match(value)
    if lead is not None and os.environ.get(lead.group(1)):
        # the path starts with a variable set in the environment: a relative value was typed
        # relative to where the command runs (``export SCOREMIX_SHARED_DATA=../shared/data``)
        base = Path.cwd()
    return (base / p).resolve()


# ---------------------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------------------

def _parse_data(r: _Reader, base: Path, seed: int) -> DataConfig:
    src = r.source
    d = DataConfig()
    has_files = r.has("files") or r.has("file")
    if has_files and r.has("simulate"):
        raise r.err("simulate", "give either files or simulate, not both")
    if not has_files and not r.has("simulate"):
        raise r.err("files", "is required (or a [data.simulate] table)")
    if r.has("file"):
        if r.has("files"):
            raise r.err("file", "give either file or files, not both")
        d.files = [_path(r.get("file"), r.key("file"), base, src)]
    elif r.has("files"):
        files = r.get("files")
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files:
            raise r.err("files", f"must be a non-empty list of paths, got {files!r}")
        d.files = [_path(f, f"{r.key('files')}[{i}]", base, src) for i, f in enumerate(files)]
    else:
        s = _Reader(r.get("simulate"), r.key("simulate"), src)
        sim = SimulateConfig()
        sim.kind = s.str("kind", "cm", choices=("cm", "sv")) or "cm"
        sim.n_trials = s.int("n_trials", 20000, minimum=10) or 20000
        sim.seed = s.int("seed", seed)
        shift = s.get("subgroup_shift", {})
        if not isinstance(shift, dict):
            raise s.err("subgroup_shift", "must be a table subgroup = [negative shift, positive shift]")
        for g, v in shift.items():
            if (not isinstance(v, list) or len(v) != 2
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)):
                raise StudyConfigError(f"{s.key('subgroup_shift')}.{g}", "must be [negative shift, positive shift]",
                                       src)
            sim.subgroup_shift[str(g)] = [float(x) for x in v]
        params = s.get("params", {})
        if not isinstance(params, dict):
            raise s.err("params", "must be a table of simulate_trials / simulate_sv_trials arguments")
        sim.params = dict(params)
        s.finish()
        d.simulate = sim
    d.score = r.str("score", "score") or "score"
    d.label = r.str("label", "label") or "label"
    d.positive = r.get("positive", None)
    ren = r.get("rename", {})
    if not isinstance(ren, dict) or not all(isinstance(v, str) for v in ren.values()):
        raise r.err("rename", f"must be a table old_name = \"new_name\", got {ren!r}")
    d.rename = {str(k): v for k, v in ren.items()}
    d.filters = r.filters("filters")
    d.negate = r.filters("negate")
    d.system = r.str("system", None)
    d.speaker = r.str("speaker", "speaker") or "speaker"
    d.subgroups = r.strlist("subgroups")
    d.transform = r.str("transform", "none", choices=("none", "logit")) or "none"
    d.standardize = r.bool("standardize", False)
    d.standardize_by = r.strlist("standardize_by")
    if d.standardize_by:
        d.standardize = True
    ind = r.get("indicators", {})
    if not isinstance(ind, dict):
        raise r.err("indicators", "must be a table name = { column = value(s) }")
    for name, spec in ind.items():
        if not _NAME_RE.match(str(name)):
            raise StudyConfigError(f"{r.key('indicators')}.{name}", "is not a valid column name", src)
        sub = _Reader({"when": spec}, r.key("indicators"), src)
        try:
            d.indicators[str(name)] = sub.filters("when")
        except StudyConfigError:
            raise StudyConfigError(f"{r.key('indicators')}.{name}", f"must be a table column = value(s), "
                                   f"got {spec!r}", src) from None
    d.sample_per_system = r.int("sample_per_system", 0, minimum=0) or 0
    d.sample_by = r.str("sample_by", None)
    d.min_speakers = r.int("min_speakers", 5, minimum=1) or 5
    d.min_class_trials = r.int("min_class_trials", 30, minimum=1) or 30
    r.finish()
    return d


def _parse_model(r: _Reader, data: DataConfig) -> ModelConfig:
    name = r.str("name", required=True) or ""
    if not _NAME_RE.match(name):
        raise r.err("name", f"{name!r} may hold only letters, digits, '_', '.', '-' (it names files)")
    if r.bool("auto", False):
        return _parse_auto_model(r, data, name)
    formula = r.str("formula", required=True) or ""
    if "~" not in formula:
        raise r.err("formula", f"{formula!r} is not a formula (no '~')")
    m = ModelConfig(name=name, formula=formula)
    m.backend = r.str("backend", "native", choices=BACKENDS) or "native"
    m.REML = r.bool("REML", True)
    m.dispersion = r.str("dispersion", None)
    if m.dispersion is not None and not m.dispersion.strip().startswith("~"):
        raise r.err("dispersion", f"must be a one-sided formula such as '~ label', got {m.dispersion!r}")
    m.per_system = r.bool("per_system", data.system is not None)
    if m.per_system and data.system is None:
        raise r.err("per_system", "is true but [data] names no system column")
    m.filters = r.filters("filters")
    m.draws = r.int("draws", 500, minimum=10) or 500
    m.tune = r.int("tune", 500, minimum=10) or 500
    m.chains = r.int("chains", 2, minimum=1) or 2
    m.method = r.str("method", "collapsed", choices=("collapsed", "joint")) or "collapsed"
    m.compare_with = r.str("compare_with", "native", choices=("native", "statsmodels", "lme4", "none")) or "native"
    m.transform = r.str("transform", None, choices=TRANSFORMS)
    if m.transform is not None and m.backend not in ("native", "bayes"):
        raise r.err("transform", f"{m.transform!r} needs backend 'native' or 'bayes' (the transformation model is "
                                 f"fitted by scoremix's own engine), got backend {m.backend!r}")
    if m.transform == "monotone-by-class" and m.backend != "native":
        raise r.err("transform", f"'monotone-by-class' needs backend 'native' (posterior fits with one transform "
                                 f"per stratum are not supported), got backend {m.backend!r}")
    m.strata = r.str("strata", None)
    if m.strata is not None and m.transform != "monotone-by-class":
        raise r.err("strata", f"applies only with transform = \"monotone-by-class\" (got transform = "
                              f"{m.transform!r})")
    r.finish()
    return m


def _parse_auto_model(r: _Reader, data: DataConfig, name: str) -> ModelConfig:  # s5trust-auto
    """``[[models]]`` with ``auto = true``: :func:`scoremix.score_model` chooses the specification
    (keys ``factors``, ``covariates``, ``validate``, ``validate_share``, ``pool_shapes``, ``per_system``,
    ``filters``)."""
    for k in ("formula", "dispersion", "transform", "strata", "backend", "REML", "draws", "tune", "chains", "method",
              "compare_with"):
        if r.has(k):
            raise r.err(k, "does not apply with auto = true (score_model chooses the specification; give factors "
                           "and covariates instead)")
    m = ModelConfig(name=name, formula="", auto=True)
    m.factors = r.strlist("factors")
    m.covariates = r.strlist("covariates")
    both = sorted(set(m.factors) & set(m.covariates))
    if both:
        raise r.err("covariates", f"column(s) {both} are also listed in factors")
    m.validate = r.strlist("validate", ["trials", "speakers"])
    for i, v in enumerate(m.validate):
        if v not in ("trials", "speakers"):
            raise StudyConfigError(f"{r.key('validate')}[{i}]", f"unknown split {v!r}; choose trials or speakers",
                                   r.source)
    m.validate_share = r.float("validate_share", 0.2, 0.0, 1.0, open_lo=True, open_hi=True) or 0.2
    m.pool_shapes = r.bool("pool_shapes", False)
    m.per_system = r.bool("per_system", data.system is not None)
    if m.per_system and data.system is None:
        raise r.err("per_system", "is true but [data] names no system column")
    m.filters = r.filters("filters")
    r.finish()
    return m


def _parse_analyses(r: _Reader, data: DataConfig, models: list[ModelConfig], base: Path | None = None) -> AnalysesConfig:
    src = r.source
    a = AnalysesConfig()
    names = [m.name for m in models]
    freq = [m.name for m in models if m.backend != "bayes"]

    def model_list(sub: _Reader, k: str, allowed: list[str], default: list[str]) -> list[str]:
        got = sub.strlist(k, default)
        for i, n in enumerate(got):
            if n not in names:
                raise StudyConfigError(f"{sub.key(k)}[{i}]", f"no model named {n!r} (models: {names})", src)
            if n not in allowed:
                raise StudyConfigError(f"{sub.key(k)}[{i}]", f"model {n!r} is not usable here "
                                       f"(frequentist models: {freq})", src)
        return got

    for key in r.t:
        if key not in ANALYSES:
            raise r.err(key, f"unknown analysis; choose from {', '.join(ANALYSES)}")
    if r.has("metrics"):
        s = _Reader(r.get("metrics"), r.key("metrics"), src)
        m = MetricsConfig()
        m.eer_method = s.str("eer_method", "rocch", choices=EER_METHODS) or "rocch"
        m.p_target = s.float("p_target", 0.05, 0.0, 1.0, open_lo=True, open_hi=True) or 0.05
        m.c_miss = s.float("c_miss", 1.0, 0.0, open_lo=True) or 1.0
        m.c_fa = s.float("c_fa", 1.0, 0.0, open_lo=True) or 1.0
        m.normalize = s.bool("normalize", False)
        m.by = s.groupings("by")
        m.filters = s.filters("filters")
        m.negatives_by = s.strlist("negatives_by")
        m.cell_intervals = s.has("n_boot")
        m.n_boot = s.int("n_boot", 200, minimum=0) or 0
        m.ci = s.float("ci", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
        from scoremix.metrics import min_boot

        if 0 < m.n_boot < min_boot(m.ci):
            raise StudyConfigError(s.key("n_boot"), f"{m.n_boot} replicates are too few for a {100 * m.ci:g} % "
                                   f"interval (at least {min_boot(m.ci)}; 0 for none)", src)
        m.seed = s.int("seed", 0) or 0
        m.llr = s.bool("llr", False)
        m.speaker = data.speaker
        used = {c for cols in m.by for c in cols}
        for i, c in enumerate(m.negatives_by):
            if c not in used:
                raise StudyConfigError(f"{s.key('negatives_by')}[{i}]", f"column {c!r} is not in "
                                       f"analyses.metrics.by ({sorted(used)})", src)
        s.finish()
        a.metrics = m
    if r.has("model_eer"):
        s = _Reader(r.get("model_eer"), r.key("model_eer"), src)
        me = ModelEERConfig()
        me.models = model_list(s, "models", freq, freq)
        me.by = s.strlist("by", data.subgroups)
        me.conditional = s.bool("conditional", True)
        me.filters = s.filters("filters")
        me.n_boot = s.int("n_boot", 200, minimum=0) or 0
        me.model_interval = s.str("model_interval", "auto", choices=("auto", "parametric", "speakers")) or "auto"
        me.n_refits = s.int("n_refits", 0, minimum=0) or 0
        s.finish()
        a.model_eer = me
    if r.has("fairness"):
        s = _Reader(r.get("fairness"), r.key("fairness"), src)
        f = FairnessConfig()
        f.groups = s.strlist("groups", data.subgroups)
        if not f.groups:
            raise s.err("groups", "is required (or list [data].subgroups)")
        f.n_boot = s.int("n_boot", 200, minimum=0) or 0
        f.boot_chunk = s.int("boot_chunk", 250, minimum=0) or 0
        f.ci = s.float("ci", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
        f.interval = s.str("interval", "studentized",
                           choices=("studentized", "expanded", "bca-t", "percentile")) or "studentized"
        f.p_target = s.float("p_target", 0.05, 0.0, 1.0, open_lo=True, open_hi=True) or 0.05
        f.c_miss = s.float("c_miss", 1.0, 0.0, open_lo=True) or 1.0
        f.c_fa = s.float("c_fa", 1.0, 0.0, open_lo=True) or 1.0
        f.normalize = s.bool("normalize", False)
        f.membership = s.str("membership", "enrol", choices=("enrol", "test", "both", "either")) or "enrol"
        f.models = model_list(s, "models", names, [])
        f.conditional = s.bool("conditional", True)
        f.filters = s.filters("filters")
        f.test_speaker = s.str("test_speaker", None)
        _parse_fairness_panel(s, f)  # s5deteval
        s.finish()
        a.fairness = f
    if r.has("breakdown"):
        s = _Reader(r.get("breakdown"), r.key("breakdown"), src)
        b = BreakdownConfig()
        b.by = s.groupings("by") or [[g] for g in data.subgroups]
        if not b.by:
            raise s.err("by", "is required (or list [data].subgroups)")
        b.n_boot = s.int("n_boot", 0, minimum=0) or 0
        b.ci = s.float("ci", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
        b.threshold = s.float("threshold", None)
        b.filters = s.filters("filters")
        s.finish()
        a.breakdown = b
    if r.has("compare"):
        s = _Reader(r.get("compare"), r.key("compare"), src)
        c = CompareConfig()
        if data.system is None:
            raise s.err("systems", "needs a [data].system column")
        c.systems = s.strlist("systems")
        if len(c.systems) != 2:
            raise s.err("systems", f"must name exactly two systems, got {c.systems!r}")
        c.groups = s.strlist("groups", data.subgroups)
        if not c.groups:
            raise s.err("groups", "is required (or list [data].subgroups)")
        c.n_boot = s.int("n_boot", 200, minimum=0) or 0
        c.boot_chunk = s.int("boot_chunk", 250, minimum=0) or 0
        c.ci = s.float("ci", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
        c.trial_id = s.str("trial_id", None)
        c.measures = s.strlist("measures", ["ratio_overall", "ratio_own"])
        s.finish()
        a.compare = c
    if r.has("systems"):  # s4deteval
        s = _Reader(r.get("systems"), r.key("systems"), src)
        sc = SystemsConfig()
        if data.system is None:
            raise s.err("metrics", "needs a [data].system column (the systems to compare)")
        sc.metrics = s.strlist("metrics", ["eer", "min_dcf", "auc"])
        bad = [m for m in sc.metrics if m not in ("eer", "min_dcf", "act_dcf", "cllr", "auc")]
        if bad or not sc.metrics:
            raise s.err("metrics", f"must be among eer, min_dcf, act_dcf, cllr, auc; got {sc.metrics!r}")
        sc.systems = s.strlist("systems", [])
        sc.n_boot = s.int("n_boot", 200, minimum=0) or 0
        sc.ci = s.float("ci", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
        sc.trial_id = s.str("trial_id", None)
        sc.test = s.str("test", "auto", choices=("auto", "bootstrap", "delong")) or "auto"
        sc.adjust = s.str("adjust", "holm") or "holm"
        s.finish()
        a.systems = sc
    if r.has("contrasts") or r.has("checks"):  # s5postfit
        from scoremix.study.postfit import parse_checks, parse_contrasts
        if r.has("contrasts"):
            a.contrasts = parse_contrasts(_Reader(r.get("contrasts"), r.key("contrasts"), src), freq, names,
                                          {m.name: m.formula for m in models})
        if r.has("checks"):
            a.checks = parse_checks(_Reader(r.get("checks"), r.key("checks"), src))
    if r.has("tandem"):  # s5deteval
        a.tandem = _parse_tandem(_Reader(r.get("tandem"), r.key("tandem"), src), data, base or Path.cwd())
    if r.has("nuisance"):
        s = _Reader(r.get("nuisance"), r.key("nuisance"), src)
        n = NuisanceConfig()
        n.feature = s.str("feature", required=True) or ""
        n.train = s.filters("train")
        n.test = s.filters("test")
        n.n_components = s.int("n_components", 2, minimum=1) or 2
        s.finish()
        a.nuisance = n
    return a


def _parse_fairness_panel(s: _Reader, f: FairnessConfig) -> None:  # s5deteval
    """``panel``, ``panel_fpr`` (overall-FPR targets in (0, 1)), ``panel_llr`` of ``[analyses.fairness]``."""
    f.panel = s.bool("panel", True)
    v = s.get("panel_fpr", f.panel_fpr)
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1
                                          for x in v):
        raise s.err("panel_fpr", f"must be a list of overall false-match rates in (0, 1), got {v!r}")
    f.panel_fpr = sorted(float(x) for x in v)
    f.panel_llr = s.bool("panel_llr", False)


def _parse_tandem(s: _Reader, data: DataConfig, base: Path) -> TandemConfig:  # s5deteval
    """``[analyses.tandem]``: the ASV table (path relative to the study file), its columns, the join key."""
    t = TandemConfig()
    if not s.has("asv_file"):
        raise s.err("asv_file", "is required (the ASV score table joined to the CM trials)")
    t.asv_file = _path(s.get("asv_file"), s.key("asv_file"), base, s.source)
    t.asv_score = s.str("asv_score", "score") or "score"
    t.asv_key = s.str("asv_key", "trial_type") or "trial_type"
    t.asv_speaker = s.str("asv_speaker", "claimed_speaker") or "claimed_speaker"
    t.asv_filters = s.filters("asv_filters")
    t.join = s.str("join", "utt") or "utt"
    t.systems = s.strlist("systems", [])
    if t.systems and data.system is None:
        raise s.err("systems", "needs a [data].system column")
    t.by = s.strlist("by", [])
    if len(t.by) not in (0, 2):
        raise s.err("by", f"must be [ASV column, CM column] (e.g. [\"claimed_gender\", \"speaker_gender\"]), got {t.by!r}")
    t.ci = s.float("ci", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
    t.n_boot = s.int("n_boot", 200, minimum=0) or 0
    from scoremix.metrics import min_boot

    if 0 < t.n_boot < min_boot(t.ci):
        raise s.err("n_boot", f"must be 0 or >= {min_boot(t.ci)} for a {t.ci:g} interval, got {t.n_boot}")
    s.finish()
    return t


def parse_study(raw: Mapping[str, Any], base_dir: str | Path = ".", source: str | Path | None = None) -> StudyConfig:
    """Validate a study given as a dict (the parsed TOML); paths are relative to ``base_dir``."""
    base = Path(base_dir).resolve()
    src = Path(source) if source is not None else None
    top = _Reader(dict(raw), "", src)
    for k in raw:
        if k not in ("study", "data", "models", "analyses"):
            raise top.err(k, "unknown table; a study has [study], [data], [[models]] and [analyses]")
    st = _Reader(top.get("study", {}), "study", src)
    name = st.str("name", "study") or "study"
    if not _NAME_RE.match(name):
        raise st.err("name", f"{name!r} may hold only letters, digits, '_', '.', '-'")
    info = StudyInfo(name=name, title=st.str("title", name) or name)
    info.seed = st.int("seed", 0, minimum=0) or 0
    info.description = st.str("description", "") or ""
    out = st.get("output", None)
    info.output = _path(out, "study.output", base, src) if out is not None else None
    st.finish()
    if not top.has("data"):
        raise StudyConfigError("data", "is required", src)
    data = _parse_data(_Reader(top.get("data"), "data", src), base, info.seed)
    raw_models = top.get("models", [])
    if not isinstance(raw_models, list):
        raise StudyConfigError("models", "must be an array of tables ([[models]])", src)
    models = [_parse_model(_Reader(m, f"models[{i}]", src), data) for i, m in enumerate(raw_models)]
    seen: set[str] = set()
    for i, m in enumerate(models):
        if m.name in seen:
            raise StudyConfigError(f"models[{i}].name", f"duplicate model name {m.name!r}", src)
        seen.add(m.name)
    analyses = _parse_analyses(_Reader(top.get("analyses", {}), "analyses", src), data, models, base=base)
    return StudyConfig(study=info, data=data, models=models, analyses=analyses, source=src)


def load_study(path: str | Path, overrides: Mapping[str, Any] | Sequence[str] | None = None) -> StudyConfig:
    """Read and validate a study TOML file.

    Parameters
    ----------
    path:
        the ``.toml`` file; relative paths inside it are relative to its folder.
    overrides:
        dotted-key overrides applied before validation (see :func:`apply_overrides`).
    """
    p = Path(path)
    if not p.is_file():
        raise StudyConfigError("file", "no such study file", p)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise StudyConfigError("toml", f"not valid TOML ({exc})", p) from None
    return parse_study(apply_overrides(raw, overrides), base_dir=p.parent, source=p)
