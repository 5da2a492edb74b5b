# Reference model frames from lme4 for scoremix's formula parser / model frame tests.
#
# Usage: Rscript r_scripts/model_frame_reference.R [DATA_DIR] [OUT_JSON]
#   DATA_DIR  folder with the CSV inputs (default tests/data/model_frame); the lme4 data
#             sets (sleepstudy, Penicillin, Pastes) and a simulated detector table are
#             written there first when missing.
#   OUT_JSON  output file (default DATA_DIR/model_frame_reference.json).
#
# For every case: colnames(model.matrix) before and after lme4's rank check, selected
# rows and crossprod of X, the cnms, flist names and levels, theta names, VarCorr group
# names, term labels and number of levels of the random terms (lme4 >= 1.1-31), or the
# error / message lme4 gives.
suppressMessages({library(lme4); library(jsonlite)})
invisible(Sys.setlocale("LC_COLLATE", "C"))

args <- commandArgs(trailingOnly = TRUE)
data_dir <- if (length(args) >= 1) args[1] else "tests/data/model_frame"
out_json <- if (length(args) >= 2) args[2] else file.path(data_dir, "model_frame_reference.json")
dir.create(data_dir, showWarnings = FALSE, recursive = TRUE)

csv <- function(name) file.path(data_dir, paste0(name, ".csv"))
if (!file.exists(csv("sleepstudy"))) write.csv(lme4::sleepstudy, csv("sleepstudy"), row.names = FALSE)
if (!file.exists(csv("penicillin"))) write.csv(lme4::Penicillin, csv("penicillin"), row.names = FALSE)
if (!file.exists(csv("pastes"))) write.csv(lme4::Pastes, csv("pastes"), row.names = FALSE)
if (!file.exists(csv("detector"))) {
  set.seed(20240611)
  n <- 240
  spk <- sprintf("spk%02d", 1:20)
  att <- sprintf("A%02d", 7:12)
  d <- data.frame(
    speaker = sample(spk, n, TRUE), attack = sample(att, n, TRUE),
    label = sample(c("bonafide", "spoof"), n, TRUE, prob = c(0.3, 0.7)),
    x = round(rnorm(n), 6), z = round(rnorm(n), 6),
    cond = sample(c("low", "mid", "high"), n, TRUE),
    flag = sample(c(TRUE, FALSE), n, TRUE), session = sample(1:4, n, TRUE),
    stringsAsFactors = FALSE)
  d$z[c(7, 50, 51, 199)] <- NA
  d$bona01 <- as.integer(d$label == "bonafide")
  d$x2 <- 2 * d$x
  d$trial <- seq_len(n)
  d$one <- "a"
  d$w <- round(runif(n, 0.5, 2), 4)
  d$score <- round(ifelse(d$label == "spoof", -2, 2) + 0.5 * d$x +
    rnorm(20)[match(d$speaker, spk)] + 2 * rnorm(6)[match(d$attack, att)] + rnorm(n), 6)
  write.csv(d, csv("detector"), row.names = FALSE, na = "NA")
}

load_data <- function(name) {
  d <- read.csv(csv(name), stringsAsFactors = FALSE)
  if (name == "detector") d$cond <- factor(d$cond, levels = c("low", "mid", "high"))
  d
}

cases <- list(
  list(id = "ss1", data = "sleepstudy", formula = "Reaction ~ Days + (Days | Subject)"),
  list(id = "ss2", data = "sleepstudy", formula = "Reaction ~ Days + (Days || Subject)"),
  list(id = "ss3", data = "sleepstudy", formula = "Reaction ~ 1 + (1 | Subject)"),
  list(id = "pen1", data = "penicillin", formula = "diameter ~ 1 + (1 | plate) + (1 | sample)"),
  list(id = "pen2", data = "penicillin", formula = "diameter ~ 1 + (1 | sample) + (1 | plate)"),
  list(id = "pas1", data = "pastes", formula = "strength ~ 1 + (1 | batch/cask)"),
  list(id = "pas2", data = "pastes", formula = "strength ~ (1 | cask:batch) + (1 | batch)"),
  list(id = "det1", data = "detector", formula = "score ~ label + (1 | speaker) + (1 | attack)"),
  list(id = "det2", data = "detector", formula = "score ~ label*x + (1 | attack) + (1 | speaker)"),
  list(id = "det3", data = "detector", formula = "score ~ 0 + label + label:x + (0 + dummy(label, \"spoof\") | speaker) + (1 | attack)"),
  list(id = "det4", data = "detector", formula = "score ~ label*cond + x:z + (label | speaker)"),
  list(id = "det5", data = "detector", formula = "score ~ x:cond + cond:label + (x || attack) + (1 | speaker)"),
  list(id = "det6", data = "detector", formula = "score ~ (label + cond + x)^2 + (1 | speaker:attack)"),
  list(id = "det7", data = "detector", formula = "score ~ label*cond*x - label:cond:x + (1 + x | attack)"),
  list(id = "det8", data = "detector", formula = "score ~ x + label/cond + (1 | speaker)"),
  list(id = "det9", data = "detector", formula = "score ~ cond:label - 1 + (1 | attack)"),
  list(id = "det10", data = "detector", formula = "score ~ flag + x + flag:label + (1 | session) + (1 | speaker)"),
  list(id = "det11", data = "detector", formula = "score ~ -1 + x + (label || attack)"),
  list(id = "det12", data = "detector", formula = "score ~ label + (1 | speaker/attack)"),
  list(id = "det13", data = "detector", formula = "score ~ label + bona01 + x + x2 + (1 | speaker)"),
  list(id = "det14", data = "detector", formula = "score ~ label*cond - label + x:label + (x + cond || speaker) + (1 | attack)"),
  list(id = "det15", data = "detector", formula = "score ~ cond + (1 | cond/flag/attack)"),
  list(id = "det16", data = "detector", formula = "score ~ x*z + (1 + z | speaker) + (1 | attack)"),
  list(id = "det17", data = "detector", formula = "score ~ label + (0 + label | speaker) + (flag | attack)"),
  list(id = "det18", data = "detector", formula = "score ~ x + (1 | session) + (1 | speaker) + (0 + x | speaker)"),
  list(id = "det19", data = "detector", formula = "score ~ z + (1 | attack) + (1 | session:label)"),
  list(id = "err1", data = "detector", formula = "score ~ 1 + (1 | trial)"),
  list(id = "err2", data = "detector", formula = "score ~ label + (1 | one)"),
  list(id = "err3", data = "detector", formula = "score ~ 1 + (1 + x + z | speaker:attack)"),
  list(id = "err4", data = "detector", formula = "score ~ label + (1 | speaker) + (1 | one)")
)

