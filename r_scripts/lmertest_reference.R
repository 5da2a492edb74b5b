# lmerTest / pbkrtest reference tables for scoremix's inference cross-checks.
#
# Usage:
#   Rscript r_scripts/lmertest_reference.R OUTDIR [name ...]
#
# For every model of the battery below (or only the named ones) writes OUTDIR/<name>.csv
# (the model's columns, complete cases, factors as labels) and OUTDIR/<name>.json with
#   formula, REML, weights (column or null), factors {column: levels in R's order},
#   criterion (REML criterion or ML deviance), fixef, sigma, theta,
#   coef_satterthwaite / coef_kenward_roger       (summary(m, ddf = ...)$coefficients)
#   anova_<type>_<ddf> for type 1, 2, 3            (anova(m, type = , ddf = ))
#   anova_lme4                                     (anova(m, ddf = "lme4"): lme4's table)
#   ranova                                         (lmerTest::ranova(m))
# Tables are {"rownames": [...], "columns": {name: [values]}} with NA written as null.
# Kenward-Roger tables are written for REML fits only (pbkrtest refits ML fits by REML).
# Fits are tight (BOBYQA to rhoend = 1e-12) so that the references are the optimum, not
# lme4's default stopping point.
#
# Stored references: tests/data/lmertest/ (regenerate with
#   Rscript r_scripts/lmertest_reference.R tests/data/lmertest).

suppressPackageStartupMessages({
  library(lmerTest)
  library(pbkrtest)
  library(jsonlite)
})

args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 1) stop("usage: Rscript lmertest_reference.R OUTDIR [name ...]", call. = FALSE)
outdir <- args[1]
only <- args[-1]
dir.create(outdir, showWarnings = FALSE, recursive = TRUE)

# minqa's BOBYQA with rhoend = 1e-12: on carrots, lme4's nloptwrap even with tightened
# tolerances stopped 2e-10 above the optimum (theta 1e-6 relative off, enough to move a
# p-value of 1e-36 by 1e-4 relative); this control reaches it.
ctrl <- lmerControl(optimizer = "bobyqa",
                    optCtrl = list(rhobeg = 0.2, rhoend = 1e-12, maxfun = 100000))

unorder <- function(df) {
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- factor(df[[col]], ordered = FALSE)
  df
}

sleep_w <- lme4::sleepstudy
sleep_w$w <- 1 + (sleep_w$Days %% 3) / 2

cake_u <- unorder(lme4::cake)

# sleep_weights rescaled: y*sqrt(w) ~ 0 + sqrt(w) + Days*sqrt(w) + (0 + sqrt(w) | Subject) has
# unit residual weights and the same likelihood in beta, theta, sigma (up to a constant), so
# pbkrtest's Kenward-Roger (which ignores prior weights) is correct for it.
sleep_wt <- sleep_w
sleep_wt$sw <- sqrt(sleep_wt$w)
sleep_wt$ysw <- sleep_wt$Reaction * sleep_wt$sw
sleep_wt$dsw <- sleep_wt$Days * sleep_wt$sw

# ham without the cell Product 4 x Information 2: X loses a column (rank deficiency) and
# the type III hypotheses are built with a missing cell (lmerTest's message).
ham_mc <- lmerTest::ham[!(lmerTest::ham$Product == "4" & lmerTest::ham$Information == "2"), ]

