# Thousands of mutated formulas, argument declarations and inputs through the R interface: each
# call returns a result or stops with an informative R error; none crashes R or reports an internal
# error (a caught panic). The engine's own fuzzer (src/rust/engine/tests/fuzz.rs) goes further.

fuzz_seeds <- list(
  list("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)")),
  list("LogSumExp_Reduction(-p*SqDist(x,y) + b, 1)", c("x = Vi(2)", "y = Vj(2)", "b = Vj(1)", "p = Pm(1)")),
  list("ArgKMin_Reduction(SqDist(x,y), 3, 0)", c("x = Vi(4)", "y = Vj(4)")),
  list("Sum_Reduction(Grad(Exp(-SqDist(x,y))*b, x, e), 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "e = Vi(1)")),
  list("Max_ArgMax_Reduction(IfElse(x - y, Sin(x), Cos(y)), 0)", c("x = Vi(1)", "y = Vj(1)")),
  list("Sum_Reduction(Concat(TensorProd(x, y), Elem(x, 1) * Extract(y, 0, 2)), 1)", c("x = Vi(3)", "y = Vj(3)"))
)
fuzz_words <- c("Exp", "Log", "Sum_Reduction", "ArgKMin_Reduction", "Grad", "TensorProd", "Elem", "OneHot",
                "Vi", "Vj", "Pm", "x", "y", "b", "0", "-1", "3", "2147483648", "1e400", "NaN", "(", ")", ",",
                "=", "+", "*", "/", "|", " ", "\u00e9", "")

mutate_text <- function(s) {
  n <- nchar(s)
  a <- sample.int(n + 1L, 1L) - 1L
  b <- min(n, a + sample.int(8L, 1L) - 1L)
  left <- substr(s, 1L, a)
  right <- substr(s, b + 1L, n)
  switch(sample.int(6L, 1L),
         paste0(left, right),
         paste0(left, sample(fuzz_words, 1L), right),
         paste0(left, sample(fuzz_words, 1L), substr(s, a + 1L, n)),
         paste0(substr(s, 1L, b), substr(s, a + 1L, b), substr(s, b + 1L, n)),
         paste0(strrep("Exp(", 2000L), s, strrep(")", 2000L)),
         paste(rep(s, sample(c(2L, 700L), 1L)), collapse = "+"))
}

# Inputs for the parsed variables, sometimes of a wrong shape, type or count.
fuzz_inputs <- function(info) {
  ni <- sample.int(30L, 1L)
  nj <- sample.int(30L, 1L)
  inputs <- Map(function(cat, d) {
    nrow <- switch(cat, Vi = ni, Vj = nj, Pm = 1L)
    matrix(runif(nrow * d, -3, 3), nrow, d)
  }, info$categories, info$dims)
  if (length(inputs) > 0L && runif(1) < 0.3) {
    k <- sample.int(length(inputs), 1L)
    inputs[[k]] <- switch(sample.int(8L, 1L),
                          inputs[[k]][, -1L, drop = FALSE],
                          cbind(inputs[[k]], 1),
                          "a string",
                          NULL,
                          array(1, c(2L, 2L, 2L)),
                          matrix(NA_real_, nrow(inputs[[k]]), ncol(inputs[[k]])),
                          list(1, 2),
                          matrix(1:4 + 0i, 2L))
  }
  if (runif(1) < 0.05) inputs <- inputs[-1L]
  unname(inputs)
}

test_that("mutated formulas and inputs give a result or an informative error", {
  set.seed(8)
  n_cases <- 3000L
  outcomes <- character(n_cases)
  for (i in seq_len(n_cases)) {
    seed <- fuzz_seeds[[sample.int(length(fuzz_seeds), 1L)]]
    formula <- seed[[1L]]
    args <- seed[[2L]]
    if (runif(1) < 0.85) formula <- mutate_text(formula)
    if (runif(1) < 0.2) {
      k <- sample.int(length(args), 1L)
      args[k] <- mutate_text(args[k])
    }
    outcomes[i] <- tryCatch({
      op <- keops_kernel(formula, args)
      op(fuzz_inputs(attr(op, "rkeops")$info))
      "result"
    }, error = function(e) {
      msg <- conditionMessage(e)
      # (an error that is not one of rkeops' classes escaped the checks: see ?rkeops_errors)
      if (nchar(msg) < 10L || grepl("internal error", msg) || !inherits(e, "rkeops_error")) {
        paste("uninformative:", msg, "| formula:", substr(formula, 1L, 200L), "| args:",
              paste(args, collapse = "; "))
      } else {
        "error"
      }
    })
  }
  bad <- outcomes[!outcomes %in% c("result", "error")]
  expect_identical(bad, character(0))
  # The mutations reach both ends: some calls compute, most fail.
  expect_gt(sum(outcomes == "result"), 100L)
  expect_gt(sum(outcomes == "error"), 1000L)
})
