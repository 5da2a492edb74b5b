# Fit a linear mixed model with lme4::lmer and write the scoremix result JSON
# (docs/lmer-result-schema.md, schema "scoremix.lmer/1").
#
# Usage:
#   Rscript r_scripts/fit_lme4.R data.csv "formula" out.json [--ml] [--tight] [--weights=COL]
#                                [--levels=levels.json] [--control=control.json]
#
#   --ml          maximum likelihood (default: REML)
#   --tight       lmerControl(optimizer = "nloptwrap",
#                             optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10,
#                                            ftol_rel = 1e-15, xtol_rel = 1e-12))
#                 lme4's default tolerances are loose (variance components can be off by
#                 ~3e-4 relative on crossed data); stored references use --tight.
#   --weights=COL prior weights taken from column COL of the CSV.
#   --levels=F    JSON {column: [level, ...]} (or {column: {"levels": [...], "ordered": true}}
#                 for an ordered factor): make these columns factors with exactly these
#                 levels in this order (scoremix passes its own level order, so R and Python
#                 fit the same contrasts whatever R's collation locale is).
#   --control=F   JSON {"optimizer": "...", "optCtrl": {...}} for lmerControl (overrides
#                 --tight).
#
# The CSV is read with strings as factors (levels sorted as R sorts them).  `timing_s` is
# the elapsed time of the lmer() call alone (no R start-up, no I/O), for benchmarks.
#
# The functions below are also sourced by scoremix's rpy2 backend
# (scoremix.lme.backends.lme4_backend), so both paths write the same JSON: the script's
# main block only runs when the file is executed with Rscript (sys.nframe() == 0).

suppressPackageStartupMessages({
  library(lme4)
  library(jsonlite)
})

smx_read_csv <- function(path) {
  utils::read.csv(path, stringsAsFactors = TRUE, check.names = FALSE)
}

# Factor levels from a named list {column: levels} (as read from --levels=F); an entry
# {"levels": [...], "ordered": true} makes an ordered factor (contr.poly in lme4).
smx_apply_levels <- function(data, levels) {
  for (col in names(levels)) {
    if (!(col %in% names(data))) stop("levels given for column '", col, "' which is not in the data", call. = FALSE)
    lv <- levels[[col]]
    ord <- FALSE
    if (is.list(lv) && !is.null(names(lv))) {
      ord <- isTRUE(lv$ordered)
      lv <- lv$levels
    }
    data[[col]] <- factor(as.character(data[[col]]), levels = as.character(unlist(lv)), ordered = ord)
  }
  data
}

# lmerControl: `control` (a list with optional elements optimizer, optCtrl) wins over `tight`.
smx_lmer_control <- function(tight = FALSE, control = NULL) {
  if (!is.null(control) && length(control)) {
    args <- list()
    if (!is.null(control$optimizer)) args$optimizer <- control$optimizer
    if (!is.null(control$optCtrl)) args$optCtrl <- as.list(control$optCtrl)
    do.call(lme4::lmerControl, args)
  } else if (isTRUE(tight)) {
    # ftol_abs/xtol_abs alone do not tighten nloptwrap: NLopt stops at the first criterion
    # met and lme4's default xtol_rel = 1e-6 is met first (on simulated crossed data the
    # ML deviance was then 2e-7 above the optimum and an SD 1.3e-4 relative off), so the
    # relative tolerances are tightened as well.
    lme4::lmerControl(optimizer = "nloptwrap",
                      optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10, ftol_rel = 1e-15,
                                     xtol_rel = 1e-12, maxeval = 100000))
  } else {
    lme4::lmerControl()
  }
}

# Fit lmer; returns list(model = merMod, timing_s = elapsed seconds of the fit).
smx_fit_lmer <- function(data, formula, REML = TRUE, tight = FALSE, weights = NULL,
                         control = NULL) {
  f <- stats::as.formula(formula)  # environment: this frame, so `weights` is found
  ctrl <- smx_lmer_control(tight, control)
  w <- weights
  m <- NULL
  tm <- system.time({
    if (is.null(w)) {
      m <- lme4::lmer(f, data = data, REML = REML, control = ctrl)
    } else {
      m <- lme4::lmer(f, data = data, REML = REML, control = ctrl, weights = w)
    }
  })
  list(model = m, timing_s = unname(tm[["elapsed"]]))
}

smx_unbox_named <- function(x) {
  out <- lapply(as.list(x), function(v) jsonlite::unbox(unname(v)))
  names(out) <- names(x)
  out
}

# as.data.frame(VarCorr(m)) as a data frame with character columns (NA -> JSON null).
smx_varcorr_df <- function(vc) {
  df <- as.data.frame(vc)
  for (col in c("grp", "var1", "var2")) df[[col]] <- as.character(df[[col]])
  df[, c("grp", "var1", "var2", "vcov", "sdcor")]
}

# One grouping factor's conditional SDs: rows = levels, columns = terms.  `pv` is the
# postVar / condVar attribute: a p x p x n array, or a list of such arrays (one per term
# when a factor appears in several terms, e.g. (x || g)).
smx_condsd <- function(pv, nlev) {
  blocks <- if (is.list(pv)) pv else list(pv)
  cols <- lapply(blocks, function(a) {
    p <- dim(a)[1]
    vapply(seq_len(p), function(j) sqrt(a[j, j, ]), numeric(nlev))
  })
  out <- do.call(cbind, lapply(cols, function(x) matrix(x, nrow = nlev)))
  out
}