pick_rows <- function(n) unique(pmin(c(1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, n), n))

run_case <- function(cs) {
  d <- load_data(cs$data)
  fo <- as.formula(cs$formula)
  out <- list(id = cs$id, data = cs$data, formula = cs$formula)
  msgs <- character()
  lf <- tryCatch(
    withCallingHandlers(lFormula(fo, d), message = function(m) {
      msgs <<- c(msgs, conditionMessage(m)); invokeRestart("muffleMessage")
    }),
    error = function(e) e)
  if (inherits(lf, "error")) {
    out$error <- conditionMessage(lf)
    return(out)
  }
  out$messages <- I(msgs)
  fr <- lf$fr
  n <- nrow(fr)
  out$n <- n
  out$rows <- I(as.integer(rownames(fr)) - 1L)       # 0-based rows of the CSV used
  mm <- model.matrix(lme4::nobars(fo), fr)
  out$X_names_full <- I(colnames(mm))
  X <- lf$X
  out$X_names <- I(colnames(X))
  out$dropped <- I(setdiff(colnames(mm), colnames(X)))
  rows <- pick_rows(n)
  out$X_rows <- I(rows - 1L)
  out$X_at_rows <- unname(X[rows, , drop = FALSE])
  out$XtX <- unname(crossprod(X))
  re <- lf$reTrms
  out$term_labels <- I(names(re$Ztlist))
  out$cnms <- unname(lapply(re$cnms, I))
  out$cnms_names <- I(names(re$cnms))
  out$nl <- I(unname(re$nl))
  out$flist_names <- I(names(re$flist))
  out$flist_assign <- I(attr(re$flist, "assign"))
  out$flist_levels <- unname(lapply(re$flist, function(f) I(levels(f))))
  out$flist_counts <- unname(lapply(re$flist, function(f) I(as.integer(table(f)))))
  # per term: raw model matrix rows (lme4's mkBlist recomputed: Zt rows are level x column)
  out$term_mm_at_rows <- unname(lapply(seq_along(re$Ztlist), function(k) {
    Zt <- re$Ztlist[[k]]
    nc <- length(re$cnms[[k]])
    Z <- as.matrix(t(Zt))[rows, , drop = FALSE]
    # collapse levels: X_k[i, j] = sum over levels of Z[i, (level, j)]
    sapply(seq_len(nc), function(j) rowSums(Z[, seq(j, ncol(Z), by = nc), drop = FALSE]))
  }))
  out$term_level_at_rows <- unname(lapply(seq_along(re$Ztlist), function(k) {
    f <- re$flist[[attr(re$flist, "assign")[k]]]
    I(as.character(f[rows]))
  }))
  m <- suppressWarnings(suppressMessages(
    lmer(fo, d, control = lmerControl(calc.derivs = FALSE))))
  out$theta_names <- I(names(getME(m, "theta")))
  vc <- as.data.frame(VarCorr(m))
  out$varcorr_groups <- I(unique(vc$grp[vc$grp != "Residual"]))
  out
}

res <- lapply(cases, run_case)
names(res) <- vapply(cases, `[[`, "", "id")

# R's terms.formula on right-hand sides (no data needed): term labels and intercept
rhs <- c("a*b*c", "(a+b+c)^2 - a:b", "a:b + b:c + c + a", "b:a + a", "(a+b)/c", "a/(b+c)",
         "0 + a + 1", "a + 0 - 0", "a + b - 1 + 1", "a:a + b", "a*b - a - b", "(a*b)^2",
         "-1", "a - (b + 1)", "a + (b - 1)", "a*b - a:b", "(a + b):(c + d)", "a:(b + c)",
         "(a + b + c + d)^3 - a:b:c", "x + dummy(f, \"l\")*a")
terms_ref <- lapply(rhs, function(r) {
  tt <- terms(as.formula(paste("~", r)))
  list(rhs = r, labels = I(attr(tt, "term.labels")), intercept = attr(tt, "intercept"))
})
res <- list(lme4_version = as.character(packageVersion("lme4")),
            r_version = R.version.string, cases = res, terms = terms_ref)
write_json(res, out_json, digits = NA, auto_unbox = TRUE, pretty = FALSE, matrix = "rowmajor")
cat("wrote", out_json, "\n")
