# lme4 parity part 3 (issue 20): references for Kenward-Roger at singular fits and for
# ranova with offsets.  Writes tests/data/parity3/<id>.json and the data sets as CSV.
# Usage: Rscript r_scripts/parity3_reference.R [outdir]
suppressMessages({library(MASS); library(lme4); library(lmerTest); library(pbkrtest); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/parity3"
dir.create(out, showWarnings = FALSE, recursive = TRUE)

rabbit <- MASS::Rabbit
rabbit$lD <- log(rabbit$Dose)
write.csv(rabbit, file.path(out, "rabbit.csv"), row.names = FALSE)
sleep <- lme4::sleepstudy
sleep$off <- 3 * sleep$Days + ((seq_len(nrow(sleep)) * 7) %% 11)
sleep$w <- 1 + (seq_len(nrow(sleep)) %% 3)
write.csv(sleep, file.path(out, "sleep_offset.csv"), row.names = FALSE)
data_of <- list(rabbit = rabbit, sleep_offset = sleep)

tab <- function(x) list(rownames = rownames(x), columns = lapply(as.data.frame(x), function(v) as.numeric(v)))
ctrl <- lmerControl(optimizer = "bobyqa", optCtrl = list(rhobeg = 2e-3, rhoend = 1e-12, maxfun = 1e5))

cases <- list(
  list(id = "kr_rabbit_singular", data = "rabbit", formula = "BPchange ~ Treatment + (Treatment || Animal)", REML = TRUE),
  list(id = "kr_rabbit_singular_run", data = "rabbit", formula = "BPchange ~ Treatment + (Treatment || Animal) + (1 | Run)", REML = TRUE),
  list(id = "kr_rabbit_dose", data = "rabbit", formula = "BPchange ~ lD * Treatment + (Treatment || Animal)", REML = TRUE),
  list(id = "ranova_offset_term", data = "sleep_offset", formula = "Reaction ~ Days + offset(off) + (1 | Subject)", REML = TRUE),
  list(id = "ranova_offset_arg", data = "sleep_offset", formula = "Reaction ~ Days + (1 | Subject)", REML = TRUE, offset = "off"),
  list(id = "ranova_offset_ml", data = "sleep_offset", formula = "Reaction ~ Days + offset(off) + (1 | Subject)", REML = FALSE),
  list(id = "ranova_offset_weights", data = "sleep_offset", formula = "Reaction ~ Days + offset(off) + (1 | Subject)", REML = TRUE, weights = "w"),
  list(id = "ranova_offset_slope", data = "sleep_offset", formula = "Reaction ~ Days + offset(off) + (Days | Subject)", REML = TRUE)
)
for (cs in cases) {
  d <- data_of[[cs$data]]
  d$.w <- if (is.null(cs$weights)) 1 else d[[cs$weights]]
  d$.o <- if (is.null(cs$offset)) 0 else d[[cs$offset]]
  m <- suppressMessages(suppressWarnings(
    lmer(as.formula(cs$formula), data = d, REML = cs$REML, weights = .w, offset = .o, control = ctrl)))
  res <- list(id = cs$id, data = cs$data, formula = cs$formula, REML = cs$REML,
              weights = if (is.null(cs$weights)) NULL else cs$weights,
              offset = if (is.null(cs$offset)) NULL else cs$offset,
              fixef = as.list(fixef(m)), theta = unname(getME(m, "theta")),
              deviance = if (cs$REML) REMLcrit(m) else deviance(m),
              singular = isSingular(m))
  if (cs$REML && is.null(cs$weights)) {
    res$coef_kenward_roger <- tab(summary(m, ddf = "Kenward-Roger")$coefficients)
    res$anova_kenward_roger <- tab(anova(m, ddf = "Kenward-Roger"))
    res$vcov_adj <- unname(as.matrix(vcovAdj(m)))
  }
  res$ranova <- tab(suppressMessages(suppressWarnings(ranova(m))))
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA, null = "null", pretty = TRUE),
             file.path(out, paste0(cs$id, ".json")))
}
cat("ok\n")