smx_ranef_list <- function(re) {
  out <- list()
  for (g in names(re)) {
    df <- re[[g]]
    pv <- attr(df, "postVar")
    if (is.null(pv)) pv <- attr(df, "condVar")
    vals <- as.matrix(df)
    dimnames(vals) <- NULL
    cs <- if (is.null(pv)) NULL else smx_condsd(pv, nrow(df))
    out[[g]] <- list(levels = rownames(df), terms = colnames(df),
                     values = vals, condsd = cs)
  }
  out
}

# The schema as an R list, from a fitted merMod.
smx_lmer_result <- function(m, formula, REML, timing_s = NA_real_, backend = "lme4") {
  fe <- lme4::fixef(m)
  V <- as.matrix(stats::vcov(m))
  dimnames(V) <- NULL
  se <- sqrt(diag(V))
  names(se) <- names(fe)
  ll <- as.numeric(stats::logLik(m))
  conv <- m@optinfo$conv
  converged <- isTRUE(conv$opt == 0) && length(conv$lme4$messages) == 0 &&
    length(m@optinfo$warnings) == 0
  list(
    schema = jsonlite::unbox("scoremix.lmer/1"),
    backend = jsonlite::unbox(backend),
    formula = jsonlite::unbox(formula),
    dispersion = NULL,
    REML = jsonlite::unbox(isTRUE(REML)),
    nobs = jsonlite::unbox(as.integer(stats::nobs(m))),
    ngrps = smx_unbox_named(vapply(lme4::ngrps(m), as.integer, integer(1))),
    fixef = smx_unbox_named(fe),
    se = smx_unbox_named(se),
    vcov = V,
    theta = unname(lme4::getME(m, "theta")),
    sigma = jsonlite::unbox(stats::sigma(m)),
    sigma_by = NULL,
    varcorr = smx_varcorr_df(lme4::VarCorr(m)),
    loglik = jsonlite::unbox(ll),
    reml_criterion = if (isTRUE(REML)) jsonlite::unbox(-2 * ll) else NULL,
    deviance = if (isTRUE(REML)) NULL else jsonlite::unbox(stats::deviance(m)),
    aic = jsonlite::unbox(stats::AIC(m)),
    bic = jsonlite::unbox(stats::BIC(m)),
    converged = jsonlite::unbox(converged),
    singular = jsonlite::unbox(lme4::isSingular(m, tol = 1e-4)),
    ranef = smx_ranef_list(lme4::ranef(m, condVar = TRUE)),
    timing_s = jsonlite::unbox(timing_s)
  )
}

smx_to_json <- function(res) {
  as.character(jsonlite::toJSON(res, auto_unbox = FALSE, digits = NA, na = "null",
                                null = "null", dataframe = "rows", matrix = "rowmajor",
                                pretty = FALSE))
}

# Fit and return the JSON text (used by the rpy2 backend as well as by the script).
smx_fit_lme4_json <- function(data, formula, REML = TRUE, tight = FALSE, weights = NULL,
                              control = NULL) {
  fit <- smx_fit_lmer(data, formula, REML = REML, tight = tight, weights = weights,
                      control = control)
  smx_to_json(smx_lmer_result(fit$model, formula, REML, fit$timing_s))
}

smx_parse_args <- function(args) {
  flags <- args[startsWith(args, "--")]
  pos <- args[!startsWith(args, "--")]
  if (length(pos) != 3) {
    stop("usage: Rscript fit_lme4.R data.csv \"formula\" out.json [--ml] [--tight] [--weights=COL]",
         call. = FALSE)
  }
  value_of <- function(name) {
    hit <- flags[startsWith(flags, paste0("--", name, "="))]
    if (length(hit)) sub(paste0("^--", name, "="), "", hit[1]) else NULL
  }
  valued <- grepl("^--(weights|levels|control|disp)=", flags)
  unknown <- setdiff(flags[!valued], c("--ml", "--tight"))
  if (length(unknown)) stop("unknown option(s): ", paste(unknown, collapse = " "), call. = FALSE)
  list(data = pos[1], formula = pos[2], out = pos[3], REML = !("--ml" %in% flags),
       tight = "--tight" %in% flags, weights = value_of("weights"),
       levels = value_of("levels"), control = value_of("control"), disp = value_of("disp"))
}

# Read the CSV named by the parsed arguments, with --levels applied; returns list(data, weights).
smx_read_inputs <- function(a) {
  d <- smx_read_csv(a$data)
  if (!is.null(a$levels)) d <- smx_apply_levels(d, jsonlite::fromJSON(a$levels, simplifyVector = FALSE))
  w <- NULL
  if (!is.null(a$weights)) {
    if (!(a$weights %in% names(d))) stop("weights column '", a$weights, "' not in ", a$data, call. = FALSE)
    w <- d[[a$weights]]
  }
  list(data = d, weights = w)
}

if (sys.nframe() == 0L) {
  a <- smx_parse_args(commandArgs(trailingOnly = TRUE))
  inp <- smx_read_inputs(a)
  ctl <- if (is.null(a$control)) NULL else jsonlite::fromJSON(a$control, simplifyVector = TRUE)
  txt <- smx_fit_lme4_json(inp$data, a$formula, REML = a$REML, tight = a$tight,
                           weights = inp$weights, control = ctl)
  writeLines(txt, a$out)
}
