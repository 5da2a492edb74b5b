# lme4 2.0's cs() and ar1() random-effect covariances in lmer (issue 20): references for
# scoremix.lmer.  Debian's lme4 1.1-31 has no cs()/ar1(); the references are
#  * glmmTMB (REML and ML) for cs() (heterogeneous SDs, one correlation: lme4 2.0's cs) and
#    ar1() (one SD, rho^|i-j|: lme4 2.0's ar1);
#  * lme4 + lmerTest for cs(..., hom = TRUE) on the indicator columns of a factor, which for
#    rho >= 0 is the model y ~ ... + (1 | g) + (1 | g:time) (Var = s2_g + s2_gt, rho =
#    s2_g / Var): criterion, fixed effects, SEs and Satterthwaite df.
# Writes tests/data/lmer_structured/<id>.json and the data set structured_lmm.csv.
suppressMessages({library(glmmTMB); library(lme4); library(lmerTest); library(Matrix)
                  library(jsonlite)})
out <- if (length(commandArgs(TRUE))) commandArgs(TRUE)[1] else "tests/data/lmer_structured"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
set.seed(7)
n_g <- 60; n_t <- 4; per <- 3
d <- expand.grid(rep = seq_len(per), time = seq_len(n_t), g = seq_len(n_g))
D <- diag(c(1.2, 1.0, 0.8, 1.1))
S <- D %*% (0.5^abs(outer(1:n_t, 1:n_t, "-"))) %*% D
b <- t(chol(S)) %*% matrix(rnorm(n_t * n_g), n_t)
d$x <- round(rnorm(nrow(d)), 4)
d$y <- round(2 + 0.5 * d$x + 0.3 * d$time + b[cbind(d$time, d$g)] + rnorm(nrow(d), sd = 0.7), 6)
d$time <- factor(paste0("t", d$time)); d$g <- factor(sprintf("g%02d", d$g)); d$rep <- NULL
# a crossed factor (9 sites, SD 0.6) for y2: the structured term first or in the "rest" block
site <- (seq_len(nrow(d)) - 1) %% 9
d$site <- factor(paste0("s", site)); d$y2 <- round(d$y + rnorm(9, sd = 0.6)[site + 1], 6)
write.csv(d, file.path(out, "structured_lmm.csv"), row.names = FALSE)
d <- read.csv(file.path(out, "structured_lmm.csv"), stringsAsFactors = TRUE)

tmb_cases <- list(
  list(id = "cs", formula = "y ~ x + time + cs(0 + time | g)"),
  list(id = "ar1", formula = "y ~ x + time + ar1(0 + time | g)"),
  list(id = "cs_slope", formula = "y ~ x + time + cs(1 + x | g)"),
  list(id = "crossed_ar1", formula = "y2 ~ x + time + ar1(0 + time | g) + (1 | site)"),
  list(id = "crossed_cs_site", formula = "y2 ~ x + time + cs(0 + time | site) + (1 | g)",
       grp = "site"))
for (cs in tmb_cases) for (reml in c(TRUE, FALSE)) {
  m <- glmmTMB(as.formula(cs$formula), data = d, REML = reml)
  grp <- if (is.null(cs$grp)) "g" else cs$grp
  vc <- VarCorr(m)$cond[[grp]]
  id <- paste0(cs$id, if (reml) "_reml" else "_ml")
  # glmmTMB's vcov(β) comes from TMB's joint Hessian (β with the variance parameters);
  # lme4's is (X'V^{-1}X)^{-1} at the estimates: computed densely here at glmmTMB's optimum
  X <- getME(m, "X"); Z <- getME(m, "Z")
  # Z's columns: glmmTMB's terms in formula order, each level-major
  G <- bdiag(lapply(names(VarCorr(m)$cond), function(k)
    kronecker(Diagonal(nlevels(d[[k]])), as.matrix(VarCorr(m)$cond[[k]]))))
  V <- as.matrix(Z %*% G %*% t(Z)) + sigma(m)^2 * diag(nrow(d))
  se_lme4 <- sqrt(diag(solve(t(X) %*% solve(V, X))))
  res <- list(id = id, formula = cs$formula, REML = reml, reference = "glmmTMB", group = grp,
              criterion = as.numeric(-2 * logLik(m)),
              fixef = as.list(fixef(m)$cond), se_tmb = unname(sqrt(diag(vcov(m)$cond))),
              se = unname(se_lme4),
              sd = unname(attr(vc, "stddev")), cor = unname(attr(vc, "correlation")),
              sigma = sigma(m), df = attr(logLik(m), "df"),
              version = as.character(packageVersion("glmmTMB")))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA), file.path(out, paste0(id, ".json")))
  cat(id, res$criterion, res$sd, "\n")
}

ctl <- lmerControl(optimizer = "bobyqa", optCtrl = list(rhoend = 1e-10, maxfun = 1e5))
for (reml in c(TRUE, FALSE)) {
  m <- lmerTest::lmer(y ~ x + time + (1 | g) + (1 | g:time), data = d, REML = reml, control = ctl)
  vc <- as.data.frame(VarCorr(m))
  v_gt <- vc$vcov[vc$grp == "g:time"]; v_g <- vc$vcov[vc$grp == "g"]
  ct <- summary(m, ddf = "Satterthwaite")$coefficients
  id <- paste0("cs_hom", if (reml) "_reml" else "_ml")
  res <- list(id = id, formula = "y ~ x + time + cs(0 + time | g, hom = TRUE)",
              reference_formula = "y ~ x + time + (1 | g) + (1 | g:time)", REML = reml,
              reference = "lme4+lmerTest", criterion = as.numeric(-2 * logLik(m)),
              fixef = as.list(fixef(m)), se = unname(ct[, "Std. Error"]),
              df_satterthwaite = unname(ct[, "df"]),
              sd = sqrt(v_g + v_gt), rho = v_g / (v_g + v_gt), sigma = sigma(m),
              # profile intervals of σ and β (invariant to the parametrisation of the others)
              profile = if (!reml) {
                ci <- suppressMessages(confint(m, method = "profile", oldNames = FALSE))
                ci <- ci[c("sigma", names(fixef(m))), ]
                list(names = rownames(ci), lower = unname(ci[, 1]), upper = unname(ci[, 2]))
              },
              version = as.character(packageVersion("lmerTest")))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA), file.path(out, paste0(id, ".json")))
  cat(id, res$criterion, res$sd, res$rho, "\n")
}
