# GLMM battery (issue 20): lme4::glmer references for scoremix.glmer.
# Writes tests/data/glmm/<id>.json (and the data sets as CSV).
# Usage: Rscript r_scripts/glmer_battery.R [outdir] [id ...]
suppressMessages({library(lme4); library(MASS); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/glmm"
only <- if (length(args) > 1) args[-1] else NULL
dir.create(out, showWarnings = FALSE, recursive = TRUE)

cbpp <- lme4::cbpp; cbpp$obs <- factor(seq_len(nrow(cbpp))); cbpp$prop <- cbpp$incidence / cbpp$size
verb <- lme4::VerbAgg; verb$r2n <- as.integer(verb$r2 == "Y")
grouse <- lme4::grouseticks
ep <- MASS::epil; ep$lbase <- log(ep$base / 4); ep$lage <- log(ep$age); ep$V4 <- as.integer(ep$period == 4)
bact <- MASS::bacteria; bact$wk2 <- bact$week > 2
# simulated detector decision tables: error (miss / false alarm) of a trial at a threshold
set.seed(20)
sim_table <- function(n_spk, n_att, n_per, link) {
  spk <- factor(sprintf("s%03d", seq_len(n_spk))); att <- factor(sprintf("A%02d", seq_len(n_att)))
  d <- expand.grid(rep = seq_len(n_per), speaker = spk, attack = att)
  d$label <- factor(ifelse(as.integer(d$attack) == 1, "bonafide", "spoof"), levels = c("bonafide", "spoof"))
  d$gender <- factor(ifelse(as.integer(d$speaker) %% 2 == 0, "female", "male"))
  b_s <- rnorm(n_spk, 0, 0.6); b_sl <- rnorm(n_spk, 0, 0.4); b_a <- rnorm(n_att, 0, 0.5)
  eta <- -2 + 0.3 * (d$gender == "male") + 0.5 * (d$label == "spoof") + b_s[as.integer(d$speaker)] +
    b_sl[as.integer(d$speaker)] * (d$label == "spoof") + b_a[as.integer(d$attack)]
  p <- switch(link, logit = plogis(eta), probit = pnorm(eta / 1.7))
  d$error <- rbinom(nrow(d), 1, p)
  d$rep <- NULL
  d
}
det_logit <- sim_table(60, 6, 8, "logit"); det_probit <- sim_table(50, 5, 8, "probit")
det_logit$accepted <- det_logit$error == 1
datasets <- list(cbpp = cbpp, verbagg = verb, grouseticks = grouse, epil = ep, bacteria = bact,
                 det_logit = det_logit, det_probit = det_probit)
for (nm in names(datasets)) write.csv(datasets[[nm]], file.path(out, paste0(nm, ".csv")), row.names = FALSE)

cases <- list(
  list(id = "cbpp_cbind", data = "cbpp", formula = "cbind(incidence, size - incidence) ~ period + (1 | herd)"),
  list(id = "cbpp_prop_weights", data = "cbpp", formula = "prop ~ period + (1 | herd)", weights = "size"),
  list(id = "cbpp_obs", data = "cbpp", formula = "cbind(incidence, size - incidence) ~ period + (1 | herd) + (1 | obs)"),
  list(id = "cbpp_agq20", data = "cbpp", formula = "cbind(incidence, size - incidence) ~ period + (1 | herd)", nAGQ = 20),
  list(id = "cbpp_agq5_probit", data = "cbpp", formula = "cbind(incidence, size - incidence) ~ period + (1 | herd)", nAGQ = 5, link = "probit"),
  list(id = "cbpp_poisson_offset", data = "cbpp", formula = "incidence ~ period + offset(log(size)) + (1 | herd)", family = "poisson"),
  list(id = "verbagg", data = "verbagg", formula = "r2 ~ Anger + Gender + btype + situ + (1 | id) + (1 | item)"),
  list(id = "grouseticks", data = "grouseticks", formula = "TICKS ~ YEAR + scale(HEIGHT) + (1 | BROOD) + (1 | INDEX) + (1 | LOCATION)", family = "poisson"),
  list(id = "epil", data = "epil", formula = "y ~ lbase * trt + lage + V4 + (1 | subject)", family = "poisson"),
  list(id = "epil_agq9", data = "epil", formula = "y ~ lbase * trt + lage + V4 + (1 | subject)", family = "poisson", nAGQ = 9),
  list(id = "bacteria", data = "bacteria", formula = "y ~ trt + wk2 + (1 | ID)"),
  list(id = "bacteria_cloglog", data = "bacteria", formula = "y ~ trt + I(week > 2) + (1 | ID)", link = "cloglog"),
  list(id = "det_logit", data = "det_logit", formula = "error ~ gender + label + (1 | speaker) + (1 | attack)"),
  list(id = "det_logical", data = "det_logit", formula = "accepted ~ gender + (1 | speaker)"),
  list(id = "det_probit", data = "det_probit", formula = "error ~ gender + label + (1 | speaker) + (1 | attack)", link = "probit"),
  list(id = "det_label_slope", data = "det_logit", formula = "error ~ gender + label + (label | speaker) + (1 | attack)")
)
tab <- function(x) list(rownames = rownames(x), columns = lapply(as.data.frame(x), function(v) as.numeric(v)))
for (cs in cases) {
  if (!is.null(only) && !(cs$id %in% only)) next
  d <- datasets[[cs$data]]
  fam_name <- if (is.null(cs$family)) "binomial" else cs$family
  link <- if (is.null(cs$link)) (if (fam_name == "binomial") "logit" else "log") else cs$link
  fam <- get(fam_name)(link = link)
  nAGQ <- if (is.null(cs$nAGQ)) 1 else cs$nAGQ
  d$.w <- if (is.null(cs$weights)) 1 else d[[cs$weights]]
  t0 <- proc.time()[["elapsed"]]
  m <- suppressMessages(suppressWarnings(glmer(as.formula(cs$formula), data = d, family = fam,
                                               weights = .w, nAGQ = nAGQ)))
  secs <- proc.time()[["elapsed"]] - t0
  # the reference: lme4 with converged PIRLS (tolPwrss = 1e-12; lme4's default 1e-7 stops
  # the conditional modes early, which moves its Laplace criterion by up to ~1e-3 and the
  # Hessian-based standard errors by up to ~1%) and a tight bobyqa
  mt <- suppressMessages(suppressWarnings(update(m, start = list(theta = getME(m, "theta"), fixef = fixef(m)),
     control = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa", optCtrl = list(rhobeg = 1e-3, rhoend = 1e-10, maxfun = 1e5)))))
  pick <- mt
  vc <- as.data.frame(VarCorr(pick))
  re1 <- ranef(pick, condVar = TRUE)[[1]]
  res <- list(id = cs$id, data = cs$data, formula = cs$formula, family = fam_name, link = link, nAGQ = nAGQ,
              weights = if (is.null(cs$weights)) NULL else cs$weights,
              fixef = as.list(fixef(pick)), se = unname(sqrt(diag(as.matrix(vcov(pick))))),
              vcov = unname(as.matrix(vcov(pick))),
              theta = unname(getME(pick, "theta")), theta_names = names(getME(pick, "theta")),
              logLik = as.numeric(logLik(pick)), deviance = deviance(pick), AIC = AIC(pick), BIC = BIC(pick),
              criterion = unname(pick@devcomp$cmp[["dev"]]),
              criterion_default = as.numeric(-2 * logLik(m)), fixef_default = unname(fixef(m)),
              theta_default = unname(getME(m, "theta")),
              messages = unlist(m@optinfo$conv$lme4$messages),
              singular = isSingular(pick), nobs = nobs(pick), seconds_default = secs,
              varcorr = list(grp = vc$grp, var1 = vc$var1, var2 = vc$var2, vcov = vc$vcov),
              ranef1_name = names(ranef(pick))[1], ranef1 = unname(re1[, 1]),
              ranef1_levels = rownames(re1),
              ranef1_condsd = unname(sqrt(attr(re1, "postVar")[1, 1, ])),
              fitted = unname(fitted(pick))[1:20],
              coef_table = tab(coef(summary(pick))),
              factors = lapply(Filter(is.factor, d), levels))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA, null = "null", pretty = FALSE),
             file.path(out, paste0(cs$id, ".json")))
  cat(cs$id, format(-2 * logLik(m), digits = 12), format(-2 * logLik(pick), digits = 12), secs, "\n")
}
