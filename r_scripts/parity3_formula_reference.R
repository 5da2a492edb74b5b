# lme4 parity part 3 (issue 20): data-dependent calls (mean, sd, median, min, max) inside
# formulas and splines::ns()/bs() bases, with predictions on new data (R's makepredictcall
# re-uses the spline knots).  Writes tests/data/parity3/formula_<id>.json.
# Usage: Rscript r_scripts/parity3_formula_reference.R [outdir]
suppressMessages({library(lme4); library(splines); library(jsonlite)})
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/parity3"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
chick <- as.data.frame(ChickWeight); chick$Chick <- factor(as.character(chick$Chick)); chick$Diet <- factor(chick$Diet)
orth <- read.csv("tests/data/battery/data/Orthodont.csv", stringsAsFactors = TRUE)
write.csv(chick, file.path(out, "chick.csv"), row.names = FALSE)
data_of <- list(chick = chick, orthodont = orth)
new_of <- list(
  chick = data.frame(Time = c(0, 3, 10.5, 21, 25), Chick = factor(c("1", "1", "20", "20", "1")), Diet = factor(c(1, 1, 2, 3, 4))),
  orthodont = data.frame(age = c(6, 8, 11.5, 14, 16), Subject = c("M01", "F03", "M01", "F11", "M05"), Sex = c("Male", "Female", "Male", "Female", "Male")))
ctrl <- lmerControl(optimizer = "bobyqa", optCtrl = list(rhobeg = 2e-3, rhoend = 1e-12, maxfun = 1e5))
cases <- list(
  list(id = "mean_center", data = "orthodont", formula = "distance ~ I(age - mean(age)) * Sex + (I(age - mean(age)) | Subject)", predict = FALSE),
  list(id = "sd_scale", data = "orthodont", formula = "distance ~ I((age - mean(age))/sd(age)) + Sex + (1 | Subject)", predict = FALSE),
  list(id = "median_min_max", data = "chick", formula = "weight ~ I(Time - median(Time)) + I((Time - min(Time))/(max(Time) - min(Time)))^2 + Diet + (1 | Chick)", predict = FALSE),
  list(id = "minmax_range", data = "chick", formula = "log(weight) ~ I((Time - min(Time))/(max(Time) - min(Time))) * Diet + (1 | Chick)", predict = FALSE),
  list(id = "ns_df3", data = "chick", formula = "log(weight) ~ ns(Time, df = 3) + Diet + (1 | Chick)", predict = TRUE),
  list(id = "ns_knots_slope", data = "chick", formula = "log(weight) ~ ns(Time, knots = c(6, 14)) * Diet + (Time | Chick)", predict = TRUE),
  list(id = "bs_df5", data = "chick", formula = "log(weight) ~ bs(Time, df = 5) + Diet + (1 | Chick)", predict = TRUE),
  list(id = "bs_deg2_ml", data = "orthodont", formula = "distance ~ bs(age, degree = 2, knots = 11) + Sex + (1 | Subject)", REML = FALSE, predict = TRUE),
  list(id = "ns_intercept_boundary", data = "orthodont", formula = "distance ~ 0 + ns(age, df = 2, intercept = TRUE, Boundary.knots = c(7, 13)) + (1 | Subject)", predict = TRUE)
)
for (cs in cases) {
  d <- data_of[[cs$data]]
  REML <- if (is.null(cs$REML)) TRUE else cs$REML
  m <- suppressMessages(suppressWarnings(lmer(as.formula(cs$formula), data = d, REML = REML, control = ctrl)))
  res <- list(id = cs$id, data = cs$data, formula = cs$formula, REML = REML,
              fixef = as.list(fixef(m)), se = unname(sqrt(diag(as.matrix(vcov(m))))),
              theta = unname(getME(m, "theta")), criterion = if (REML) REMLcrit(m) else deviance(m))
  if (cs$predict) {
    nd <- new_of[[cs$data]]
    res$newdata <- nd
    res$predict_fixed <- unname(suppressWarnings(predict(m, newdata = nd, re.form = NA)))
    res$predict_full <- unname(suppressWarnings(predict(m, newdata = nd)))
  }
  writeLines(toJSON(res, auto_unbox = TRUE, digits = NA, null = "null", pretty = TRUE, factor = "string"),
             file.path(out, paste0("formula_", cs$id, ".json")))
}
cat("ok\n")
