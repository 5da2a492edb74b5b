# Fit a Gaussian linear mixed model with a class-specific residual variance with glmmTMB
# and write the scoremix result JSON (docs/lmer-result-schema.md) plus `sigma_by`.
#
# Usage:
#   Rscript r_scripts/fit_glmmtmb.R data.csv "formula" out.json [--ml] [--disp="~ label"]
#                                   [--levels=levels.json]
#
# Model: y = X beta + Z b + e, e_i ~ N(0, sigma^2_{c(i)}), with the dispersion model
#   log(sigma^2_i) = x_d,i' beta_d     (dispformula, default "~ label").
# Checked for glmmTMB 1.1.5 (Debian): for the gaussian family the dispersion linear
# predictor is the log *variance*: exp(fixef(m)$disp) = sigma^2 and
# predict(m, type = "disp") = sigma (the SD); with dispformula = ~ 1, exp(beta_d) equals
# lme4's sigma(m)^2.  REML = TRUE integrates out beta (exactly, the model is Gaussian),
# which gives the same REML log-likelihood as lme4 (checked on sleepstudy: -871.8141).
#
# Conventions for the schema (as for the weights formulation used by scoremix's native
# engine): `sigma` is the residual SD of the reference (first) level of the dispersion
# factor; `theta` is lme4's relative Cholesky factor chol(Sigma_k) / sigma lower triangle
# (column-major); `varcorr`'s "Residual" row is the reference level; AIC/BIC count every
# parameter (fixed effects + variance components + dispersion coefficients), as lme4 does.
# `timing_s` is the elapsed time of the glmmTMB() call alone.

suppressPackageStartupMessages({
  library(lme4)  # dummy() and the shared helpers
  library(glmmTMB)
  library(jsonlite)
})

smx_script_dir <- function() {
  a <- commandArgs(trailingOnly = FALSE)
  f <- sub("^--file=", "", a[startsWith(a, "--file=")])
  if (length(f)) dirname(normalizePath(f[1])) else getwd()
}

if (!exists("smx_to_json")) {
  # sys.frame(1)$ofile is set when this file is source()d; fall back to Rscript's --file=.
  .smx_dir <- tryCatch(dirname(sys.frame(1)$ofile), error = function(e) smx_script_dir())
  source(file.path(.smx_dir, "fit_lme4.R"))
}

smx_theta_from_sigma <- function(S, sigma) {
  p <- nrow(S)
  L <- tryCatch(t(chol(S)) / sigma, error = function(e) {
    ev <- eigen(S, symmetric = TRUE)
    Ssafe <- ev$vectors %*% diag(pmax(ev$values, 0), p) %*% t(ev$vectors)
    t(chol(Ssafe + diag(1e-300, p), pivot = FALSE)) / sigma
  })
  L[lower.tri(L, diag = TRUE)]
}

smx_glmmtmb_varcorr <- function(vc, sigma_ref) {
  rows <- list()
  for (g in names(vc)) {
    S <- vc[[g]]
    nm <- colnames(S)
    p <- nrow(S)
    sds <- sqrt(diag(S))
    for (j in seq_len(p)) {
      rows[[length(rows) + 1]] <- data.frame(grp = g, var1 = nm[j], var2 = NA_character_,
                                             vcov = S[j, j], sdcor = sds[j])
    }
    if (p > 1) for (j in 1:(p - 1)) for (i in (j + 1):p) {
      rows[[length(rows) + 1]] <- data.frame(grp = g, var1 = nm[j], var2 = nm[i],
                                             vcov = S[i, j], sdcor = S[i, j] / (sds[i] * sds[j]))
    }
  }
  rows[[length(rows) + 1]] <- data.frame(grp = "Residual", var1 = NA_character_,
                                         var2 = NA_character_, vcov = sigma_ref^2,
                                         sdcor = sigma_ref)
  out <- do.call(rbind, rows)
  rownames(out) <- NULL
  out
}

smx_fit_glmmtmb <- function(data, formula, dispformula = "~ label", REML = TRUE) {
  f <- stats::as.formula(formula)
  df <- stats::as.formula(dispformula)
  m <- NULL
  tm <- system.time({
    m <- glmmTMB::glmmTMB(f, data = data, dispformula = df, REML = REML,
                          family = stats::gaussian())
  })
  list(model = m, timing_s = unname(tm[["elapsed"]]))
}

