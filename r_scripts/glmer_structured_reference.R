# cs() and ar1() random-effect covariances in a binomial GLMM (issue 20): glmmTMB fits
# (Laplace) as references for scoremix.glmer; glmmTMB's cs() is lme4 2.0's cs() (one
# correlation, a variance per column) and its ar1() lme4 2.0's ar1() (one variance,
# correlation rho^|i-j| over the ordered columns; glmmTMB needs a factor in 0 + time).
# Writes tests/data/glmm/structured/<id>.json and the data set.
suppressMessages({library(glmmTMB); library(jsonlite)})
out <- if (length(commandArgs(TRUE))) commandArgs(TRUE)[1] else "tests/data/glmm/structured"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
set.seed(42)
n_g <- 80; n_t <- 4; per <- 6
d <- expand.grid(rep = seq_len(per), time = seq_len(n_t), g = seq_len(n_g))
S <- 0.9^2 * 0.6^abs(outer(1:n_t, 1:n_t, "-"))
b <- t(chol(S)) %*% matrix(rnorm(n_t * n_g), n_t)
d$x <- rnorm(nrow(d))
eta <- -0.4 + 0.5 * d$x + 0.2 * (d$time - 2.5) + b[cbind(d$time, d$g)]
d$y <- rbinom(nrow(d), 1, plogis(eta))
d$time <- factor(paste0("t", d$time)); d$g <- factor(sprintf("g%02d", d$g)); d$rep <- NULL
write.csv(d, file.path(out, "structured.csv"), row.names = FALSE)
cases <- list(
  list(id = "cs_binomial", formula = "y ~ x + time + cs(0 + time | g)"),
  list(id = "ar1_binomial", formula = "y ~ x + time + ar1(0 + time | g)"))
for (cs in cases) {
  m <- glmmTMB(as.formula(cs$formula), data = d, family = binomial)
  vc <- VarCorr(m)$cond$g
  res <- list(id = cs$id, formula = cs$formula, criterion = as.numeric(-2 * logLik(m)),
              fixef = as.list(fixef(m)$cond), se = unname(sqrt(diag(vcov(m)$cond))),
              sd = unname(attr(vc, "stddev")), cor = unname(attr(vc, "correlation")),
              df = attr(logLik(m), "df"), glmmTMB_version = as.character(packageVersion("glmmTMB")))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA), file.path(out, paste0(cs$id, ".json")))
  cat(cs$id, res$criterion, res$sd, "\n")
}