battery <- list(
  sleep_slopes = list(data = lme4::sleepstudy, formula = "Reaction ~ Days + (Days | Subject)"),
  sleep_slopes_ml = list(data = lme4::sleepstudy, formula = "Reaction ~ Days + (Days | Subject)",
                         REML = FALSE),
  sleep_uncorr = list(data = lme4::sleepstudy, formula = "Reaction ~ Days + (Days || Subject)"),
  sleep_weights = list(data = sleep_w, formula = "Reaction ~ Days + (1 | Subject)", weights = "w"),
  sleep_weights_unit = list(data = sleep_wt, formula = "ysw ~ 0 + sw + dsw + (0 + sw | Subject)"),
  penicillin = list(data = lme4::Penicillin, formula = "diameter ~ 1 + (1 | plate) + (1 | sample)"),
  pastes = list(data = lme4::Pastes, formula = "strength ~ 1 + (1 | batch/cask)"),
  ham = list(data = lmerTest::ham,
             formula = "Informed.liking ~ Product * Information + (1 | Consumer) + (1 | Product:Consumer)"),
  ham_missing_cell = list(data = ham_mc,
                          formula = "Informed.liking ~ Product * Information + (1 | Consumer)"),
  ham_ml = list(data = lmerTest::ham, REML = FALSE,
                formula = "Informed.liking ~ Product * Information + Gender + (1 | Consumer) + (1 | Product:Consumer)"),
  carrots = list(data = lmerTest::carrots,
                 formula = "Preference ~ sens1 + sens2 * Homesize + (1 + sens2 | Consumer) + (1 | Product)"),
  tvbo = list(data = lmerTest::TVbo,
              formula = "Coloursaturation ~ TVset * Picture + (1 | Assessor) + (1 | Assessor:TVset)"),
  machines = list(data = unorder(nlme::Machines),
                  formula = "score ~ Machine + (1 | Worker) + (1 | Worker:Machine)"),
  orthodont = list(data = unorder(as.data.frame(nlme::Orthodont)),
                   formula = "distance ~ age * Sex + (age | Subject)"),
  cake_unordered = list(data = cake_u,
                        formula = "angle ~ recipe * temperature + (1 | recipe:replicate)"),
  cake_temp = list(data = cake_u, formula = "angle ~ recipe * temp + (1 | recipe:replicate)"),
  cake_temp_nointercept = list(data = cake_u, formula = "angle ~ 0 + recipe + temp + (1 | replicate)")
)

table_json <- function(tab) {
  tab <- as.data.frame(tab, check.names = FALSE)
  cols <- lapply(names(tab), function(nm) {
    v <- as.numeric(tab[[nm]])
    lapply(v, function(x) if (is.na(x)) NULL else unbox(x))
  })
  names(cols) <- names(tab)
  list(rownames = rownames(tab), columns = cols)
}

run_one <- function(name, spec) {
  REML <- if (is.null(spec$REML)) TRUE else spec$REML
  f <- as.formula(spec$formula)
  cols <- unique(c(all.vars(f), spec$weights))
  data <- spec$data[, cols, drop = FALSE]
  data <- data[stats::complete.cases(data), , drop = FALSE]
  data <- droplevels(as.data.frame(data))
  rownames(data) <- NULL
  if (is.null(spec$weights)) {
    m <- lmerTest::lmer(f, data = data, REML = REML, control = ctrl)
  } else {
    m <- eval(bquote(lmerTest::lmer(f, data = data, REML = REML, control = ctrl,
                                    weights = .(as.name(spec$weights)))))
  }
  factors <- list()
  for (col in names(data)) if (is.factor(data[[col]])) factors[[col]] <- levels(data[[col]])
  out <- list(
    name = unbox(name), formula = unbox(spec$formula), REML = unbox(REML),
    weights = if (is.null(spec$weights)) NULL else unbox(spec$weights),
    factors = factors, nobs = unbox(nobs(m)),
    criterion = unbox(if (REML) unname(lme4::REMLcrit(m)) else unname(deviance(m))),
    fixef = as.list(fixef(m)), sigma = unbox(sigma(m)), theta = unname(getME(m, "theta")),
    coef_satterthwaite = table_json(summary(m, ddf = "Satterthwaite")$coefficients)
  )
  if (REML) out$coef_kenward_roger <- table_json(summary(m, ddf = "Kenward-Roger")$coefficients)
  for (type in 1:3) {
    out[[sprintf("anova_%d_satterthwaite", type)]] <-
      table_json(anova(m, type = type, ddf = "Satterthwaite"))
    if (REML) out[[sprintf("anova_%d_kenward_roger", type)]] <-
      table_json(anova(m, type = type, ddf = "Kenward-Roger"))
  }
  out$anova_lme4 <- table_json(anova(m, ddf = "lme4"))
  out$ranova <- table_json(ranova(m))
  for (col in names(data)) if (is.factor(data[[col]])) data[[col]] <- as.character(data[[col]])
  utils::write.csv(data, file.path(outdir, paste0(name, ".csv")), row.names = FALSE)
  writeLines(toJSON(out, digits = NA, null = "null", pretty = TRUE),
             file.path(outdir, paste0(name, ".json")))
  cat(sprintf("wrote %s\n", name))
}

names_run <- if (length(only)) only else names(battery)
for (nm in names_run) {
  if (is.null(battery[[nm]])) stop("unknown model '", nm, "'", call. = FALSE)
  run_one(nm, battery[[nm]])
}
