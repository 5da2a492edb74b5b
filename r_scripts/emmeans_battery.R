# Reference values for scoremix's estimated marginal means (scoremix.emm) from R emmeans.
#
# Usage:
#   Rscript r_scripts/emmeans_battery.R OUTDIR [SHARED_DATA_DIR]
#
# Writes OUTDIR/data/<dataset>.csv (the small public R data sets and seeded simulated
# tables the models use) and OUTDIR/battery.json: per model its data set, formula, REML
# flag, factor columns, and per query (emmeans / contrast / joint_tests with their
# arguments) the summary data frame of emmeans 1.8 (Debian r-cran-emmeans).  With
# SHARED_DATA_DIR (default ../shared/data next to the checkout) the two models on the
# ASVspoof 2019 LA evaluation table are added; their rows are selected deterministically
# (utterance number %% 40 == 0) so Python selects the same rows.
#
# Every data set is written as CSV and read back (factors as character, then factor with
# levels sorted as R's read.csv does), so R and Python fit the same data.  For "mvt"
# adjustments emmeans calls mvtnorm's randomised quasi-Monte Carlo (abseps 1e-3); the
# script seeds it and also stores a precise value (GenzBretz(maxpts = 2e6, abseps = 1e-7))
# in `p.value.precise`.

suppressPackageStartupMessages({
  library(lme4); library(emmeans); library(jsonlite); library(mvtnorm)
})
emm_options(pbkrtest.limit = 5000, lmerTest.limit = 20000)

args <- commandArgs(trailingOnly = TRUE)
outdir <- if (length(args) >= 1) args[1] else "tests/data/emmeans"
shared <- if (length(args) >= 2) args[2] else file.path("..", "shared", "data")
dir.create(file.path(outdir, "data"), showWarnings = FALSE, recursive = TRUE)

datasets <- list()
put_data <- function(name, df, factors) {
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
  path <- file.path(outdir, "data", paste0(name, ".csv"))
  if (!is.null(name) && !startsWith(name, "la_")) utils::write.csv(df, path, row.names = FALSE)
  for (f in factors) df[[f]] <- factor(as.character(df[[f]]))
  datasets[[name]] <<- list(df = df, factors = factors)
}

# ---------------------------------------------------------------- data sets
ss <- lme4::sleepstudy
ss$fDays <- paste0("d", ss$Days)
put_data("sleepstudy", ss, c("Subject", "fDays"))
ck <- lme4::cake
ck$ftemp <- paste0("t", ck$temp)
put_data("cake", ck[, c("replicate", "recipe", "temp", "ftemp", "angle")], c("replicate", "recipe", "ftemp"))
put_data("Dyestuff", lme4::Dyestuff, c("Batch"))
put_data("Machines", as.data.frame(nlme::Machines), c("Worker", "Machine"))
put_data("ergoStool", as.data.frame(nlme::ergoStool), c("Subject", "Type"))
oats <- as.data.frame(nlme::Oats)
oats$fnitro <- paste0("N", oats$nitro)
put_data("Oats", oats, c("Block", "Variety", "fnitro"))
put_data("Orthodont", as.data.frame(nlme::Orthodont), c("Subject", "Sex"))
put_data("Alfalfa", as.data.frame(nlme::Alfalfa), c("Variety", "Date", "Block"))
put_data("PBG", as.data.frame(nlme::PBG)[, c("deltaBP", "dose", "Treatment", "Rabbit")], c("Treatment", "Rabbit"))
cw <- as.data.frame(datasets::ChickWeight)
cw$Chick <- paste0("c", as.character(cw$Chick)); cw$Diet <- paste0("D", as.character(cw$Diet))
put_data("ChickWeight", cw, c("Chick", "Diet"))
put_data("ham", lmerTest::ham, c("Consumer", "Product", "Information", "Gender"))
put_data("TVbo", lmerTest::TVbo[, c("Assessor", "TVset", "Repeat", "Picture", "Coloursaturation", "Sharpnessofmovement")],
         c("Assessor", "TVset", "Repeat", "Picture"))
