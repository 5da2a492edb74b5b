# Tight lme4 optima for the engine-speed tests (tests/test_engine_gradient.py).
#
# Usage (from the repository root):
#   Rscript r_scripts/engine_references.R tests/data/engine
#
# Writes Orthodont.csv, Oxboys.csv (with age2 = age^2) and Machines.csv (small, committed)
# and one JSON per model with lme4's tight optimum: nloptwrap with tight tolerances, then
# bobyqa restarted from that optimum (rhoend = 1e-12); the lower criterion is kept.  The
# InstEval model's data is not committed (the tests export InstEval at run time); only its
# optimum (theta, criterion, fixef) is stored.

suppressPackageStartupMessages({
  library(lme4)
  library(jsonlite)
})

args <- commandArgs(trailingOnly = TRUE)
outdir <- if (length(args)) args[1] else "tests/data/engine"
dir.create(outdir, showWarnings = FALSE, recursive = TRUE)

write_csv <- function(df, name) {
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
  utils::write.csv(df, file.path(outdir, paste0(name, ".csv")), row.names = FALSE)
}
write_csv(as.data.frame(nlme::Orthodont), "Orthodont")
write_csv(transform(as.data.frame(nlme::Oxboys), age2 = age^2), "Oxboys")
write_csv(as.data.frame(nlme::Machines), "Machines")

read_data <- function(name) {
  if (name == "InstEval") {
    d <- lme4::InstEval
    d$service <- as.integer(as.character(d$service))  # as exported by export_datasets.R
    return(d)
  }
  utils::read.csv(file.path(outdir, paste0(name, ".csv")), stringsAsFactors = TRUE)
}

models <- list(
  list(name = "orthodont_reml", data = "Orthodont", factors = "Subject",
       formula = "distance ~ age * Sex + (age | Subject)", REML = TRUE),
  list(name = "orthodont_ml", data = "Orthodont", factors = "Subject",
       formula = "distance ~ age * Sex + (age | Subject)", REML = FALSE),
  list(name = "oxboys_reml", data = "Oxboys", factors = "Subject",
       formula = "height ~ age + age2 + (age + age2 | Subject)", REML = TRUE),
  list(name = "machines_reml", data = "Machines", factors = "Worker",
       formula = "score ~ Machine + (Machine | Worker)", REML = TRUE),
  list(name = "insteval_slopes_reml", data = "InstEval", factors = c("s", "d"),
       formula = "y ~ service + (1 | s) + (service | d)", REML = TRUE)
)

crit_of <- function(m) if (isREML(m)) REMLcrit(m) else deviance(m)
for (mm in models) {
  d <- read_data(mm$data)
  for (col in mm$factors) d[[col]] <- factor(d[[col]])
  f <- as.formula(mm$formula)
  m1 <- lmer(f, d, REML = mm$REML,
             control = lmerControl(optimizer = "nloptwrap",
                                   optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10,
                                                  ftol_rel = 1e-15, xtol_rel = 1e-12,
                                                  maxeval = 100000)))
  m2 <- update(m1, start = getME(m1, "theta"),
               control = lmerControl(optimizer = "bobyqa",
                                     optCtrl = list(rhobeg = 2e-4, rhoend = 1e-12, maxfun = 1e5)))
  m <- if (crit_of(m2) < crit_of(m1)) m2 else m1
  out <- list(name = mm$name, data = mm$data, formula = mm$formula, REML = mm$REML,
              factors = mm$factors, criterion = crit_of(m),
              theta = unname(getME(m, "theta")), theta_names = names(getME(m, "theta")),
              fixef = as.list(fixef(m)), lme4 = as.character(packageVersion("lme4")))
  writeLines(jsonlite::toJSON(out, auto_unbox = TRUE, digits = NA, pretty = TRUE),
             file.path(outdir, paste0(mm$name, ".json")))
  cat(sprintf("%-22s %.12f\n", mm$name, crit_of(m)))
}
