# Reference for the class-stratified transformation model (transform = "monotone-by-class"):
# with no random effects it is the cumulative probit model with class-specific thresholds,
#   P(bin <= j | label, x) = Phi(theta_j + nominal_j[label] - beta * x),
# i.e. ordinal::clm(bin ~ x, nominal = ~ label, link = "probit").
# Usage: Rscript r_scripts/fit_clm_nominal.R data.csv out.json
suppressMessages({library(ordinal); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
d$bin <- factor(d$bin, ordered = TRUE)
d$label <- factor(d$label, levels = c("bonafide", "spoof"))
m <- clm(bin ~ x, nominal = ~ label, data = d, link = "probit",
         control = clm.control(gradTol = 1e-10, maxIter = 500))
a <- m$alpha
J <- nlevels(d$bin) - 1
thr_bona <- unname(a[1:J])
thr_spoof <- unname(a[1:J] + a[(J + 1):(2 * J)])
out <- list(loglik = as.numeric(logLik(m)), beta_x = unname(coef(m)["x"]),
            se_x = unname(sqrt(diag(vcov(m)))["x"]),
            thresholds_bonafide = thr_bona, thresholds_spoof = thr_spoof)
writeLines(toJSON(out, digits = NA, auto_unbox = TRUE), args[2])
