# Reference standard errors of lme4-style predictions (predict(m, se.fit = TRUE) of lme4
# >= 1.1-35), computed here from lme4's own matrices because Debian's lme4 (1.1-31) has no
# se.fit:  C = (M^-1)' M^-1 with M^-1 = sigma * [L^-1 Lambda', 0; -RX'^-1 RZX' L^-1 Lambda', RX'^-1]
# (lme4's vcov_full), se = sqrt(diag([Z X] C [Z X]')), new levels padded with zeros.
#
# Usage: Rscript r_scripts/predict_se_reference.R OUT.json
suppressPackageStartupMessages({library(lme4); library(jsonlite); library(Matrix)})
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/emmeans/predict_se.json"

vcov_full_r <- function(object) {
  s <- sigma(object)
  L <- getME(object, "L"); RX <- getME(object, "RX"); RZX <- getME(object, "RZX")
  Lt <- getME(object, "Lambdat")
  RXtinv <- solve(t(RX))
  LinvLt <- solve(L, solve(L, Lt, system = "P"), system = "L")
  Minv <- s * rbind(cbind(LinvLt, Matrix(0, nrow = nrow(L), ncol = ncol(RX))),
                    cbind(-RXtinv %*% t(RZX) %*% LinvLt, RXtinv))
  as.matrix(crossprod(Minv))
}

one <- function(id, formula, data, newdata) {
  m <- lmer(as.formula(formula), data)
  C <- vcov_full_r(m)
  X <- model.matrix(delete.response(terms(m, fixed.only = TRUE)), newdata)
  # Z for newdata in lme4's b order; unseen levels get zero columns
  re <- ranef(m)
  Zs <- list()
  for (tn in names(m@cnms)) NULL
  Zfull <- NULL
  for (k in seq_along(m@cnms)) {
    g <- names(m@cnms)[k]; cn <- m@cnms[[k]]
    levs <- levels(m@flist[[g]])
    Xk <- model.matrix(as.formula(paste("~", if (identical(cn, "(Intercept)")) "1" else paste(setdiff(cn, "(Intercept)"), collapse = "+"))), newdata)
    Zk <- matrix(0, nrow(newdata), length(levs) * length(cn))
    code <- match(as.character(newdata[[g]]), levs)
    for (i in seq_len(nrow(newdata))) if (!is.na(code[i]))
      Zk[i, (code[i] - 1) * length(cn) + seq_along(cn)] <- Xk[i, cn]
    Zfull <- cbind(Zfull, Zk)
  }
  b <- as.numeric(getME(m, "b"))
  ZX <- cbind(Zfull, X)
  se_all <- sqrt(rowSums((ZX %*% C) * ZX))
  se_fix <- sqrt(rowSums((X %*% vcov(m)) * X))
  fit_all <- as.numeric(X %*% fixef(m) + Zfull %*% b)
  # check the formula against the fitted data's predict (no se) for seen levels
  p_all <- predict(m, newdata, allow.new.levels = TRUE)
  stopifnot(max(abs(p_all - fit_all)) < 1e-8)
  list(id = id, formula = formula, fit = fit_all, se_fit = se_all, fit_fixed = as.numeric(X %*% fixef(m)),
       se_fixed = se_fix, beta_block_equals_vcov = max(abs(C[-seq_len(ncol(Zfull)), -seq_len(ncol(Zfull))] - as.matrix(vcov(m)))))
}
ss <- lme4::sleepstudy
ss$Subject <- as.character(ss$Subject)
nd1 <- data.frame(Days = c(0, 4.5, 9, 2, 7), Subject = c("308", "309", "372", "999", "999"))
m1 <- one("sleep_slopes", "Reaction ~ Days + (Days | Subject)", ss, nd1)
mc <- as.data.frame(nlme::Machines); mc$Worker <- as.character(mc$Worker); mc$Machine <- as.character(mc$Machine)
nd2 <- data.frame(Machine = c("A", "B", "C", "A"), Worker = c("1", "2", "6", "new"))
m2 <- one("machines", "score ~ Machine + (1 | Worker)", mc, nd2)
res <- list(lme4 = as.character(packageVersion("lme4")), models = list(m1, m2),
            newdata = list(sleep_slopes = nd1, machines = nd2))
writeLines(toJSON(res, auto_unbox = TRUE, digits = NA), out)
cat("wrote", out, "\n")
