# The lme4-parity battery: export its data sets and fit its models with lme4 + lmerTest.
#
# Usage (from the repository root):
#   Rscript r_scripts/battery.R export OUTDIR
#       writes OUTDIR/<dataset>.csv for every data set of the battery and
#       OUTDIR/datasets.json: per data set and column its R class ("numeric", "factor",
#       "ordered") and, for factors, the levels in R's order (so Python rebuilds the same
#       factors, reference levels and contr.poly scores, whatever the locale).
#   Rscript r_scripts/battery.R fit MODELS.json DATADIR OUTDIR [--timing=N] [--core] [ID ...]
#       fits every model of MODELS.json (or only the IDs given) on DATADIR/<dataset>.csv
#       (+ DATADIR/datasets.json) and writes OUTDIR/<id>.json.  --core: the fit only (no
#       lmerTest tables, no timing), for the live tests.
#   Rscript r_scripts/battery.R time MODELS.json DATADIR REFDIR [--timing=N] [ID ...]
#       re-measures lme4's fit time only (default settings, median of N runs, default 5) and
#       updates lme4_time_s / lme4_time_runs / timing_env in REFDIR/<id>.json (run it on an
#       idle machine: the stored times were taken on a shared, loaded one).
#
# Each model is fitted with lmerTest::lmer at tight settings: nloptwrap with
# ftol_abs = 1e-12, xtol_abs = 1e-10, ftol_rel = 1e-15, xtol_rel = 1e-12, and bobyqa with
# rhoend = 1e-12; the fit with the lower criterion is kept (the "tight optimum").  The JSON
# holds: REML criterion or deviance, fixef, SE, vcov, theta, sigma, VarCorr, lmerTest's
# Satterthwaite and Kenward-Roger coefficient tables (Estimate, Std. Error, df, t value,
# Pr(>|t|)), anova tables of type 3/2/1 with Satterthwaite and of type 3 with
# Kenward-Roger (Sum Sq, Mean Sq, NumDF, DenDF, F value, Pr(>F)), ranova, and lme4's fit
# time at its default settings (median of --timing runs, default 3) with the BLAS in use.
# Kenward-Roger is computed for REML fits with at most 2000 observations (pbkrtest forms
# n x n matrices); anything lmerTest/pbkrtest cannot do is stored as null with the error.
#
# The data sets come from lme4, nlme, lmerTest and R's datasets package (Debian's
# r-cran-lme4, r-cran-nlme, r-cran-lmertest, r-base).  Derived columns are made here:
# sleepstudy$off = 2.5 * Days (an offset), sleepstudy$w = 1 + (Days %% 3) / 2 (weights),
# cbpp$prop = incidence / size; InstEval_sub = the rows of the first 100 lecturers (d).

suppressPackageStartupMessages({
  library(lme4)
  library(lmerTest)
  library(jsonlite)
})

