# Paired DeLong tests by pROC::roc.test for tests/test_compare_systems.py (s4deteval).
# Input CSV: case, y (1 = positive), a, b (two systems' scores). Output CSV: case, auc_a, auc_b, z, p_value.
# Usage: Rscript r_scripts/delong_reference.R IN.csv OUT.csv
suppressMessages(library(pROC))
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
out <- do.call(rbind, lapply(split(d, d$case), function(g) {
  r1 <- roc(g$y, g$a, levels = c(0, 1), direction = "<", quiet = TRUE)
  r2 <- roc(g$y, g$b, levels = c(0, 1), direction = "<", quiet = TRUE)
  t <- roc.test(r1, r2, method = "delong", paired = TRUE)
  data.frame(case = g$case[1], auc_a = as.numeric(auc(r1)), auc_b = as.numeric(auc(r2)),
             z = unname(t$statistic), p_value = t$p.value)
}))
write.csv(format(out, digits = 17), args[2], row.names = FALSE, quote = FALSE)
