# Reference values for scoremix.emm on generalised linear mixed models (lme4::glmer) from
# R emmeans 1.8 (Debian r-cran-emmeans).
#
# Usage:
#   Rscript r_scripts/emmeans_glmm_battery.R [OUTDIR]      (default tests/data/emmeans)
#
# Writes OUTDIR/data/glmm_<name>.csv (seeded simulated decision / count tables) and
# OUTDIR/glmm_battery.json: per model its data file, formula, family, link, lme4's fixef,
# vcov and theta, and per query (emmeans / contrast / joint_tests, on the link scale,
# type = "response", or after regrid()) emmeans's summary data frame.  Data sets from
# lme4 (cbpp, grouseticks, VerbAgg) and MASS (epil) are read from tests/data/glmm/ (written
# by r_scripts/glmer_battery.R); VerbAgg is subset to respondents id <= 100.
#
# The emmeans layer is a function of (beta, vcov, the design): the tests compare scoremix
# at lme4's beta and vcov (stored here) to 1e-6, and the native fit within the engines'
# agreement (tests/test_emm_glmm.py).

suppressPackageStartupMessages({library(lme4); library(emmeans); library(jsonlite); library(mvtnorm)})
args <- commandArgs(trailingOnly = TRUE)
outdir <- if (length(args) >= 1) args[1] else "tests/data/emmeans"
glmm_dir <- file.path(dirname(outdir), "glmm")
dir.create(file.path(outdir, "data"), showWarnings = FALSE, recursive = TRUE)

read_fac <- function(path, factors) {
  d <- utils::read.csv(path, colClasses = "character")
  for (col in names(d)) if (!(col %in% factors)) d[[col]] <- as.numeric(d[[col]])
  for (f in factors) d[[f]] <- factor(d[[f]])
  d
}
write_sim <- function(name, d) {
  utils::write.csv(d, file.path(outdir, "data", paste0(name, ".csv")), row.names = FALSE)
  file.path("emmeans", "data", paste0(name, ".csv"))
}

# ---------------------------------------------------------------- simulated tables
set.seed(20261126)
# decision table of a spoofing detector: error of a trial (miss/false alarm) by attack
# (13 levels, unbalanced), speaker gender and a signal-to-noise covariate
n <- 2600
attacks <- sprintf("A%02d", 7:19)
spk <- sprintf("S%03d", 1:40)
det <- data.frame(attack = sample(attacks, n, TRUE, prob = seq(1, 2.2, length.out = 13)),
                  speaker = sample(spk, n, TRUE))
det$gender <- ifelse(as.integer(sub("S", "", det$speaker)) %% 2 == 0, "female", "male")
det$snr <- sample(seq(0, 30, by = 5), n, TRUE)
det$codec <- sample(c("clean", "gsm", "mp3"), n, TRUE, prob = c(.5, .3, .2))
a_eff <- seq(-0.8, 0.8, length.out = 13); names(a_eff) <- attacks
s_eff <- rnorm(40, 0, .6); names(s_eff) <- spk
eta <- -1.5 + a_eff[det$attack] + 0.35 * (det$gender == "male") +
  0.4 * (det$gender == "male") * (det$attack %in% c("A10", "A17")) - 0.03 * (det$snr - 15) +
  c(clean = 0, gsm = .3, mp3 = .5)[det$codec] + s_eff[det$speaker]
det$error <- rbinom(n, 1, plogis(eta))
det$error_p <- rbinom(n, 1, pnorm(eta / 1.6))
f_det <- write_sim("glmm_det", det)

# counts: false alarms per session, 4 conditions x covariate, unbalanced, Poisson
m <- 360
cnt <- data.frame(cond = sample(c("c1", "c2", "c3", "c4"), m, TRUE, prob = c(.4, .3, .2, .1)),
                  site = sample(sprintf("site%02d", 1:18), m, TRUE),
                  x = round(rnorm(m, 2, 1), 3))
site_eff <- rnorm(18, 0, .4); names(site_eff) <- sprintf("site%02d", 1:18)
cnt$y <- rpois(m, exp(0.5 + c(c1 = 0, c2 = .3, c3 = -.2, c4 = .6)[cnt$cond] + 0.2 * cnt$x -
                        0.15 * cnt$x * (cnt$cond == "c4") + site_eff[cnt$site]))
f_cnt <- write_sim("glmm_counts", cnt)

# ---------------------------------------------------------------- models and queries
q_emm <- function(specs, by = NULL, at = NULL, type = "link", weights = "equal", regrid = FALSE)
  list(kind = "emmeans", specs = specs, by = by, at = at, type = type, weights = weights, regrid = regrid)