car <- lmerTest::carrots[, c("Consumer", "Homesize", "Gender", "Age", "Product", "Preference", "sens2")]
car <- car[stats::complete.cases(car), ]
put_data("carrots", car, c("Consumer", "Homesize", "Gender", "Age", "Product"))

# seeded simulated tables: unbalanced cells, 2-13 level factors
set.seed(20261125)
n <- 420
sim1 <- data.frame(A = sample(c("a1", "a2", "a3"), n, TRUE, prob = c(.5, .3, .2)),
                   B = sample(c("b1", "b2", "b3", "b4"), n, TRUE, prob = c(.1, .2, .3, .4)),
                   C = sample(c("c1", "c2"), n, TRUE, prob = c(.7, .3)),
                   x = round(rnorm(n, 3, 1.5), 3),
                   g = sample(sprintf("g%02d", 1:24), n, TRUE))
eff <- c(a1 = 0, a2 = .6, a3 = -.4)[sim1$A] + c(b1 = 0, b2 = .3, b3 = .5, b4 = .1)[sim1$B] +
  (sim1$A == "a2" & sim1$B == "b3") * .8 + (sim1$C == "c2") * .4 + .25 * sim1$x
gre <- rnorm(24, 0, .7); names(gre) <- sprintf("g%02d", 1:24)
sim1$y <- round(eff + gre[sim1$g] + rnorm(n), 4)
put_data("sim_unbalanced", sim1, c("A", "B", "C", "g"))

attacks <- sprintf("A%02d", 7:19)
spk <- sprintf("S%03d", 1:30)
gender <- setNames(rep(c("female", "male"), 15), spk)
n2 <- 900
sim2 <- data.frame(attack = sample(attacks, n2, TRUE), speaker = sample(spk, n2, TRUE))
sim2$gender <- gender[sim2$speaker]
aeff <- setNames(seq(-2, 2, length.out = 13), attacks)
sre <- setNames(rnorm(30, 0, .5), spk)
sim2$score <- round(aeff[sim2$attack] + .3 * (sim2$gender == "male") +
                      .2 * (sim2$gender == "male") * (sim2$attack %in% c("A17", "A18")) +
                      sre[sim2$speaker] + rnorm(n2), 4)
put_data("sim_attacks", sim2, c("attack", "speaker", "gender"))

n3 <- 320
sim3 <- data.frame(P = sample(c("p1", "p2"), n3, TRUE), Q = sample(c("q1", "q2"), n3, TRUE, prob = c(.35, .65)),
                   R = sample(c("r1", "r2"), n3, TRUE), subj = sample(sprintf("s%02d", 1:16), n3, TRUE),
                   item = sample(sprintf("i%02d", 1:10), n3, TRUE))
sre3 <- setNames(rnorm(16, 0, .6), sprintf("s%02d", 1:16)); ire3 <- setNames(rnorm(10, 0, .4), sprintf("i%02d", 1:10))
sim3$y <- round((sim3$P == "p2") * .5 + (sim3$Q == "q2") * .3 - (sim3$P == "p2") * (sim3$Q == "q2") * (sim3$R == "r2") * .7 +
                  sre3[sim3$subj] + ire3[sim3$item] + rnorm(n3), 4)
put_data("sim_crossed", sim3, c("P", "Q", "R", "subj", "item"))

la_path <- file.path(shared, "asvspoof2019_la_eval", "asvspoof2019_la_eval.csv.gz")
has_la <- file.exists(la_path)
if (has_la) {
  la <- utils::read.csv(la_path, stringsAsFactors = FALSE)
  la <- la[as.integer(sub("LA_E_", "", la$utt)) %% 40 == 0, ]
  put_data("la_spoof", la[la$label == "spoof", c("speaker", "speaker_gender", "attack", "score_logit")],
           c("speaker", "speaker_gender", "attack"))
  put_data("la_all", la[, c("speaker", "speaker_gender", "label", "score_logit")],
           c("speaker", "speaker_gender", "label"))
}

