# Reference log-likelihoods for tests/test_locscale.py: Gaussian location models with fixed
# per-stratum dispersion (what glmmTMB 1.1 can fit; random effects in dispformula it cannot).
# Usage: Rscript r_scripts/locscale_glmmtmb.R tests/data/locscale/glmmtmb_input.csv out.json
suppressMessages({library(glmmTMB); library(jsonlite)})
a <- commandArgs(TRUE)
d <- read.csv(a[1])
d$stratum <- factor(ifelse(d$label == "bonafide", "+", paste0("-:", d$attack)))
d$pos <- as.numeric(d$label == "bonafide"); d$neg <- 1 - d$pos
d$spk_str <- interaction(d$speaker, d$stratum)
ctl <- glmmTMBControl(optCtrl = list(iter.max = 2000, eval.max = 2000))
m1 <- glmmTMB(score ~ 0 + stratum + diag(0 + pos + neg | speaker), dispformula = ~ 0 + stratum, data = d,
              REML = FALSE, control = ctl)
m2 <- glmmTMB(score ~ 0 + stratum + diag(0 + pos + neg | speaker) + (0 + neg | spk_str),
              dispformula = ~ 0 + stratum, data = d, REML = FALSE, control = ctl)
sdr <- function(m) { v <- VarCorr(m)$cond; lapply(v, function(x) as.numeric(attr(x, "stddev"))) }
out <- list(loglik_location = as.numeric(logLik(m1)), loglik_omega = as.numeric(logLik(m2)),
            sd_location = sdr(m1), sd_omega = sdr(m2),
            sigma_location = as.numeric(exp(fixef(m1)$disp)), glmmTMB = as.character(packageVersion("glmmTMB")))
write(toJSON(out, auto_unbox = TRUE, digits = 12), a[2])
