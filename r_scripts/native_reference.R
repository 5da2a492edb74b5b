# Reference values for scoremix's native LMM engine (tests/test_native.py & co.).
# Usage: Rscript r_scripts/native_reference.R tests/data/native
# Writes <name>.csv (data) and <name>.json (lme4 fits, anova, confint) with tight optimizer tolerances.
suppressMessages({library(lme4); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/native"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
ctl <- lmerControl(optimizer = "nloptwrap", optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10,
                                                          ftol_rel = 1e-15, xtol_rel = 1e-12,
                                                          maxeval = 1e5))

fit_dict <- function(m) {
  vc <- as.data.frame(VarCorr(m))
  re <- ranef(m, condVar = TRUE)
  rl <- lapply(names(re), function(g) {
    df <- re[[g]]; pv <- attr(df, "postVar")
    csd <- t(sapply(seq_len(nrow(df)), function(i) sqrt(diag(as.matrix(pv[, , i])))))
    if (ncol(df) == 1) csd <- matrix(csd, ncol = 1)
    list(levels = rownames(df), terms = colnames(df), values = unname(as.matrix(df)),
         condsd = unname(csd))
  })
  names(rl) <- names(re)
  reml <- isREML(m)
  list(schema = "scoremix.lmer/1", backend = "lme4", formula = deparse(formula(m)),
       REML = reml, nobs = nobs(m), ngrps = as.list(ngrps(m)),
       fixef = as.list(fixef(m)), se = as.list(sqrt(diag(as.matrix(vcov(m))))),
       vcov = unname(as.matrix(vcov(m))), theta = unname(getME(m, "theta")),
       theta_names = names(getME(m, "theta")),
       sigma = sigma(m), varcorr = lapply(seq_len(nrow(vc)), function(i) list(
         grp = vc$grp[i], var1 = if (is.na(vc$var1[i])) NULL else vc$var1[i],
         var2 = if (is.na(vc$var2[i])) NULL else vc$var2[i], vcov = vc$vcov[i], sdcor = vc$sdcor[i])),
       loglik = as.numeric(logLik(m)), reml_criterion = if (reml) unname(REMLcrit(m)) else NULL,
       deviance = if (!reml) deviance(m) else NULL, aic = AIC(m), bic = BIC(m),
       singular = isSingular(m, tol = 1e-4), ranef = rl,
       fitted = unname(fitted(m)), residuals = unname(residuals(m)))
}
save <- function(x, name) write_json(x, file.path(out, paste0(name, ".json")), digits = NA,
                                      auto_unbox = TRUE, null = "null", pretty = FALSE)

# 1. sleepstudy: correlated slopes, REML and ML; anova; confint
write.csv(sleepstudy, file.path(out, "sleepstudy.csv"), row.names = FALSE)
m1 <- lmer(Reaction ~ Days + (Days | Subject), sleepstudy, control = ctl)
m1ml <- lmer(Reaction ~ Days + (Days | Subject), sleepstudy, REML = FALSE, control = ctl)
m0 <- lmer(Reaction ~ Days + (1 | Subject), sleepstudy, control = ctl)
m0ml <- lmer(Reaction ~ Days + (1 | Subject), sleepstudy, REML = FALSE, control = ctl)
av <- suppressMessages(anova(m0, m1))
ci_w <- confint(m1, method = "Wald")
ci_p <- suppressMessages(confint(m1, method = "profile"))
ci_p0 <- suppressMessages(confint(m0ml, method = "profile"))
pred_new <- data.frame(Days = c(0, 3.5, 9), Subject = c("308", "372", "999"))
cif <- function(ci) list(names = rownames(ci), lower = unname(ci[, 1]), upper = unname(ci[, 2]))
save(list(reml = fit_dict(m1), ml = fit_dict(m1ml), m0_reml = fit_dict(m0), m0_ml = fit_dict(m0ml),
          anova = list(rows = rownames(av), npar = av$npar, AIC = av$AIC, BIC = av$BIC,
                       logLik = av$logLik, deviance = av$deviance, Chisq = av$Chisq, Df = av$Df,
                       p = av[["Pr(>Chisq)"]]),
          confint_wald = cif(ci_w), confint_profile = cif(ci_p), confint_profile_m0ml = cif(ci_p0),
          predict = list(newdata = pred_new,
                         full = unname(predict(m1, newdata = pred_new, allow.new.levels = TRUE)),
                         fixed = unname(predict(m1, newdata = pred_new, re.form = NA)))),
     "sleepstudy")

# 2. Penicillin: crossed
write.csv(Penicillin, file.path(out, "penicillin.csv"), row.names = FALSE)
mp <- lmer(diameter ~ 1 + (1 | plate) + (1 | sample), Penicillin, control = ctl)
mpml <- lmer(diameter ~ 1 + (1 | plate) + (1 | sample), Penicillin, REML = FALSE, control = ctl)
save(list(reml = fit_dict(mp), ml = fit_dict(mpml)), "penicillin")

# 3. Pastes: nested
write.csv(Pastes, file.path(out, "pastes.csv"), row.names = FALSE)
mn <- lmer(strength ~ 1 + (1 | batch/cask), Pastes, control = ctl)
save(list(reml = fit_dict(mn)), "pastes")

# 4. simulated crossed detector table with prior weights
set.seed(20261122)
ns <- 60; na <- 8; n <- 3000
d <- data.frame(speaker = sprintf("spk%02d", sample.int(ns, n, TRUE)),
                attack = sprintf("A%02d", sample.int(na, n, TRUE)),
                label = rbinom(n, 1, 0.3), x = rnorm(n))
bs <- rnorm(ns, 0, 0.5); names(bs) <- sprintf("spk%02d", 1:ns)
ba <- rnorm(na, 0, 1.5); names(ba) <- sprintf("A%02d", 1:na)
sa <- rnorm(na, 0, 0.8); names(sa) <- sprintf("A%02d", 1:na)
d$w <- runif(n, 0.5, 2)
d$score <- -1 + 2.5 * d$label + 0.3 * d$x + bs[d$speaker] + ba[d$attack] + sa[d$attack] * d$label +
  rnorm(n, 0, 1) / sqrt(d$w)
write.csv(d, file.path(out, "detector.csv"), row.names = FALSE)
md <- lmer(score ~ label + x + (1 | speaker) + (1 | attack), d, weights = w, control = ctl)
mdml <- lmer(score ~ label + x + (1 | speaker) + (1 | attack), d, weights = w, REML = FALSE, control = ctl)
mds <- lmer(score ~ label + x + (1 | speaker) + (1 + label | attack), d, weights = w, control = ctl)
save(list(reml = fit_dict(md), ml = fit_dict(mdml), slope = fit_dict(mds)), "detector")

# 5. singular fit: no group variance
# (the first seed for which lme4 reports a singular fit)
for (s in 1:100) {
  set.seed(s)
  g <- data.frame(g = rep(sprintf("g%d", 1:6), each = 5), y = rnorm(30))
  ms <- suppressMessages(lmer(y ~ 1 + (1 | g), g, control = ctl))
  if (isSingular(ms, tol = 1e-4)) break
}
write.csv(g, file.path(out, "singular.csv"), row.names = FALSE)
ci_s <- suppressWarnings(suppressMessages(confint(ms, method = "profile")))
# confint's spline interpolation of the profile is coarse next to the boundary: also the exact
# root of zeta(sd) = qnorm(0.975) with lme4's own profiled deviance (devfun2, sigma optimised)
msml <- suppressMessages(lmer(y ~ 1 + (1 | g), g, REML = FALSE, control = ctl))
dd <- lme4:::devfun2(msml)
zeta <- function(v) sqrt(optimize(function(s) dd(c(v, s)), c(0.05, 5), tol = 1e-12)$objective - deviance(msml))
up <- uniroot(function(v) zeta(v) - qnorm(0.975), c(0.2, 1), tol = 1e-12)$root
save(list(reml = fit_dict(ms), confint_profile = cif(ci_s), sig01_upper_exact = up), "singular")

# 6. class-specific residual variance via weighted lmer, rho optimised over the REML criterion
set.seed(99)
n <- 2000
h <- data.frame(speaker = sprintf("s%02d", sample.int(40, n, TRUE)),
                attack = sprintf("B%d", sample.int(6, n, TRUE)), label = rbinom(n, 1, 0.5))
bs <- rnorm(40, 0, 0.4); names(bs) <- sprintf("s%02d", 1:40)
ba <- rnorm(6, 0, 1); names(ba) <- sprintf("B%d", 1:6)
h$score <- 0.5 + 2 * h$label + bs[h$speaker] + ba[h$attack] + rnorm(n, 0, ifelse(h$label == 1, 2, 1))
write.csv(h, file.path(out, "dispersion.csv"), row.names = FALSE)
disp_fit <- function(REML) {
  crit <- function(lr) {
    h$wt <- ifelse(h$label == 1, exp(-lr), 1)
    m <- lmer(score ~ label + (1 | speaker) + (1 | attack), h, weights = wt, REML = REML, control = ctl)
    if (REML) REMLcrit(m) else deviance(m)
  }
  o <- optimize(crit, c(-3, 3), tol = 1e-10)
  h$wt <- ifelse(h$label == 1, exp(-o$minimum), 1)
  m <- lmer(score ~ label + (1 | speaker) + (1 | attack), h, weights = wt, REML = REML, control = ctl)
  f <- fit_dict(m)
  f$rho <- exp(o$minimum); f$criterion <- o$objective
  f$sigma_by <- list("0" = sigma(m), "1" = sigma(m) * sqrt(exp(o$minimum)))
  f
}
save(list(reml = disp_fit(TRUE), ml = disp_fit(FALSE)), "dispersion")
cat("done\n")