# ---------------------------------------------------------------- queries
q_emm <- function(specs, by = NULL, at = NULL, weights = "equal", df = "satterthwaite") {
  list(kind = "emmeans", specs = specs, by = by, at = at, weights = weights, lmer_df = df)
}
q_con <- function(specs, method, adjust, by = NULL, at = NULL, df = "satterthwaite", weights = "equal", ref = NULL) {
  list(kind = "contrast", specs = specs, by = by, at = at, weights = weights, lmer_df = df,
       method = method, adjust = adjust, ref = ref)
}
q_joint <- function(df = "satterthwaite", by = NULL) list(kind = "joint_tests", lmer_df = df, by = by)

models <- list(
  list(id = "sleep_fdays", data = "sleepstudy", formula = "Reaction ~ fDays + (1 | Subject)", queries = list(
    q_emm("fDays"), q_emm("fDays", df = "kenward-roger"), q_emm("fDays", df = "asymptotic"),
    q_con("fDays", "pairwise", "tukey"), q_con("fDays", "consec", "mvt"), q_con("fDays", "trt.vs.ctrl", "dunnettx"),
    q_con("fDays", "eff", "fdr", df = "kenward-roger"), q_joint(), q_joint("kenward-roger"))),
  list(id = "sleep_slope", data = "sleepstudy", formula = "Reaction ~ Days + (Days | Subject)", queries = list(
    q_emm("1", at = list(Days = c(0, 4.5, 9))), q_emm("Days", at = list(Days = c(0, 9))),
    q_con("Days", "pairwise", "none", at = list(Days = c(0, 3, 9))), q_joint(), q_joint("kenward-roger"))),
  list(id = "sleep_ml", data = "sleepstudy", formula = "Reaction ~ fDays + (1 | Subject)", REML = FALSE, queries = list(
    q_emm("fDays"), q_con("fDays", "trt.vs.ctrl", "bonferroni"), q_con("fDays", "pairwise", "holm", df = "asymptotic"),
    q_joint())),
  list(id = "cake_interaction", data = "cake", formula = "angle ~ recipe * ftemp + (1 | recipe:replicate)", queries = list(
    q_emm("recipe"), q_emm("ftemp", df = "kenward-roger"), q_emm("recipe", by = "ftemp"),
    q_con("recipe", "pairwise", "tukey"), q_con("ftemp", "poly", "none"), q_con("ftemp", "consec", "mvt"),
    q_con("recipe", "pairwise", "tukey", by = "ftemp", df = "kenward-roger"), q_con("ftemp", "eff", "holm", by = "recipe"),
    q_joint(), q_joint("kenward-roger"))),
  list(id = "cake_covariate", data = "cake", formula = "angle ~ recipe + temp + (1 | replicate)", queries = list(
    q_emm("recipe"), q_emm("recipe", at = list(temp = 180)), q_emm("recipe", by = "temp", at = list(temp = c(175, 225))),
    q_con("recipe", "trt.vs.ctrl", "none", ref = 2), q_joint(), q_joint("kenward-roger"))),
  list(id = "dyestuff", data = "Dyestuff", formula = "Yield ~ 1 + (1 | Batch)", queries = list(
    q_emm("1"), q_emm("1", df = "kenward-roger"))),
  list(id = "machines", data = "Machines", formula = "score ~ Machine + (1 | Worker) + (1 | Worker:Machine)", queries = list(
    q_emm("Machine"), q_emm("Machine", df = "kenward-roger"), q_con("Machine", "pairwise", "tukey"),
    q_con("Machine", "pairwise", "mvt"), q_con("Machine", "pairwise", "scheffe"), q_joint(), q_joint("kenward-roger"))),
  list(id = "ergostool", data = "ergoStool", formula = "effort ~ Type + (1 | Subject)", queries = list(
    q_emm("Type"), q_con("Type", "pairwise", "tukey", df = "kenward-roger"), q_con("Type", "eff", "sidak"),
    q_con("Type", "trt.vs.ctrl", "mvt"), q_joint())),
  list(id = "oats_factor", data = "Oats", formula = "yield ~ Variety * fnitro + (1 | Block/Variety)", queries = list(
    q_emm("Variety"), q_emm("fnitro", df = "kenward-roger"), q_emm(c("Variety", "fnitro")),
    q_con("fnitro", "poly", "none", by = "Variety"), q_con("Variety", "pairwise", "tukey", by = "fnitro"),
    q_joint(), q_joint("kenward-roger"))),
  list(id = "oats_covariate", data = "Oats", formula = "yield ~ Variety * nitro + (1 | Block/Variety)", queries = list(
    q_emm("Variety"), q_emm("Variety", by = "nitro", at = list(nitro = c(0, 0.3, 0.6))),
    q_con("Variety", "pairwise", "tukey", by = "nitro", at = list(nitro = c(0, 0.6))), q_joint(), q_joint("kenward-roger"))),
  list(id = "orthodont_int", data = "Orthodont", formula = "distance ~ age * Sex + (1 | Subject)", queries = list(
    q_emm("Sex"), q_emm("Sex", by = "age", at = list(age = c(8, 14))), q_con("Sex", "pairwise", "none", by = "age", at = list(age = c(8, 11, 14))),
    q_joint(), q_joint("kenward-roger"))),
  list(id = "orthodont_slopes", data = "Orthodont", formula = "distance ~ age + Sex + (age | Subject)", queries = list(
    q_emm("Sex"), q_emm("Sex", df = "kenward-roger"), q_con("Sex", "revpairwise", "none"), q_joint())),
  list(id = "alfalfa", data = "Alfalfa", formula = "Yield ~ Date * Variety + (1 | Block) + (1 | Block:Variety)", queries = list(
    q_emm("Date"), q_emm("Variety", df = "kenward-roger"), q_emm("Date", by = "Variety"),
    q_con("Date", "trt.vs.ctrl", "dunnettx"), q_con("Date", "consec", "mvt", by = "Variety"), q_con("Variety", "pairwise", "tukey"),
    q_joint(), q_joint("kenward-roger"))),
  list(id = "pbg", data = "PBG", formula = "deltaBP ~ log(dose) * Treatment + (1 | Rabbit)", queries = list(
    q_emm("Treatment"), q_emm("Treatment", by = "dose", at = list(dose = c(12.5, 50, 200))),
    q_con("Treatment", "pairwise", "none", by = "dose", at = list(dose = c(25, 100))), q_joint())),
  list(id = "chick_int", data = "ChickWeight", formula = "weight ~ Diet * Time + (1 | Chick)", queries = list(
    q_emm("Diet"), q_emm("Diet", by = "Time", at = list(Time = c(0, 10, 21))), q_con("Diet", "pairwise", "tukey"),
    q_con("Diet", "trt.vs.ctrl", "holm", by = "Time", at = list(Time = c(10, 21))), q_joint(), q_joint("kenward-roger"))),
  list(id = "chick_slopes", data = "ChickWeight", formula = "weight ~ Diet + Time + (Time | Chick)", queries = list(
    q_emm("Diet"), q_con("Diet", "eff", "bonferroni"), q_con("Diet", "consec", "mvt"), q_joint())),
  list(id = "ham", data = "ham", formula = "Informed.liking ~ Product * Information + (1 | Consumer) + (1 | Product:Consumer)", queries = list(
    q_emm("Product"), q_emm("Information"), q_emm("Product", by = "Information"), q_emm("Product", df = "kenward-roger"),
    q_con("Product", "pairwise", "tukey"), q_con("Information", "pairwise", "none", by = "Product"),
    q_con("Product", "trt.vs.ctrl", "mvt"), q_joint(), q_joint("kenward-roger"))),
  list(id = "ham_gender", data = "ham", formula = "Informed.liking ~ Product * Information + Gender + (1 | Consumer)", queries = list(
    q_emm("Product"), q_emm("Product", weights = "proportional"), q_emm("Product", weights = "outer"),
    q_emm(c("Product", "Information"), weights = "cells"), q_con("Product", "pairwise", "tukey", weights = "proportional"),
    q_joint())),
  list(id = "tvbo", data = "TVbo", formula = "Coloursaturation ~ TVset * Picture + (1 | Assessor) + (1 | Assessor:TVset)", queries = list(
    q_emm("TVset"), q_emm("Picture", by = "TVset"), q_emm("TVset", df = "kenward-roger"),
    q_con("TVset", "pairwise", "tukey"), q_con("Picture", "consec", "none", by = "TVset"),
    q_con("TVset", "pairwise", "bonferroni", by = "Picture", df = "kenward-roger"), q_joint(), q_joint("kenward-roger"))),
  list(id = "tvbo_repeat", data = "TVbo", formula = "Sharpnessofmovement ~ TVset + Picture + Repeat + (1 | Assessor)", queries = list(
    q_emm("TVset"), q_emm(c("TVset", "Repeat")), q_con("Picture", "eff", "fdr"), q_joint())),
  list(id = "carrots_product", data = "carrots", formula = "Preference ~ Product + Homesize + (1 | Consumer)", queries = list(
    q_emm("Product"), q_emm("Product", weights = "proportional"), q_con("Product", "trt.vs.ctrl", "dunnettx"),
    q_con("Product", "eff", "holm"), q_con("Homesize", "pairwise", "none"), q_joint())),
  list(id = "carrots_sens", data = "carrots", formula = "Preference ~ sens2 * Homesize + Age + (1 + sens2 | Consumer)", queries = list(
    q_emm("Homesize"), q_emm("Homesize", by = "sens2", at = list(sens2 = c(-2, 0, 2))),
    q_emm("Age", weights = "proportional"), q_con("Age", "pairwise", "tukey"), q_con("Age", "pairwise", "mvt"),
    q_joint())),
  list(id = "sim_unbalanced_full", data = "sim_unbalanced", formula = "y ~ A * B + C + x + (1 | g)", queries = list(
    q_emm("A"), q_emm("B"), q_emm("A", weights = "proportional"), q_emm("A", weights = "outer"),
    q_emm("A", weights = "cells"), q_emm("A", weights = "flat"), q_emm("B", by = "A", at = list(x = 2)),
    q_emm(c("A", "B"), df = "kenward-roger"), q_con("A", "pairwise", "tukey"), q_con("B", "pairwise", "mvt", by = "A"),
    q_con("B", "eff", "none", by = "C", weights = "proportional"), q_con("A", "consec", "holm", df = "kenward-roger"),
    q_joint(), q_joint("kenward-roger"))),
  list(id = "sim_unbalanced_slopes", data = "sim_unbalanced", formula = "y ~ A + B + x + (1 + x | g)", queries = list(
    q_emm("A"), q_emm("B", weights = "proportional"), q_emm("A", at = list(x = c(1, 5))), q_con("B", "trt.vs.ctrl", "mvt", ref = 3),
    q_joint())),
  list(id = "sim_attacks", data = "sim_attacks", formula = "score ~ attack * gender + (1 | speaker)", queries = list(
    q_emm("attack"), q_emm("gender"), q_emm("gender", by = "attack"), q_emm("attack", df = "kenward-roger"),
    q_con("attack", "eff", "fdr"), q_con("gender", "revpairwise", "none", by = "attack"),
    q_con("attack", "pairwise", "tukey"), q_con("attack", "trt.vs.ctrl", "bonferroni"),
    q_joint(), q_joint("kenward-roger"))),
  list(id = "sim_crossed", data = "sim_crossed", formula = "y ~ P * Q * R + (1 | subj) + (1 | item)", queries = list(
    q_emm("P"), q_emm(c("P", "Q")), q_emm("P", by = c("Q", "R")), q_emm("P", weights = "proportional"),
    q_con("P", "pairwise", "none", by = c("Q", "R")), q_con("Q", "revpairwise", "none", by = "P", df = "kenward-roger"),
    q_joint(), q_joint("kenward-roger")))
)
if (has_la) {
  models <- c(models, list(
    list(id = "la_attack_gender", data = "la_spoof", formula = "score_logit ~ attack * speaker_gender + (1 | speaker)", queries = list(
      q_emm("attack"), q_emm("speaker_gender", by = "attack"), q_con("attack", "eff", "holm"),
      q_con("speaker_gender", "pairwise", "none", by = "attack"), q_con("attack", "pairwise", "tukey"), q_joint(), q_joint("kenward-roger"))),
    list(id = "la_label_gender", data = "la_all", formula = "score_logit ~ label * speaker_gender + (1 | speaker)", queries = list(
      q_emm("label"), q_emm("speaker_gender", by = "label"), q_con("speaker_gender", "pairwise", "none", by = "label"),
      q_joint())))
  )
}

