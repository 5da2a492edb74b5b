# Reference binomial intervals for tests/test_binomial.py (s4deteval).
# Wilson = prop.test(correct = FALSE)$conf.int; Clopper-Pearson = binom.test()$conf.int;
# Jeffreys = qbeta(c(a/2, 1-a/2), k + 1/2, n - k + 1/2) with 0 at k = 0 and 1 at k = n.
# Usage: Rscript r_scripts/binomial_reference.R OUT.csv
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[1] else "tests/data/detection_eval/binomial_r_reference.csv"
grid <- expand.grid(k = c(0, 1, 2, 3, 7, 15, 30, 49, 50), n = c(50, 200, 1000, 33327), level = c(0.9, 0.95, 0.99))
grid <- grid[grid$k <= grid$n, ]
rows <- list()
for (i in seq_len(nrow(grid))) {
  k <- grid$k[i]; n <- grid$n[i]; lv <- grid$level[i]; a <- 1 - lv
  w <- suppressWarnings(prop.test(k, n, conf.level = lv, correct = FALSE)$conf.int)
  cp <- binom.test(k, n, conf.level = lv)$conf.int
  jl <- if (k == 0) 0 else qbeta(a / 2, k + 0.5, n - k + 0.5)
  jh <- if (k == n) 1 else qbeta(1 - a / 2, k + 0.5, n - k + 0.5)
  rows[[length(rows) + 1]] <- data.frame(k = k, n = n, level = lv, method = c("wilson", "clopper-pearson", "jeffreys"),
                                         lo = c(w[1], cp[1], jl), hi = c(w[2], cp[2], jh))
}
res <- do.call(rbind, rows)
write.csv(format(res, digits = 17), out, row.names = FALSE, quote = FALSE)
