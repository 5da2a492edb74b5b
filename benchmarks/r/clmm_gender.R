# Cumulative-link mixed model of binned scores (ordinal::clmm), one class at a time.
# Usage: Rscript clmm_gender.R in.csv out.json
# in.csv columns: cls (pos/neg), cat (integer category), gender, speaker, attack.
# Model per class: P(cat <= j) = F(theta_j - eta), eta = gender (+ attack, negatives) + b_speaker,
# b ~ N(0, s^2); link logit.  Output: thresholds (named by category), fixed effects, speaker modes.
suppressPackageStartupMessages({library(ordinal); library(jsonlite)})
a <- commandArgs(TRUE)
d <- read.csv(a[1], stringsAsFactors = TRUE)
out <- list()
for (cl in c("pos", "neg")) {
  x <- d[d$cls == cl, ]
  x$cat <- factor(x$cat, levels = sort(unique(x$cat)), ordered = TRUE)
  x$gender <- factor(x$gender)
  f <- if (cl == "pos") cat ~ gender + (1 | speaker) else cat ~ gender + attack + (1 | speaker)
  x$attack <- factor(x$attack)
  m <- clmm(f, data = x, link = "logit", nAGQ = 1)
  re <- ranef(m)$speaker
  out[[cl]] <- list(levels = as.integer(levels(x$cat)), theta = unname(m$alpha), beta = as.list(m$beta),
                    speaker = setNames(as.list(re[, 1]), rownames(re)), sd = unname(VarCorr(m)$speaker[1]) ^ 0.5,
                    logLik = as.numeric(logLik(m)))
}
writeLines(toJSON(out, digits = 15, auto_unbox = TRUE), a[2])
