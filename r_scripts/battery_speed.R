# Time lme4::lmer on a battery of models and compute tight optima (for
# benchmarks/lme_battery_speed.py).
#
# Usage:
#   Rscript r_scripts/battery_speed.R models.json OUTDIR [--no-timing]
#
# models.json: a list of {"name", "data", "formula", "REML", "factors", "reps"} where `data`
# names a CSV under OUTDIR (written by this script on first use: see `export_data`) and
# `factors` lists columns to make factors.  For each model the script writes, to
# OUTDIR/lme4_times.json, the elapsed time of `lmer()` alone (minimum over `reps` calls,
# default lmerControl, data already in memory), its criterion, and the criterion of a tight
# refit (bobyqa from lme4's optimum, rhoend = 1e-12) that the Python side compares with.
# R's BLAS (sessionInfo) is written to OUTDIR/r_session.json.  With --no-timing only the
# tight optima are computed (the caller times lme4 itself through rpy2 with smx_time_lmer,
# interleaved with scoremix's fits).  The main block only runs under Rscript.

suppressPackageStartupMessages({
  library(lme4)
  library(jsonlite)
})

export_data <- function(name) {
  df <- switch(name,
    sleepstudy = transform(lme4::sleepstudy, fDays = Days),
    Penicillin = lme4::Penicillin,
    Pastes = lme4::Pastes,
    Dyestuff = lme4::Dyestuff,
    InstEval = lme4::InstEval[, c("s", "d", "dept", "service", "y")],
    cake = lme4::cake,
    Orthodont = as.data.frame(nlme::Orthodont),
    Oxboys = transform(as.data.frame(nlme::Oxboys), age2 = age^2),
    Machines = as.data.frame(nlme::Machines),
    BodyWeight = as.data.frame(nlme::BodyWeight),
    Rail = as.data.frame(nlme::Rail),
    Pixel = transform(as.data.frame(nlme::Pixel), day2 = day^2),
    ChickWeight = transform(as.data.frame(datasets::ChickWeight), Time2 = Time^2),
    stop("unknown data set ", name))
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
  path <- file.path(outdir, paste0(name, ".csv"))
  utils::write.csv(df, path, row.names = FALSE)
  path
}


# Elapsed seconds of one lmer() call on a CSV (for rpy2 callers timing lme4 in-process,
# interleaved with another engine): data read and factors made before the clock starts.
smx_time_lmer <- function(csv, formula, REML, factors) {
  d <- utils::read.csv(csv, stringsAsFactors = TRUE)
  for (col in factors) d[[col]] <- factor(d[[col]])
  f <- as.formula(formula)
  t0 <- proc.time()[["elapsed"]]
  fit <- suppressMessages(suppressWarnings(lmer(f, d, REML = REML)))
  proc.time()[["elapsed"]] - t0
}

if (sys.nframe() == 0L) {
  args <- commandArgs(trailingOnly = TRUE)
  if (length(args) < 2) stop("usage: Rscript battery_speed.R models.json OUTDIR [--no-timing]", call. = FALSE)
  timing <- !("--no-timing" %in% args)
  models <- jsonlite::fromJSON(args[1], simplifyVector = FALSE)
  outdir <- args[2]
  dir.create(outdir, showWarnings = FALSE, recursive = TRUE)

  session <- list(R = R.version.string, lme4 = as.character(packageVersion("lme4")),
                  BLAS = sessionInfo()$BLAS, LAPACK = sessionInfo()$LAPACK)
  writeLines(jsonlite::toJSON(session, auto_unbox = TRUE, pretty = TRUE),
             file.path(outdir, "r_session.json"))

  cache <- list()
  out <- list()
  for (m in models) {
    if (is.null(cache[[m$data]])) {
      path <- file.path(outdir, paste0(m$data, ".csv"))
      if (!file.exists(path)) path <- export_data(m$data)
      cache[[m$data]] <- utils::read.csv(path, stringsAsFactors = TRUE)
    }
    d <- cache[[m$data]]
    for (col in unlist(m$factors)) d[[col]] <- factor(d[[col]])
    f <- as.formula(m$formula)
    reml <- isTRUE(m$REML)
    reps <- if (!timing) 1L else if (is.null(m$reps)) 3L else as.integer(m$reps)
    times <- numeric(reps)
    fit <- NULL
    for (r in seq_len(reps)) {
      t0 <- proc.time()[["elapsed"]]
      fit <- suppressMessages(suppressWarnings(lmer(f, d, REML = reml)))
      times[r] <- proc.time()[["elapsed"]] - t0
    }
    crit <- if (reml) REMLcrit(fit) else deviance(fit)
    tight <- suppressMessages(suppressWarnings(update(fit, start = getME(fit, "theta"),
      control = lmerControl(optimizer = "bobyqa",
                            optCtrl = list(rhobeg = 2e-4, rhoend = 1e-12, maxfun = 1e5)))))
    crit_tight <- min(crit, if (reml) REMLcrit(tight) else deviance(tight))
    out[[m$name]] <- list(time_s = min(times), times = times, criterion = crit,
                          criterion_tight = crit_tight,
                          theta_tight = unname(getME(tight, "theta")))
    cat(sprintf("%-40s lme4 %.3f s  crit %.10f  tight %.10f\n", m$name, min(times), crit, crit_tight))
  }
  writeLines(jsonlite::toJSON(out, auto_unbox = TRUE, digits = NA, pretty = TRUE),
             file.path(outdir, "lme4_times.json"))
}

# Elapsed seconds of one lme4::lmer() call (default lmerControl) on a model of the issue-12
# battery (tests/data/battery/: data set with R's column classes via battery.R's
# read_dataset, weights/offset/contrasts via its model_call), for rpy2 callers.  battery.R
# must have been sourced.
smx_time_battery <- function(datadir, spec_json) {
  spec <- jsonlite::fromJSON(spec_json, simplifyVector = FALSE)
  meta <- jsonlite::fromJSON(file.path(datadir, "datasets.json"), simplifyVector = FALSE)
  assign("battery_d", read_dataset(datadir, spec$dataset, meta), envir = globalenv())
  assign("battery_ctrl", lme4::lmerControl(), envir = globalenv())
  cl <- model_call(quote(lme4::lmer), spec, quote(battery_d), quote(battery_ctrl))
  t0 <- proc.time()[["elapsed"]]
  suppressMessages(suppressWarnings(eval(cl, globalenv())))
  proc.time()[["elapsed"]] - t0
}
