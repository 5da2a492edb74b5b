# Export lme4's example data sets as CSV for scoremix's cross-check tests.
#
# Usage:
#   Rscript r_scripts/export_datasets.R OUTDIR [small|insteval|all]
#
#   small    (default) sleepstudy.csv, Penicillin.csv, Pastes.csv: small, committed under
#            tests/data/reference/
#   insteval InstEval.csv (73,421 rows): NOT committed; the tests export it into a
#            temporary folder at run time when R is present.
#   all      both.
#
# Factors are written as their labels; numeric columns as numbers (write.csv, no row
# names), so read.csv(stringsAsFactors = TRUE) and pandas.read_csv give back the same
# columns.  InstEval's `service` factor (levels "0", "1") and the numeric-looking ids
# `s`, `d` are written as labels, which R's read.csv reads back as integers; fitted on the
# CSV, `service` is then a 0/1 covariate named "service" (same model as the factor's
# "service1" column).

suppressPackageStartupMessages(library(lme4))

args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 1) stop("usage: Rscript export_datasets.R OUTDIR [small|insteval|all]", call. = FALSE)
outdir <- args[1]
what <- if (length(args) >= 2) args[2] else "small"
if (!(what %in% c("small", "insteval", "all"))) stop("unknown selection '", what, "'", call. = FALSE)
dir.create(outdir, showWarnings = FALSE, recursive = TRUE)

write_one <- function(df, name) {
  path <- file.path(outdir, paste0(name, ".csv"))
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
  utils::write.csv(df, path, row.names = FALSE)
  cat(sprintf("wrote %s (%d rows)\n", path, nrow(df)))
}

if (what %in% c("small", "all")) {
  write_one(lme4::sleepstudy, "sleepstudy")
  write_one(lme4::Penicillin, "Penicillin")
  write_one(lme4::Pastes, "Pastes")
}
if (what %in% c("insteval", "all")) {
  write_one(lme4::InstEval, "InstEval")
}