# ---------------------------------------------------------------- run
frame_records <- function(df) {
  df <- as.data.frame(df)
  for (col in names(df)) if (is.factor(df[[col]])) df[[col]] <- as.character(df[[col]])
  df
}

precise_mvt <- function(con, adjust_by) {
  # 1 - P(max |T_i| < |t_j|) with mvtnorm at high precision, per by group (as emmeans)
  s <- as.data.frame(summary(con, adjust = "none"))
  L <- con@linfct; V <- con@V
  C <- stats::cov2cor(L %*% V %*% t(L))
  by <- con@misc$by.vars
  groups <- if (is.null(by)) list(seq_len(nrow(s))) else split(seq_len(nrow(s)), interaction(s[by], drop = TRUE, lex.order = FALSE))
  stat <- if ("t.ratio" %in% names(s)) s$t.ratio else s$z.ratio
  out <- rep(NA_real_, nrow(s))
  for (rows in groups) {
    df <- emmeans:::.fix.df(s$df[rows])
    for (i in rows) {
      k <- length(rows)
      set.seed(1)
      p <- mvtnorm::pmvt(lower = rep(-abs(stat[i]), k), upper = rep(abs(stat[i]), k), df = as.integer(df[1]),
                         corr = C[rows, rows, drop = FALSE], algorithm = GenzBretz(maxpts = 2e6, abseps = 1e-7))
      out[i] <- 1 - as.numeric(p)
    }
  }
  out
}