q_con <- function(specs, method, adjust, by = NULL, at = NULL, type = "link", weights = "equal",
                  ref = NULL, regrid = FALSE)
  list(kind = "contrast", specs = specs, by = by, at = at, type = type, weights = weights, method = method,
       adjust = adjust, ref = ref, regrid = regrid)
q_joint <- function(by = NULL) list(kind = "joint_tests", by = by)

models <- list(
  list(id = "g_cbpp", data = "glmm/cbpp.csv", factors = c("herd", "period"), family = "binomial", link = "logit",
       formula = "cbind(incidence, size - incidence) ~ period + (1 | herd)", queries = list(
         q_emm("period"), q_emm("period", type = "response"), q_emm("period", regrid = TRUE),
         q_con("period", "pairwise", "tukey"), q_con("period", "pairwise", "tukey", type = "response"),
         q_con("period", "trt.vs.ctrl", "dunnettx", type = "response"), q_con("period", "consec", "mvt"),
         q_con("period", "pairwise", "holm", regrid = TRUE), q_con("period", "eff", "fdr"), q_joint())),
  list(id = "g_cbpp_probit", data = "glmm/cbpp.csv", factors = c("herd", "period"), family = "binomial", link = "probit",
       formula = "cbind(incidence, size - incidence) ~ period + (1 | herd)", queries = list(
         q_emm("period", type = "response"), q_con("period", "pairwise", "bonferroni", type = "response"),
         q_con("period", "revpairwise", "none", regrid = TRUE), q_joint())),
  list(id = "g_grouse", data = "glmm/grouseticks.csv", factors = c("INDEX", "BROOD", "YEAR", "LOCATION"),
       family = "poisson", link = "log",
       formula = "TICKS ~ YEAR + scale(HEIGHT) + (1 | BROOD) + (1 | LOCATION)", queries = list(
         q_emm("YEAR"), q_emm("YEAR", type = "response"), q_emm("YEAR", by = "HEIGHT", at = list(HEIGHT = c(420, 470, 520)), type = "response"),
         q_con("YEAR", "pairwise", "tukey", type = "response"), q_con("YEAR", "trt.vs.ctrl", "mvt"),
         q_con("YEAR", "pairwise", "none", regrid = TRUE), q_joint())),
  list(id = "g_verbagg", data = "glmm/verbagg.csv", factors = c("Gender", "item", "id", "btype", "situ", "mode", "r2"),
       subset = "id100", family = "binomial", link = "logit",
       formula = "r2 ~ btype * mode + situ + Gender + (1 | id) + (1 | item)", queries = list(
         q_emm("btype"), q_emm("btype", by = "mode", type = "response"), q_emm("Gender", weights = "proportional"),
         q_emm(c("btype", "situ"), weights = "cells"),
         q_con("btype", "pairwise", "tukey", by = "mode", type = "response"), q_con("mode", "pairwise", "none", by = "btype"),
         q_con("btype", "poly", "none"), q_con("situ", "pairwise", "scheffe"), q_joint(), q_joint(by = "mode"))),
  list(id = "g_det_attack", data = f_det, factors = c("attack", "speaker", "gender", "codec"), family = "binomial", link = "logit",
       formula = "error ~ attack * gender + codec + (1 | speaker)", queries = list(
         q_emm("attack"), q_emm("attack", type = "response"), q_emm("gender", by = "attack", type = "response"),
         q_emm("codec", weights = "proportional", type = "response"),
         q_con("attack", "eff", "fdr"), q_con("attack", "trt.vs.ctrl", "bonferroni", type = "response"),
         q_con("attack", "pairwise", "tukey"), q_con("gender", "revpairwise", "none", by = "attack", type = "response"),
         q_con("codec", "consec", "sidak", regrid = TRUE), q_joint())),
  list(id = "g_det_probit_snr", data = f_det, factors = c("attack", "speaker", "gender", "codec"), family = "binomial", link = "probit",
       formula = "error_p ~ codec * snr + gender + (1 | speaker)", queries = list(
         q_emm("codec"), q_emm("codec", by = "snr", at = list(snr = c(5, 15, 25)), type = "response"),
         q_emm("gender", at = list(snr = 10), type = "response"),
         q_con("codec", "pairwise", "holm", by = "snr", at = list(snr = c(5, 25))),
         q_con("codec", "trt.vs.ctrl", "dunnettx", regrid = TRUE), q_joint())),
  list(id = "g_counts", data = f_cnt, factors = c("cond", "site"), family = "poisson", link = "log",
       formula = "y ~ cond * x + (1 | site)", queries = list(
         q_emm("cond"), q_emm("cond", type = "response"), q_emm("cond", by = "x", at = list(x = c(1, 3)), type = "response"),
         q_con("cond", "pairwise", "tukey", type = "response"), q_con("cond", "consec", "mvt", type = "response"),
         q_con("cond", "eff", "bonferroni", by = "x", at = list(x = c(0, 4))), q_joint())),
  list(id = "g_epil", data = "glmm/epil.csv", factors = c("trt", "subject", "period"), family = "poisson", link = "log",
       formula = "y ~ lbase * trt + lage + V4 + (1 | subject)", queries = list(
         q_emm("trt", type = "response"), q_emm("trt", by = "lbase", at = list(lbase = c(0.5, 1.5))),
         q_con("trt", "pairwise", "none", by = "lbase", at = list(lbase = c(0.5, 1.5)), type = "response"), q_joint()))
)