battery_datasets <- function() {
  e <- new.env()
  ss <- lme4::sleepstudy
  ss$off <- 2.5 * ss$Days
  ss$w <- 1 + (ss$Days %% 3) / 2
  cb <- lme4::cbpp
  cb$prop <- cb$incidence / cb$size
  ie <- lme4::InstEval
  ie <- droplevels(ie[ie$d %in% levels(ie$d)[1:100], ])
  rownames(ie) <- NULL
  list(
    sleepstudy = ss, Dyestuff = lme4::Dyestuff, Dyestuff2 = lme4::Dyestuff2,
    Penicillin = lme4::Penicillin, Pastes = lme4::Pastes, cake = lme4::cake, cbpp = cb,
    InstEval_sub = ie, grouseticks = lme4::grouseticks[, c("TICKS", "BROOD", "HEIGHT", "YEAR", "LOCATION")],
    Arabidopsis = lme4::Arabidopsis,
    Orthodont = as.data.frame(nlme::Orthodont), Oxboys = as.data.frame(nlme::Oxboys),
    BodyWeight = as.data.frame(nlme::BodyWeight), ChickWeight = as.data.frame(datasets::ChickWeight),
    Machines = as.data.frame(nlme::Machines), Rail = as.data.frame(nlme::Rail),
    Ovary = as.data.frame(nlme::Ovary), Pixel = as.data.frame(nlme::Pixel),
    Oats = as.data.frame(nlme::Oats), ergoStool = as.data.frame(nlme::ergoStool),
    Dialyzer = as.data.frame(nlme::Dialyzer), Alfalfa = as.data.frame(nlme::Alfalfa),
    Assay = as.data.frame(nlme::Assay), Wafer = as.data.frame(nlme::Wafer),
    Gasoline = as.data.frame(nlme::Gasoline), PBG = as.data.frame(nlme::PBG),
    Earthquake = as.data.frame(nlme::Earthquake), IGF = as.data.frame(nlme::IGF),
    Spruce = as.data.frame(nlme::Spruce),
    MathAchieve = as.data.frame(nlme::MathAchieve)[, c("School", "Minority", "Sex", "SES", "MathAch")],
    Soybean = as.data.frame(nlme::Soybean)[, c("Plot", "Variety", "Year", "Time", "weight")],
    Orange = as.data.frame(datasets::Orange),
    ham = lmerTest::ham, carrots = lmerTest::carrots,
    TVbo = lmerTest::TVbo[, c("Assessor", "TVset", "Repeat", "Picture", "Coloursaturation")]
  )
}

col_meta <- function(df) {
  out <- list()
  for (col in names(df)) {
    x <- df[[col]]
    if (is.factor(x)) {
      out[[col]] <- list(type = if (is.ordered(x)) "ordered" else "factor", levels = levels(x))
    } else {
      out[[col]] <- list(type = "numeric")
    }
  }
  out
}

export_all <- function(outdir) {
  dir.create(outdir, showWarnings = FALSE, recursive = TRUE)
  ds <- battery_datasets()
  meta <- list()
  for (nm in names(ds)) {
    df <- as.data.frame(ds[[nm]])
    attr(df, "formula") <- NULL
    meta[[nm]] <- col_meta(df)
    for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
    utils::write.csv(df, file.path(outdir, paste0(nm, ".csv")), row.names = FALSE)
    cat(sprintf("wrote %s.csv (%d rows)\n", nm, nrow(df)))
  }
  writeLines(jsonlite::toJSON(meta, auto_unbox = TRUE, pretty = TRUE),
             file.path(outdir, "datasets.json"))
}

read_dataset <- function(datadir, name, meta) {
  df <- utils::read.csv(file.path(datadir, paste0(name, ".csv")), stringsAsFactors = FALSE,
                        check.names = FALSE)
  m <- meta[[name]]
  for (col in names(m)) {
    info <- m[[col]]
    if (info$type %in% c("factor", "ordered")) {
      df[[col]] <- factor(as.character(df[[col]]), levels = unlist(info$levels),
                          ordered = info$type == "ordered")
    }
  }
  df
}

tight_controls <- function() {
  list(
    nloptwrap = lme4::lmerControl(optimizer = "nloptwrap", calc.derivs = FALSE,
                                  optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10,
                                                 ftol_rel = 1e-15, xtol_rel = 1e-12,
                                                 maxeval = 100000)),
    bobyqa = lme4::lmerControl(optimizer = "bobyqa", calc.derivs = FALSE,
                               optCtrl = list(rhoend = 1e-12, maxfun = 100000))
  )
}

# Build the lmer call for one model entry (weights/offset are column names, evaluated in
# the data frame as lme4 users write them).
model_call <- function(fun, spec, data_sym, ctrl_sym) {
  args <- list(stats::as.formula(spec$formula, env = globalenv()), data = data_sym,
               REML = isTRUE(spec$REML),
               control = ctrl_sym)
  if (!is.null(spec$weights)) args$weights <- as.name(spec$weights)
  if (!is.null(spec$offset)) args$offset <- as.name(spec$offset)
  if (!is.null(spec$contrasts)) args$contrasts <- lapply(spec$contrasts, identity)
  as.call(c(list(fun), args))
}

