# Profile-likelihood and Wald intervals of lme4::glmer fits (issue 20), references for
# scoremix's GlmerResult.confint.  Reads the battery's data and model definitions
# (tests/data/glmm/<id>.json), refits with converged PIRLS as the battery does, and writes
# tests/data/glmm/profile/<id>.json.
# Usage: Rscript r_scripts/glmer_profile.R [dir] id ...
suppressMessages({library(lme4); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
dir <- if (length(args)) args[1] else "tests/data/glmm"
ids <- if (length(args) > 1) args[-1] else c("cbpp_cbind", "bacteria", "cbpp_agq5_probit")
dir.create(file.path(dir, "profile"), showWarnings = FALSE)
for (id in ids) {
  ref <- fromJSON(file.path(dir, paste0(id, ".json")))
  d <- read.csv(file.path(dir, paste0(ref$data, ".csv")))
  for (nm in names(ref$factors)) d[[nm]] <- factor(as.character(d[[nm]]), levels = ref$factors[[nm]])
  d$.w <- if (is.null(ref$weights)) 1 else d[[ref$weights]]
  fam <- get(ref$family)(link = ref$link)
  m <- suppressWarnings(glmer(as.formula(ref$formula), data = d, family = fam, weights = .w,
                              nAGQ = ref$nAGQ,
                              control = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                                     optCtrl = list(rhoend = 1e-10, maxfun = 1e5))))
  t0 <- proc.time()[["elapsed"]]
  pr <- profile(m, signames = TRUE)
  secs <- proc.time()[["elapsed"]] - t0
  ci <- confint(pr, level = 0.95)
  ci90 <- confint(pr, level = 0.90)
  wald <- confint(m, method = "Wald")
  res <- list(id = id, rows = rownames(ci), lower = unname(ci[, 1]), upper = unname(ci[, 2]),
              lower90 = unname(ci90[, 1]), upper90 = unname(ci90[, 2]),
              wald_rows = rownames(wald), wald_lower = unname(wald[, 1]), wald_upper = unname(wald[, 2]),
              profile_seconds = secs, lme4_version = as.character(packageVersion("lme4")))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA, na = "null"),
             file.path(dir, "profile", paste0(id, ".json")))
  print(ci)
}