smx_glmmtmb_result <- function(m, data, formula, dispformula, REML, timing_s = NA_real_) {
  fe <- glmmTMB::fixef(m)$cond
  V <- as.matrix(stats::vcov(m)$cond)
  dimnames(V) <- NULL
  se <- sqrt(diag(V))
  names(se) <- names(fe)
  bd <- glmmTMB::fixef(m)$disp
  # residual SD per level of the dispersion factor(s): sigma = exp(x_d' beta_d / 2)
  dvars <- all.vars(stats::as.formula(dispformula))
  if (length(dvars) != 1) stop("sigma_by needs a dispersion formula with one factor, got ", dispformula)
  lev <- levels(factor(data[[dvars]]))
  nd <- data.frame(factor(lev, levels = lev))
  names(nd) <- dvars
  Xd <- stats::model.matrix(stats::as.formula(dispformula), nd)
  sig_by <- exp(0.5 * drop(Xd %*% bd))
  names(sig_by) <- lev
  sigma_ref <- sig_by[[1]]
  vc <- glmmTMB::VarCorr(m)$cond
  theta <- unlist(lapply(vc, function(S) smx_theta_from_sigma(S, sigma_ref)), use.names = FALSE)
  ll <- as.numeric(stats::logLik(m))
  nobs <- stats::nobs(m)
  k <- length(fe) + length(theta) + length(bd)
  re <- glmmTMB::ranef(m, condVar = TRUE)$cond
  ngrps <- vapply(re, nrow, integer(1))
  diag_idx <- unlist(lapply(vc, function(S) {
    p <- nrow(S); M <- matrix(FALSE, p, p); diag(M) <- TRUE; M[lower.tri(M, diag = TRUE)]
  }))
  list(
    schema = jsonlite::unbox("scoremix.lmer/1"),
    backend = jsonlite::unbox("glmmTMB"),
    formula = jsonlite::unbox(formula),
    dispersion = jsonlite::unbox(dispformula),
    REML = jsonlite::unbox(isTRUE(REML)),
    nobs = jsonlite::unbox(as.integer(nobs)),
    ngrps = smx_unbox_named(ngrps),
    fixef = smx_unbox_named(fe),
    se = smx_unbox_named(se),
    vcov = V,
    theta = theta,
    sigma = jsonlite::unbox(sigma_ref),
    sigma_by = smx_unbox_named(sig_by),
    disp_coef = smx_unbox_named(bd),
    varcorr = smx_glmmtmb_varcorr(vc, sigma_ref),
    loglik = jsonlite::unbox(ll),
    reml_criterion = if (isTRUE(REML)) jsonlite::unbox(-2 * ll) else NULL,
    deviance = if (isTRUE(REML)) NULL else jsonlite::unbox(-2 * ll),
    aic = jsonlite::unbox(-2 * ll + 2 * k),
    bic = jsonlite::unbox(-2 * ll + log(nobs) * k),
    converged = jsonlite::unbox(isTRUE(m$fit$convergence == 0) && isTRUE(m$sdr$pdHess)),
    singular = jsonlite::unbox(any(theta[diag_idx] < 1e-4)),
    ranef = smx_ranef_list(re),
    timing_s = jsonlite::unbox(timing_s)
  )
}

smx_fit_glmmtmb_json <- function(data, formula, dispformula = "~ label", REML = TRUE) {
  fit <- smx_fit_glmmtmb(data, formula, dispformula, REML)
  smx_to_json(smx_glmmtmb_result(fit$model, data, formula, dispformula, REML, fit$timing_s))
}

if (sys.nframe() == 0L) {
  a <- smx_parse_args(commandArgs(trailingOnly = TRUE))
  if (!is.null(a$weights) || !is.null(a$control) || a$tight) {
    stop("fit_glmmtmb.R takes only --ml, --disp= and --levels=", call. = FALSE)
  }
  disp <- if (is.null(a$disp)) "~ label" else a$disp
  inp <- smx_read_inputs(a)
  txt <- smx_fit_glmmtmb_json(inp$data, a$formula, disp, REML = a$REML)
  writeLines(txt, a$out)
}
