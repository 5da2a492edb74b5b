# Reference fits of ordinal::clm / ordinal::clmm (probit link) for scoremix's
# transformation mixed models (tests/test_transform_ordinal.py).
#
# Usage: Rscript r_scripts/fit_clm.R <data.csv> <out.json> <kind> [formula]
#   kind = "clm":  clm(bin ~ label, scale = ~ label, link = "probit")
#   kind = "clmm": clmm(bin ~ label + (1 | speaker), link = "probit")   (Laplace, nAGQ = 1)
#   kind = "clmm_formula": clmm(<formula>, link = "probit") (benchmarks/transform_speed.py)
# data.csv has columns bin (integer 1..K), label, speaker.
# Output JSON: thresholds (alpha_1..alpha_{K-1}), beta (labelspoof), zeta (log scale of
# spoof, clm only), sd_speaker (clmm only), loglik, vcov_beta (Var of beta), seconds.
suppressMessages({library(ordinal); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1], stringsAsFactors = FALSE)
d$bin <- factor(d$bin, levels = sort(unique(d$bin)), ordered = TRUE)
d$label <- factor(d$label, levels = c("bonafide", "spoof"))
d$speaker <- factor(d$speaker)
if ("attack" %in% names(d)) d$attack <- factor(d$attack)
kind <- args[3]
t0 <- proc.time()[["elapsed"]]
if (kind == "clm") {
  m <- clm(bin ~ label, scale = ~ label, data = d, link = "probit",
           control = clm.control(gradTol = 1e-10, relTol = 1e-10, maxIter = 1000))
  out <- list(thresholds = unname(m$alpha), beta = unname(m$beta[["labelspoof"]]),
              zeta = unname(m$zeta[["labelspoof"]]), loglik = as.numeric(logLik(m)),
              vcov_beta = vcov(m)["labelspoof", "labelspoof"])
} else if (kind == "clmm_formula") {
  m <- clmm(as.formula(args[4]), data = d, link = "probit")
  out <- list(thresholds = unname(m$alpha), beta = unname(m$beta[["labelspoof"]]),
              sd = lapply(VarCorr(m), function(v) unname(attr(v, "stddev"))),
              loglik = as.numeric(logLik(m)))
} else {
  m <- clmm(bin ~ label + (1 | speaker), data = d, link = "probit",
            control = clmm.control(gradTol = 1e-8, maxIter = 500))
  out <- list(thresholds = unname(m$alpha), beta = unname(m$beta[["labelspoof"]]),
              sd_speaker = unname(attr(VarCorr(m)$speaker, "stddev")),
              loglik = as.numeric(logLik(m)),
              vcov_beta = vcov(m)["labelspoof", "labelspoof"])
}
out$seconds <- proc.time()[["elapsed"]] - t0
out$n <- nrow(d)
out$ordinal_version <- as.character(packageVersion("ordinal"))
writeLines(toJSON(out, digits = I(15), auto_unbox = TRUE), args[2])