table_records <- function(tab) {
  if (is.null(tab)) return(NULL)
  df <- as.data.frame(tab)
  list(rows = rownames(df), columns = colnames(df),
       values = lapply(colnames(df), function(cn) unname(as.numeric(df[[cn]]))))
}

safely <- function(expr) {
  tryCatch(list(value = force(expr), error = NULL),
           error = function(e) list(value = NULL, error = conditionMessage(e)))
}

# The data and control live in the global environment as `battery_d` / `battery_ctrl`:
# lmerTest's ranova() and anova() re-evaluate the model call there.
fit_one <- function(spec, data, ntiming = 3L, core = FALSE) {
  ctrls <- tight_controls()
  fits <- list()
  assign("battery_d", data, envir = globalenv())
  cl <- model_call(quote(lmerTest::lmer), spec, quote(battery_d), quote(battery_ctrl))
  for (nm in names(ctrls)) {
    assign("battery_ctrl", ctrls[[nm]], envir = globalenv())
    f <- tryCatch(suppressMessages(suppressWarnings(eval(cl, globalenv()))), error = function(e) e)
    if (!inherits(f, "error")) fits[[nm]] <- f
  }
  if (!length(fits)) stop("no optimiser could fit ", spec$id)
  crit <- vapply(fits, function(f) as.numeric(lme4::REMLcrit(f) * isREML(f) + deviance(f, REML = FALSE) * !isREML(f)), 0)
  best <- names(which.min(crit))
  m <- fits[[best]]
  assign("battery_ctrl", ctrls[[best]], envir = globalenv())
  reml <- isREML(m)
  vc <- as.data.frame(VarCorr(m))
  for (col in c("grp", "var1", "var2")) vc[[col]] <- as.character(vc[[col]])
  V <- as.matrix(vcov(m))
  out <- list(
    id = spec$id, dataset = spec$dataset, formula = spec$formula, REML = reml,
    nobs = nobs(m), ngrps = as.list(ngrps(m)),
    optimizer = best, criteria = as.list(crit),
    criterion = unname(min(crit)),
    fixef = as.list(fixef(m)), se = as.list(sqrt(diag(V))),
    vcov = unname(V), theta = unname(getME(m, "theta")), theta_names = names(getME(m, "theta")),
    sigma = sigma(m), varcorr = vc, singular = isSingular(m, tol = 1e-4),
    X_names = colnames(getME(m, "X")),
    cnms = getME(m, "cnms")
  )
  if (core) return(out)
  sat <- safely(summary(m, ddf = "Satterthwaite")$coefficients)
  out$coef_satterthwaite <- table_records(sat$value)
  kr_ok <- reml && nobs(m) <= 2000
  if (kr_ok) {
    kr <- safely(summary(m, ddf = "Kenward-Roger")$coefficients)
    out$coef_kenward_roger <- table_records(kr$value)
    out$coef_kenward_roger_error <- kr$error
  } else {
    out$coef_kenward_roger <- NULL
    out$coef_kenward_roger_error <- if (reml) "skipped: more than 2000 observations" else "skipped: ML fit"
  }
  an <- list()
  an_err <- list()
  for (ty in c(3, 2, 1)) {
    a <- safely(anova(m, type = ty, ddf = "Satterthwaite"))
    an[[paste0("type", ty, "_satterthwaite")]] <- table_records(a$value)
    if (!is.null(a$error)) an_err[[paste0("type", ty, "_satterthwaite")]] <- a$error
  }
  if (kr_ok) {
    a <- safely(anova(m, type = 3, ddf = "Kenward-Roger"))
    an[["type3_kenward_roger"]] <- table_records(a$value)
    if (!is.null(a$error)) an_err[["type3_kenward_roger"]] <- a$error
  }
  out$anova <- an
  out$anova_errors <- an_err
  rn <- safely(suppressMessages(suppressWarnings(lmerTest::ranova(m))))
  out$ranova <- table_records(rn$value)
  out$ranova_error <- rn$error
  c(out, time_lme4(spec, ntiming))
}

