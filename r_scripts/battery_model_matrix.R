# R's model matrices and predictions for scoremix's formula features (tests/test_battery_formula.py).
#
# Usage (from the repository root):
#   Rscript r_scripts/battery_model_matrix.R DATADIR OUT.json
#
# DATADIR holds the battery's CSVs and datasets.json (r_scripts/battery.R export).  For every
# case: the column names and the model matrix of `model.matrix(formula, data, contrasts.arg)`
# (R's own parser, contrasts, poly() and scale()); for every prediction case: an lmer fit at
# tight settings and `predict(m, newdata)` with and without random effects (R's
# makepredictcall re-uses poly()'s coefficients and scale()'s centre/scale), plus the
# response values model.frame computed (transformed response) and the offset.

suppressPackageStartupMessages({
  library(lme4)
  library(jsonlite)
})

args <- commandArgs(trailingOnly = TRUE)
datadir <- args[1]
out <- args[2]
meta <- jsonlite::fromJSON(file.path(datadir, "datasets.json"), simplifyVector = FALSE)
read_dataset <- function(name) {
  df <- utils::read.csv(file.path(datadir, paste0(name, ".csv")), stringsAsFactors = FALSE,
                        check.names = FALSE)
  for (col in names(meta[[name]])) {
    info <- meta[[name]][[col]]
    if (info$type %in% c("factor", "ordered"))
      df[[col]] <- factor(as.character(df[[col]]), levels = unlist(info$levels),
                          ordered = info$type == "ordered")
  }
  df
}

cases <- list(
  list(id = "poly3", dataset = "sleepstudy", formula = "~ poly(Days, 3)"),
  list(id = "poly_raw", dataset = "sleepstudy", formula = "~ poly(Days, 2, raw = TRUE)"),
  list(id = "poly_degree_named", dataset = "sleepstudy", formula = "~ poly(Days, degree = 2)"),
  list(id = "functions", dataset = "sleepstudy",
       formula = "~ scale(Days) + I(Days^2) + log(Days + 1) + exp(Days/10) + sqrt(Days) + log(Days + 1, 2) + I(-Days) + I(Days %% 3)"),
  list(id = "scale_nocenter", dataset = "sleepstudy", formula = "~ scale(Days, center = FALSE) + scale(Days, scale = FALSE)"),
  list(id = "factor_fun", dataset = "sleepstudy", formula = "~ factor(Days)"),
  list(id = "logical", dataset = "sleepstudy", formula = "~ I(Days > 4) + Days"),
  list(id = "logical_interaction", dataset = "sleepstudy", formula = "~ Days * I(Days > 4)"),
  list(id = "ordered_default", dataset = "cake", formula = "~ recipe * temperature"),
  list(id = "contr_sum", dataset = "cake", formula = "~ recipe * temperature",
       contrasts = list(recipe = "contr.sum", temperature = "contr.sum")),
  list(id = "contr_helmert", dataset = "cake", formula = "~ recipe + temperature",
       contrasts = list(recipe = "contr.helmert", temperature = "contr.helmert")),
  list(id = "contr_sas", dataset = "cake", formula = "~ recipe + temperature",
       contrasts = list(recipe = "contr.SAS", temperature = "contr.treatment")),
  list(id = "contr_poly_unordered", dataset = "cake", formula = "~ recipe + temp",
       contrasts = list(recipe = "contr.poly")),
  list(id = "ordered_noint", dataset = "cake", formula = "~ 0 + temperature + recipe"),
  list(id = "ordered9", dataset = "Oxboys", formula = "~ Occasion"),
  list(id = "in_operator", dataset = "Oats", formula = "~ Variety + nitro %in% Variety"),
  list(id = "trig", dataset = "Ovary", formula = "~ sin(2 * pi * Time) + cos(2 * pi * Time)"),
  list(id = "poly_interaction", dataset = "ChickWeight", formula = "~ poly(Time, 2) * Diet")
)

mm <- list()
for (cs in cases) {
  d <- read_dataset(cs$dataset)
  f <- stats::as.formula(cs$formula)
  X <- if (is.null(cs$contrasts)) model.matrix(f, d) else model.matrix(f, d, contrasts.arg = cs$contrasts)
  mm[[cs$id]] <- list(dataset = cs$dataset, formula = cs$formula, contrasts = cs$contrasts,
                      columns = colnames(X), matrix = unname(X))
}

ctrl <- lme4::lmerControl(optimizer = "bobyqa", optCtrl = list(rhoend = 1e-12, maxfun = 1e5))
preds <- list(
  list(id = "poly_scale", dataset = "sleepstudy",
       formula = "Reaction ~ poly(Days, 2) + scale(Days) + (1 | Subject)",
       newdata = data.frame(Days = c(0.5, 3.25, 9, 12, 1), Subject = c("308", "309", "372", "308", "999"))),
  list(id = "log_response_offset", dataset = "sleepstudy",
       formula = "log(Reaction) ~ Days + offset(0.01 * Days) + (Days | Subject)",
       newdata = data.frame(Days = c(0, 2.5, 11), Subject = c("330", "331", "332"))),
  list(id = "ordered_cake", dataset = "cake",
       formula = "angle ~ recipe * temperature + (1 | recipe:replicate)",
       newdata = NULL),
  list(id = "poly_random", dataset = "ChickWeight",
       formula = "weight ~ poly(Time, 2) + (poly(Time, 2) | Chick)",
       newdata = data.frame(Time = c(1, 7.5, 30), Chick = c("1", "2", "3")))
)
pr <- list()
for (p in preds) {
  d <- read_dataset(p$dataset)
  m <- lme4::lmer(stats::as.formula(p$formula), data = d, REML = TRUE, control = ctrl)
  nd <- p$newdata
  if (is.null(nd)) {
    nd <- d[c(1, 50, 100, 200, 270), c("recipe", "temperature", "replicate")]
  }
  for (col in names(nd)) {
    if (is.factor(d[[col]])) nd[[col]] <- factor(as.character(nd[[col]]), levels = levels(d[[col]]),
                                                 ordered = is.ordered(d[[col]]))
  }
  ndj <- nd
  for (col in names(ndj)) if (is.factor(ndj[[col]])) ndj[[col]] <- as.character(ndj[[col]])
  pr[[p$id]] <- list(dataset = p$dataset, formula = p$formula, newdata = ndj,
                     criterion = unname(lme4::REMLcrit(m)), fixef = as.list(fixef(m)),
                     population = unname(predict(m, newdata = nd, re.form = NA)),
                     conditional = unname(predict(m, newdata = nd, allow.new.levels = TRUE)),
                     fitted = unname(fitted(m)), response = unname(model.response(model.frame(m))))
}
writeLines(jsonlite::toJSON(list(model_matrix = mm, predictions = pr), auto_unbox = TRUE,
                            digits = NA, null = "null", dataframe = "columns"), out)
cat("wrote", out, "\n")