results <- list()
for (m in models) {
  ds <- datasets[[m$data]]
  reml <- if (is.null(m$REML)) TRUE else m$REML
  fit <- lme4::lmer(stats::as.formula(m$formula), data = ds$df, REML = reml)
  out <- list(id = m$id, data = m$data, formula = m$formula, REML = reml, factors = ds$factors,
              fixef = as.list(lme4::fixef(fit)), theta = as.numeric(lme4::getME(fit, "theta")),
              theta_names = names(lme4::getME(fit, "theta")), queries = list())
  for (q in m$queries) {
    at <- q$at
    if (q$kind == "joint_tests") {
      jt <- suppressMessages(joint_tests(fit, by = q$by, lmer.df = q$lmer_df))
      res <- frame_records(jt)
    } else {
      emm <- suppressMessages(emmeans(fit, specs = q$specs, by = q$by, at = at, weights = q$weights, lmer.df = q$lmer_df))
      if (q$kind == "emmeans") {
        res <- frame_records(summary(emm))
      } else {
        args <- list(emm, method = q$method, adjust = q$adjust)
        if (!is.null(q$ref)) args$ref <- q$ref
        set.seed(1)
        con <- suppressMessages(do.call(contrast, args))
        res <- frame_records(summary(con))
        res$lower.CL.adj <- NA_real_
        ci <- suppressMessages(as.data.frame(confint(con)))
        lo <- grep("LCL|lower", names(ci), value = TRUE); hi <- grep("UCL|upper", names(ci), value = TRUE)
        res$lower.CL.adj <- ci[[lo]]; res$upper.CL.adj <- ci[[hi]]
        if (q$adjust == "mvt") res$p.value.precise <- precise_mvt(con)
      }
    }
    q$result <- res
    out$queries[[length(out$queries) + 1]] <- q
  }
  results[[length(results) + 1]] <- out
  cat(sprintf("%-24s %2d queries\n", m$id, length(m$queries)))
}
info <- list(emmeans = as.character(packageVersion("emmeans")), lme4 = as.character(packageVersion("lme4")),
             lmerTest = as.character(packageVersion("lmerTest")), pbkrtest = as.character(packageVersion("pbkrtest")),
             mvtnorm = as.character(packageVersion("mvtnorm")), R = R.version.string)
writeLines(jsonlite::toJSON(list(info = info, models = results), auto_unbox = TRUE, digits = NA, null = "null",
                            na = "null", pretty = FALSE),
           file.path(outdir, if (has_la) "battery.json" else "battery_nola.json"))