# lme4's own fit time at its DEFAULT settings (what users run), on battery_d.
time_lme4 <- function(spec, ntiming) {
  out <- list()
  times <- numeric(0)
  assign("battery_ctrl", lme4::lmerControl(), envir = globalenv())
  cl <- model_call(quote(lme4::lmer), spec, quote(battery_d), quote(battery_ctrl))
  for (i in seq_len(ntiming)) {
    t0 <- proc.time()[["elapsed"]]
    suppressMessages(suppressWarnings(eval(cl, globalenv())))
    times <- c(times, proc.time()[["elapsed"]] - t0)
  }
  out$lme4_time_s <- stats::median(times)
  out$lme4_time_runs <- times
  out$timing_env <- list(lme4 = as.character(packageVersion("lme4")),
                         lmerTest = as.character(packageVersion("lmerTest")),
                         pbkrtest = as.character(packageVersion("pbkrtest")),
                         R = R.version.string, blas = extSoftVersion()[["BLAS"]],
                         lapack = La_library(),
                         OPENBLAS_NUM_THREADS = Sys.getenv("OPENBLAS_NUM_THREADS"),
                         loadavg = tryCatch(readLines("/proc/loadavg", n = 1L),
                                            error = function(e) NA_character_))
  out
}

main <- function(args) {
  if (!length(args)) stop("usage: battery.R export OUTDIR | fit MODELS.json DATADIR OUTDIR [--timing=N] [ID ...]", call. = FALSE)
  if (args[1] == "export") {
    export_all(args[2])
    return(invisible())
  }
  if (!(args[1] %in% c("fit", "time"))) stop("unknown command '", args[1], "'", call. = FALSE)
  models <- jsonlite::fromJSON(args[2], simplifyVector = FALSE)
  datadir <- args[3]
  outdir <- args[4]
  rest <- args[-(1:4)]
  ntiming <- if (args[1] == "time") 5L else 3L
  tim <- grep("^--timing=", rest, value = TRUE)
  if (length(tim)) ntiming <- as.integer(sub("^--timing=", "", tim[1]))
  core <- "--core" %in% rest
  ids <- setdiff(rest, c(tim, "--core"))
  meta <- jsonlite::fromJSON(file.path(datadir, "datasets.json"), simplifyVector = FALSE)
  dir.create(outdir, showWarnings = FALSE, recursive = TRUE)
  for (spec in models) {
    if (length(ids) && !(spec$id %in% ids)) next
    data <- read_dataset(datadir, spec$dataset, meta)
    if (args[1] == "time") {
      path <- file.path(outdir, paste0(spec$id, ".json"))
      ref <- jsonlite::fromJSON(path, simplifyVector = FALSE)
      assign("battery_d", data, envir = globalenv())
      tm <- time_lme4(spec, ntiming)
      for (k in names(tm)) ref[[k]] <- tm[[k]]
      writeLines(jsonlite::toJSON(ref, auto_unbox = TRUE, digits = NA, null = "null", na = "null"), path)
      cat(sprintf("%-24s lme4 %.4fs\n", spec$id, tm$lme4_time_s))
      next
    }
    t0 <- proc.time()[["elapsed"]]
    res <- tryCatch(fit_one(spec, data, ntiming, core), error = function(e) {
      list(id = spec$id, error = conditionMessage(e))
    })
    writeLines(jsonlite::toJSON(res, auto_unbox = TRUE, digits = NA, null = "null", na = "null",
                                pretty = FALSE),
               file.path(outdir, paste0(spec$id, ".json")))
    cat(sprintf("%-24s %6.1fs %s\n", spec$id, proc.time()[["elapsed"]] - t0,
                if (is.null(res$error)) format(res$criterion, digits = 12) else paste("ERROR", res$error)))
  }
}

if (sys.nframe() == 0L) main(commandArgs(trailingOnly = TRUE))
