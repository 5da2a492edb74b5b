# lme4 2.0's diag() covariance structure (issue 20): references for scoremix.lmer.
# Debian's lme4 1.1-31 has no diag(); the reference is the equivalent lme4 model with one
# independent scalar term per model-matrix column, cross-checked against glmmTMB's diag().
# Writes tests/data/parity3/diag_<id>.json.
suppressMessages({library(lme4); library(glmmTMB); library(jsonlite)})
out <- if (length(commandArgs(TRUE))) commandArgs(TRUE)[1] else "tests/data/parity3"
d <- read.csv(file.path(out, "sleep_offset.csv"))
d$Subject <- factor(d$Subject)
d$period <- factor(ifelse(d$Days < 3, "early", ifelse(d$Days < 7, "mid", "late")),
                   levels = c("early", "mid", "late"))
write.csv(d, file.path(out, "sleep_period.csv"), row.names = FALSE)
d$p_early <- as.numeric(d$period == "early"); d$p_mid <- as.numeric(d$period == "mid")
d$p_late <- as.numeric(d$period == "late")
cases <- list(
  list(id = "diag_slope", ours = "Reaction ~ Days + diag(1 + Days | Subject)",
       lme4 = "Reaction ~ Days + (1 | Subject) + (0 + Days | Subject)",
       tmb = "Reaction ~ Days + diag(1 + Days | Subject)", REML = TRUE),
  list(id = "diag_factor", ours = "Reaction ~ period + diag(0 + period | Subject)",
       lme4 = "Reaction ~ period + (0 + p_early | Subject) + (0 + p_mid | Subject) + (0 + p_late | Subject)",
       tmb = "Reaction ~ period + diag(0 + period | Subject)", REML = FALSE),
  list(id = "diag_factor_intercept", ours = "Reaction ~ Days + diag(1 + period | Subject)",
       lme4 = "Reaction ~ Days + (1 | Subject) + (0 + p_mid | Subject) + (0 + p_late | Subject)",
       tmb = "Reaction ~ Days + diag(1 + period | Subject)", REML = TRUE)
)
ctl <- lmerControl(optimizer = "bobyqa", optCtrl = list(rhoend = 1e-10, maxfun = 1e5))
for (cs in cases) {
  m <- lmer(as.formula(cs$lme4), data = d, REML = cs$REML, control = ctl)
  t <- glmmTMB(as.formula(cs$tmb), data = d, REML = cs$REML)
  vc <- as.data.frame(VarCorr(m))
  vc <- vc[vc$grp != "Residual", ]
  res <- list(id = cs$id, data = "sleep_period", formula = cs$ours, lme4_formula = cs$lme4,
              REML = cs$REML, criterion = as.numeric(-2 * logLik(m)),
              fixef = as.list(fixef(m)), se = unname(sqrt(diag(as.matrix(vcov(m))))),
              sd = unname(vc$sdcor), sigma = sigma(m),
              glmmTMB_criterion = as.numeric(-2 * logLik(t)),
              glmmTMB_sd = unname(unlist(lapply(VarCorr(t)$cond, function(v) attr(v, "stddev")))),
              glmmTMB_fixef = unname(fixef(t)$cond))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA), file.path(out, paste0(cs$id, ".json")))
  cat(cs$id, res$criterion, res$glmmTMB_criterion, "\n")
}
