# lme4's allFit summary on three models, for scoremix.all_fit's comparison.
# Usage: Rscript r_scripts/allfit_reference.R OUT.json
# (the optimisers of packages not in Debian, dfoptim and optimx, are left out)
suppressPackageStartupMessages({library(lme4); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/emmeans/allfit.json"
dd <- "tests/data/emmeans/data"
ss <- read.csv(file.path(dd, "sleepstudy.csv"), colClasses = c(Subject = "factor"))
mc <- read.csv(file.path(dd, "Machines.csv"), colClasses = c(Worker = "factor", Machine = "factor"))
ck <- read.csv(file.path(dd, "cake.csv"), colClasses = c(replicate = "factor", recipe = "factor", ftemp = "factor"))
models <- list(
  list(id = "sleep_slopes", formula = "Reaction ~ Days + (Days | Subject)", data = ss),
  list(id = "machines", formula = "score ~ Machine + (1 | Worker) + (1 | Worker:Machine)", data = mc),
  list(id = "cake", formula = "angle ~ recipe + temp + (1 | replicate)", data = ck))
# lme4 1.1-31's allFit() fails when dfoptim and optimx are absent (it filters meth.tab with
# the indices of the full table), so its loop is reproduced here: the same refits
# (update(fit, control = lmerControl(optimizer = ...))) and the same summary fields.
opts <- list(bobyqa = list("bobyqa", list()), Nelder_Mead = list("Nelder_Mead", list()),
             nlminbwrap = list("nlminbwrap", list()),
             nloptwrap.NLOPT_LN_NELDERMEAD = list("nloptwrap", list(algorithm = "NLOPT_LN_NELDERMEAD")),
             nloptwrap.NLOPT_LN_BOBYQA = list("nloptwrap", list(algorithm = "NLOPT_LN_BOBYQA")))
sdcor_of <- function(f) { v <- as.data.frame(VarCorr(f)); nm <- ifelse(v$grp == "Residual", "sigma",
  ifelse(is.na(v$var2), paste(v$grp, v$var1, sep = "."), paste(v$grp, v$var2, v$var1, sep = ".")))
  setNames(v$sdcor, nm) }
res <- lapply(models, function(m) {
  fit <- lmer(as.formula(m$formula), m$data)
  fits <- lapply(opts, function(o) {
    t0 <- proc.time()[["elapsed"]]
    f <- suppressWarnings(update(fit, control = lmerControl(optimizer = o[[1]], optCtrl = o[[2]])))
    list(fit = f, time = proc.time()[["elapsed"]] - t0)
  })
  list(id = m$id, formula = m$formula, optimizers = names(opts),
       which_OK = lapply(fits, function(f) TRUE),
       msgs = lapply(fits, function(f) { x <- f$fit@optinfo$conv$lme4$messages; if (is.null(x)) "[OK]" else x }),
       llik = lapply(fits, function(f) as.numeric(logLik(f$fit))),
       fixef = lapply(fits, function(f) as.list(fixef(f$fit))),
       sdcor = lapply(fits, function(f) as.list(sdcor_of(f$fit))),
       theta = lapply(fits, function(f) as.numeric(getME(f$fit, "theta"))),
       feval = lapply(fits, function(f) f$fit@optinfo$feval),
       fields = c("which.OK", "msgs", "fixef", "llik", "sdcor", "theta", "times", "feval"))
})
writeLines(toJSON(list(lme4 = as.character(packageVersion("lme4")), models = res), auto_unbox = TRUE, digits = NA), out)
cat("wrote", out, "\n")