frame_records <- function(df) {
  df <- as.data.frame(df)
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
  df
}
precise_mvt <- function(con) {
  s <- as.data.frame(summary(con, adjust = "none", infer = c(FALSE, TRUE)))
  L <- con@linfct; V <- con@V
  C <- stats::cov2cor(L %*% V %*% t(L))
  by <- con@misc$by.vars
  groups <- if (is.null(by)) list(seq_len(nrow(s))) else split(seq_len(nrow(s)), interaction(s[by], drop = TRUE))
  stat <- if ("t.ratio" %in% names(s)) s$t.ratio else s$z.ratio
  out <- rep(NA_real_, nrow(s))
  for (rows in groups) for (i in rows) {
    set.seed(1)
    p <- mvtnorm::pmvnorm(lower = rep(-abs(stat[i]), length(rows)), upper = rep(abs(stat[i]), length(rows)),
                          corr = C[rows, rows, drop = FALSE], algorithm = GenzBretz(maxpts = 2e6, abseps = 1e-7))
    out[i] <- 1 - as.numeric(p)
  }
  out
}

results <- list()
for (md in models) {
  d <- read_fac(file.path(dirname(outdir), md$data), md$factors)
  if (!is.null(md$subset) && md$subset == "id100") d <- d[as.integer(as.character(d$id)) <= 100, ]
  d <- droplevels(d)
  fam <- get(md$family)(link = md$link)
  fit <- suppressMessages(suppressWarnings(glmer(stats::as.formula(md$formula), data = d, family = fam)))
  out <- list(id = md$id, data = md$data, factors = md$factors, subset = md$subset, formula = md$formula,
              family = md$family, link = md$link, fixef = as.list(fixef(fit)),
              vcov = unname(as.matrix(vcov(fit))), theta = unname(getME(fit, "theta")), queries = list())
  for (q in md$queries) {
    if (q$kind == "joint_tests") {
      res <- frame_records(suppressMessages(joint_tests(fit, by = q$by)))
    } else {
      emm <- suppressMessages(emmeans(fit, specs = q$specs, by = q$by, at = q$at, weights = q$weights))
      if (isTRUE(q$regrid)) emm <- regrid(emm)
      if (q$kind == "emmeans") {
        res <- frame_records(summary(emm, type = q$type))
      } else {
        args <- list(emm, method = q$method, adjust = q$adjust)
        if (!is.null(q$ref)) args$ref <- q$ref
        set.seed(1)
        con <- suppressMessages(do.call(contrast, args))
        res <- frame_records(summary(con, type = q$type))
        ci <- suppressMessages(as.data.frame(confint(con, type = q$type)))
        lo <- grep("LCL|lower", names(ci), value = TRUE); hi <- grep("UCL|upper", names(ci), value = TRUE)
        res$lower.CL.adj <- ci[[lo]]; res$upper.CL.adj <- ci[[hi]]
        if (q$adjust == "mvt") res$p.value.precise <- precise_mvt(con)
      }
    }
    q$result <- res
    out$queries[[length(out$queries) + 1]] <- q
  }
  results[[length(results) + 1]] <- out
  cat(sprintf("%-20s %2d queries  n = %d\n", md$id, length(md$queries), nrow(d)))
}
info <- list(emmeans = as.character(packageVersion("emmeans")), lme4 = as.character(packageVersion("lme4")),
             mvtnorm = as.character(packageVersion("mvtnorm")), R = R.version.string)
writeLines(jsonlite::toJSON(list(info = info, models = results), auto_unbox = TRUE, digits = NA, null = "null",
                            na = "null", pretty = FALSE), file.path(outdir, "glmm_battery.json"))
