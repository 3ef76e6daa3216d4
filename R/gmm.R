#' Gaussian mixtures by EM in one engine call
#'
#' `keops_gmm()` fits a mixture of `G` Gaussians to the rows of `x` by the EM algorithm, with
#' diagonal covariances (mclust's model `"VVI"`: each component its own volume and shape, axes along
#' the coordinates) or full ones (`"VVV"`). Each iteration is an E-step (a log-sum-exp over the N x G
#' pairs) and an M-step (one sum over the same pairs gives each component's weight, mean and
#' (co)variances). For `"VVI"` the whole loop is in the engine (one program, [keops_program()]; on a
#' GPU the data and the parameters stay on the device; with several GPUs set and 65536 points per
#' GPU or more, each GPU keeps its share of the rows and the M-step's sums and the log-likelihood are
#' added between them, in their order); for `"VVV"` each iteration is two reductions and the
#' inversion of the G covariance matrices in R (D x D each).
#'
#' The iterations stop after `iter.max`, or when the relative change of the log-likelihood from one
#' iteration to the next, `|L_t - L_{t-1}| / (1 + |L_t|)`, is below `tol` (tested one iteration
#' after mclust tests it: a fit may run one more iteration than `mclust::em()`). With `tol = 0`,
#' `iter.max = n` runs n EM iterations from `init`, as `mclust::em(..., control = emControl(itmax =
#' n))` counts them, to the same parameters and log-likelihood.
#'
#' **Accuracy.** The fit runs on the standardised data: each column centred on its mean and divided
#' by its standard deviation, in float64 on the host's cores, once. Both models are unchanged by such a map of each
#' coordinate (a diagonal covariance stays diagonal), so the maximum-likelihood fit maps back
#' exactly: the means, (co)variances, log-likelihood (minus `N * sum(log(sd))`, the Jacobian) and
#' BIC are returned for `x` as given, and [predict()][predict.keops_gmm] standardises `newdata` the
#' same way. In float32 (the default precision) data far from the origin (GPS coordinates, times in
#' seconds since 1970) are then fitted as well as data around it, and columns of different units
#' each keep float32's relative precision. Each M-step takes the (co)variances from the deviations
#' to the previous iteration's means (`E[(x - m)^2] - (E[x] - m)^2`, one pass over the pairs: the
#' correction is tiny once the means settle), not from `E[x^2] - E[x]^2`, which cancels in float32
#' for tight components.
#'
#' **Degenerate data.** A variance (an eigenvalue of a covariance, for `"VVV"`) below `1e-10` times
#' its column's variance (times 1 for a constant column) is raised to that floor: a constant
#' column, a component holding identical points, or one component per point (`G = N`) then give a
#' finite fit, whose log-likelihood the floor bounds (it would grow without bound), with a warning
#' of class `rkeops_warning_degenerate` naming the components. mclust returns `NULL` there. A
#' component that holds no point gets weight 0, with the same warning.
#'
#' **Start and choice of G.** Without `init`, EM starts from the clusters of [keops_kmeans()] run
#' `nstart` times (k-means++ seeds, R's random numbers: reproducible with `set.seed()`) on the
#' standardised data, the clustering of least within-cluster sum of squares kept; each component's
#' weight, mean and (co)variances those of a cluster. With `G` a vector, a mixture is fitted for
#' each value and the one of largest BIC (mclust's sign) is returned, the BIC of each in `BIC`; fits
#' at the variance floor have `NA` there (as mclust's) and are kept only when all are.
#'
#' **On the workers of a `future` plan.** After [rkeops_use_future()], the standardised points are
#' cut into one shard of rows per worker of the plan (or `blocks`), sent once to the workers, which
#' keep them for all the EM iterations of a value of `G` (and once more for its K-means start, which
#' runs there too): an iteration sends the G components' parameters and gets back each shard's
#' log-likelihood and M-step sums, added up here; the classification comes back once, at the end.
#' The iterations, classification and parameters are those of one process, up to the order of the
#' float sums (see [keops_kmeans()] for the plans and the cost).
#'
#' Costs: two reductions over N x G pairs of dimension D per iteration (for `"VVV"`, formulas of D^2
#' terms), two more for the returned log-likelihood and classification, and `nstart` K-means fits
#' (of at most 10 iterations); memory O(N + G D^2) beyond `x` (the N x G responsibilities are never
#' stored).
#'
#' @param x A numeric matrix (or data frame, or vector: one column) of N points, one per row.
#' @param G The number of components, or several (e.g. `1:9`): the fit of largest BIC is returned.
#' @param model `"VVI"` (diagonal covariances) or `"VVV"` (full covariances).
#' @param iter.max The most EM iterations.
#' @param tol The tolerance on the relative change of the log-likelihood (0: run `iter.max`).
#' @param init `NULL` (start from [keops_kmeans()]'s clusters), or, with one `G`, parameters laid
#'   out as mclust's, for `x` as given: a list of `pro` (G weights), `mean` (D x G) and `variance`,
#'   with `sigma` (D x D x G covariance matrices, positive definite, of which the diagonals are used
#'   for `"VVI"`) or mclust's VVI `scale` and `shape`.
#' @param nstart How many k-means++ seedings of the K-means start (without `init`).
#' @return An object of class `"keops_gmm"`: `parameters` (`pro`, `mean` D x G, `variance` with
#'   `modelName`, `d`, `G`, `sigma` D x D x G, and for `"VVI"` `scale` and `shape`, as mclust lays
#'   them out), `loglik` (of the returned parameters), `loglik_trace` (of the parameters before each
#'   iteration, then of the returned ones), `df` (the number of free parameters, mclust's
#'   `nMclustParams()`), `bic` (`2 loglik - df log N`, mclust's sign: larger is better; [stats::BIC()]
#'   of the fit is `-bic`), `BIC` (the `bic` of each value of `G`, named by it), `classification` (the
#'   most likely component of each point), `iterations`, `n`, `d`, `G`, `modelName`, `degenerate`
#'   (whether a variance is at the floor or a weight 0), `scaling` (the `center` and `scale` of the
#'   standardisation). Methods: `print()`, `summary()`, `predict()`, `plot()`, `logLik()` (hence
#'   `AIC()` and `BIC()`), `nobs()`.
#' @seealso `vignette("gmm")`, which builds the program.
#' @export
#' @examples
#' set.seed(1)
#' x <- rbind(matrix(rnorm(600, 0, 1), 300), matrix(rnorm(600, 4, 0.5), 300))
#' fit <- keops_gmm(x, 2)
#' fit$parameters$pro
#' table(fit$classification)
#' predict(fit, rbind(c(0, 0), c(4, 4)))$classification
#' # the number of components by BIC
#' best <- keops_gmm(x, 1:4)
#' best$G
#' best$BIC
keops_gmm <- function(x, G, model = "VVI", iter.max = 100, tol = 1e-6, init = NULL, nstart = 10) {
  fun <- "keops_gmm"
  x <- check_points(x, "x", fun, min_rows = 2L)
  if (!is.numeric(G) || length(G) < 1L || anyNA(G) || anyDuplicated(G)) {
    rkeops_abort(arg_label("G", fun), " must be a whole number >= 1, or several different ones",
                 kind = "input", arg = "G")
  }
  G <- vapply(G, check_whole, 1L, arg = "G", fun = fun, min = 1, max = nrow(x))
  if (!is.character(model) || length(model) != 1L || !model %in% c("VVI", "VVV")) {
    rkeops_abort(arg_label("model", fun), " must be \"VVI\" (diagonal covariances) or \"VVV\" (full ones)",
                 kind = "input", arg = "model")
  }
  iter.max <- check_whole(iter.max, "iter.max", fun, min = 1)
  check_number(tol, "tol", fun, sign = "non-negative")
  nstart <- check_whole(nstart, "nstart", fun, min = 1)
  if (!is.null(init) && length(G) > 1L) {
    rkeops_abort(arg_label("init", fun), " must be NULL when 'G' has several values", kind = "input", arg = "init")
  }
  # (under rkeops_use_future(), the K-means start and the EM iterations keep the points on the
  # workers, each sending them once; the other reductions run here, not as futures sending them)
  on_workers <- local_future_off()
  scaling <- gmm_scaling(x)
  z <- gmm_standardise(x, scaling)
  fits <- lapply(G, function(g) {
    start <- if (is.null(init)) gmm_from_kmeans(z, g, model == "VVV", nstart, on_workers) else
      gmm_standardise_parameters(gmm_init(init, ncol(x), g, model == "VVV"), scaling)
    shards <- if (!is.null(on_workers)) shards_open(list(x = z), on_workers)
    fit <- if (model == "VVV") {
      gmm_vvv(z, start, iter.max, tol, scaling, shards)
    } else if (is.null(shards)) {
      gmm_vvi(z, start, iter.max, tol, scaling)
    } else {
      gmm_vvi_shards(shards, nrow(z), start, iter.max, tol, scaling)
    }
    new_keops_gmm(fit, scaling, model)
  })
  bic <- vapply(fits, function(f) if (f$degenerate) NA_real_ else f$bic, 0)
  best <- if (all(is.na(bic))) which.max(vapply(fits, function(f) f$bic, 0)) else which.max(bic)
  fit <- fits[[best]]
  fit$BIC <- stats::setNames(bic, G)
  if (fit$degenerate) gmm_warn_degenerate(fit)
  fit
}

# The standardisation of the columns of `x`: each centred on its mean and divided by its standard
# deviation (1 for a constant column: it stays 0, and its variances are then at the floor).
gmm_scaling <- function(x) {
  center <- column_means(x)
  scale <- sqrt(column_squares(x, center) / (nrow(x) - 1))
  scale[!(scale > 0)] <- 1
  list(center = unname(center), scale = unname(scale))
}

# The points of `x` (N x D) in the standardised coordinates of `scaling`, in float64.
gmm_standardise <- function(x, scaling) columns_moved(x, scaling$center, 1 / scaling$scale)

# Parameters (pro, mu G x D, var G x D, and sigma D x D x G) of the data as given, in the
# standardised coordinates of `scaling`.
gmm_standardise_parameters <- function(p, scaling) {
  s <- scaling$scale
  p$mu <- (p$mu - rep(scaling$center, each = nrow(p$mu))) / rep(s, each = nrow(p$mu))
  if (!is.null(p$var)) p$var <- p$var / rep(s^2, each = nrow(p$var))
  if (!is.null(p$sigma)) p$sigma <- p$sigma / as.vector(outer(s, s))
  p
}

# The least variance of a component along a standardised column (about 1e-10; exp(-23) is how the
# engine's formulas write it).
gmm_variance_floor <- exp(-23)

# EM with diagonal covariances (model VVI) on the standardised points `z` from `start` (pro, mu G x
# D, var G x D): one program. The constants include the Jacobian of the standardisation, so that
# the log-likelihood (and the stopping rule) is that of the data as given.
gmm_vvi <- function(z, start, iter.max, tol, scaling) {
  d <- ncol(z)
  shift <- sum(log(scaling$scale))
  c0 <- d / 2 * log(2 * pi) + shift
  # On a GPU the points go there once for the program and the last E-step's two reductions. On
  # several, the program spreads them over the GPUs itself (a matrix kept on one would keep the
  # program there).
  points <- if (gpu_in_use() && length(get_rkeops_options("device")) == 1L) keops_device(z) else z
  if (inherits(points, "keops_device_matrix")) on.exit(keops_device_free(points), add = TRUE)   # not left to gc
  input <- list(x = points, n = nrow(z), c0 = c0, mu = start$mu, is2 = 1 / start$var,
                cst = matrix(gmm_vvi_constant(start$pro, start$var, shift)), ll = 0)
  res <- gmm_program(d, iter.max, tol)(input)
  final <- gmm_estep(points, res$mu, res$is2, res$cst)
  var <- 1 / res$is2
  list(pro = exp(as.vector(res$cst) + 0.5 * rowSums(log(var)) + c0), mu = res$mu, var = var,
       loglik = final$loglik, loglik_trace = c(attr(res, "trace")$ll[, 1], final$loglik),
       classification = final$classification, iterations = attr(res, "iterations"), n = nrow(z))
}

# EM with diagonal covariances (model VVI) with the standardised points (`n` of them) kept on the
# workers of the future plan in `shards` (`future-shards.R`): the steps of gmm_program() in R, each
# iteration's E-step and M-step sums on the shards (one step each, added here in the shards' order),
# the parameters' updates by the program's own maps. The same iterations as the program up to the
# order of the float sums of the log-likelihood (its relative change is the stopping rule).
gmm_vvi_shards <- function(shards, n, start, iter.max, tol, scaling) {
  d <- ncol(start$mu)
  ops <- gmm_operators(d)
  shift <- sum(log(scaling$scale))
  c0 <- d / 2 * log(2 * pi) + shift
  mu <- start$mu
  is2 <- 1 / start$var
  cst <- matrix(gmm_vvi_constant(start$pro, start$var, shift))
  trace <- numeric(0)
  llold <- 0
  for (t in seq_len(iter.max)) {
    m <- gmm_moments(list(cst, is2, NULL, mu), "VVI", shards)
    trace[t] <- m$ll
    delta <- abs(m$ll - llold) / (1 + abs(m$ll))
    mu <- ops$mu(list(m$stats, mu))
    is2 <- ops$is2(list(m$stats))
    cst <- ops$cst(list(m$stats, is2, n, c0))
    if (delta < tol) break
    llold <- m$ll
  }
  final <- gmm_final(list(cst, is2, NULL, mu), "VVI", shards)
  var <- 1 / is2
  list(pro = exp(as.vector(cst) + 0.5 * rowSums(log(var)) + c0), mu = mu, var = var,
       loglik = final$loglik, loglik_trace = c(trace, final$loglik),
       classification = final$classification, iterations = length(trace), n = n)
}

# An EM iteration's sums for the operators' `inputs` of `model` (the points third): the
# log-likelihood `ll` and the M-step's sums by component `stats`, here, or on the `shards` (the
# points left out of what is sent: each worker has its own).
gmm_moments <- function(inputs, model, shards = NULL) {
  if (is.null(shards)) return(gmm_shard_moments(inputs, model))
  inputs[3L] <- list(NULL)
  parts <- shards_map(shards, "gmm_shard_step", list(inputs = inputs, model = model, last = FALSE))
  list(ll = shards_total(parts, "ll"), stats = shards_total(parts, "stats"))
}

# The final E-step for the operators' `inputs` of `model`: the log-likelihood and each point's
# most likely component, here or on the `shards` (whose last step it is: it drops them).
gmm_final <- function(inputs, model, shards = NULL) {
  if (is.null(shards)) {
    ops <- gmm_model_operators(model, ncol(inputs[[4L]]))
    return(list(loglik = sum(ops$lse(inputs)), classification = labels_as_integers(ops$best(inputs))))
  }
  inputs[3L] <- list(NULL)
  parts <- shards_map(shards, "gmm_shard_step", list(inputs = inputs, model = model, last = TRUE))
  list(loglik = shards_total(parts, "loglik"), classification = unlist(lapply(parts, `[[`, "classification")))
}

# The log-likelihood and the M-step's sums of the points of `inputs` (third).
gmm_shard_moments <- function(inputs, model) {
  ops <- gmm_model_operators(model, ncol(inputs[[4L]]))
  lse <- ops$lse(inputs)
  list(ll = sum(lse), stats = ops$stats(c(inputs, list(lse))))
}

# On a worker, an EM step over its shard: the sums of gmm_shard_moments(), or with `args$last` the
# final E-step (the shard then dropped).
gmm_shard_step <- function(shard, args) {
  inputs <- args$inputs
  inputs[[3L]] <- shard$rows$x
  if (!args$last) return(gmm_shard_moments(inputs, args$model))
  shard_drop(shard)
  gmm_final(inputs, args$model)
}

# The operators of EM for `model` in dimension `d`.
gmm_model_operators <- function(model, d) if (model == "VVV") gmm_vvv_operators(d) else gmm_operators(d)

# Each component's log-density constant for weights `pro` and standardised variances `var` (G x D):
# log(pro) - log(det(2 pi diag(var))) / 2 - `shift` (the log-Jacobian of the standardisation; the
# program's `cst` map computes the same in the engine).
gmm_vvi_constant <- function(pro, var, shift = 0) {
  log(pro) - 0.5 * rowSums(log(var)) - ncol(var) / 2 * log(2 * pi) - shift
}

# The diagonals of the G covariance matrices of `sigma` (D x D x G), as a G x D matrix.
sigma_diagonals <- function(sigma, d, G) {
  sigma <- array(sigma, c(d, d, G))
  matrix(vapply(seq_len(G), function(g) diag(matrix(sigma[, , g], d, d)), numeric(d)), G, d, byrow = TRUE)
}

# Starting parameters (pro, mu G x D, var G x D, and with `full` sigma D x D x G) from mclust-like
# `init`.
gmm_init <- function(init, d, G, full = FALSE) {
  bad <- function(what) {
    rkeops_abort("keops_gmm(): 'init' ", what, kind = "input", arg = "init")
  }
  if (!is.list(init) || is.null(init$pro) || is.null(init$mean) || is.null(init$variance)) {
    bad("must be a list of pro, mean (D x G) and variance (sigma, or scale and shape), as mclust's parameters")
  }
  pro <- as.numeric(init$pro)
  mean <- as.matrix(init$mean)
  v <- init$variance
  var <- if (!is.null(v$sigma) && length(v$sigma) == d * d * G) {
    sigma_diagonals(v$sigma, d, G)
  } else if (!is.null(v$scale) && !is.null(v$shape)) {
    t(as.matrix(v$shape)) * as.numeric(v$scale)
  } else {
    bad("$variance must hold sigma (D x D x G) or scale and shape")
  }
  var <- matrix(var, G, d)
  if (length(pro) != G || any(!is.finite(pro)) || any(pro <= 0) || !identical(dim(mean), c(d, G)) ||
      any(!is.finite(mean)) || any(!is.finite(var)) || any(var <= 0)) {
    bad(sprintf("must hold %d positive weights, a %d x %d matrix of means and positive variances", G, d, G))
  }
  start <- list(pro = pro / sum(pro), mu = t(mean), var = var)
  if (full) {
    if (is.null(v$sigma) || length(v$sigma) != d * d * G) bad("$variance must hold sigma (D x D x G) for \"VVV\"")
    start$sigma <- array(as.numeric(v$sigma), c(d, d, G))
    for (g in seq_len(G)) {
      if (is.null(tryCatch(chol(start$sigma[, , g]), error = function(e) NULL))) {
        bad(sprintf("$variance$sigma[, , %d] must be a positive definite matrix: it is singular or not symmetric", g))
      }
    }
  }
  start
}

# Starting parameters from keops_kmeans()'s clusters of the standardised points `z` (the best of
# `nstart` seedings): each component a cluster's share, mean and (co)variances, these from the
# deviations to its mean and at least a thousandth of the column's variance (1), so that a
# cluster of one point has a density.
gmm_from_kmeans <- function(z, G, full = FALSE, nstart = 1L, on_workers = NULL) {
  # (on the future workers too, if `on_workers` holds the settings of rkeops_use_future())
  .rkeops_env$future <- on_workers
  on.exit(.rkeops_env$future <- NULL)
  km <- tryCatch(suppressWarnings(keops_kmeans(z, G, nstart = nstart)), rkeops_error_input = function(e) {
    rkeops_abort("keops_gmm(): 'G' (", G, ") must be at most the number of distinct points of 'x'",
                 kind = "input", arg = "G")
  })
  d <- ncol(z)
  cluster <- factor(km$cluster, seq_len(G))
  size <- pmax(tabulate(km$cluster, G), 1)
  mu <- rowsum(z, cluster, reorder = TRUE) / size        # float64 means of the float32 fit's clusters
  mu[tabulate(km$cluster, G) == 0, ] <- km$centers[tabulate(km$cluster, G) == 0, ]
  r <- z - mu[km$cluster, , drop = FALSE]
  var <- pmax(rowsum(r^2, cluster, reorder = TRUE) / size, 1e-3)
  start <- list(pro = size / sum(size), mu = unname(mu), var = unname(matrix(var, G, d)))
  if (full) {
    start$sigma <- array(0, c(d, d, G))
    for (g in seq_len(G)) {
      rg <- r[km$cluster == g, , drop = FALSE]
      start$sigma[, , g] <- crossprod(rg) / size[g] + diag(1e-3, d)
    }
  }
  start
}

# The log-likelihood of the parameters and the most likely component of each point.
gmm_estep <- function(x, mu, is2, cst) {
  ops <- gmm_operators(ncol(mu))
  inputs <- list(cst, is2, x, mu)
  list(loglik = sum(ops$lse(inputs)), classification = labels_as_integers(ops$best(inputs)))
}

# The operators of EM in dimension `d` (made once per dimension). The M-step sums the responsibility,
# the deviations x - mu to the current means and their squares: the new mean is mu plus the mean
# deviation m, the new variance the mean squared deviation minus m^2 (floored), which does not
# cancel as E[x^2] - E[x]^2 does. A component with no responsibility left (its sum underflows to 0)
# keeps its mean and gets the floor and weight 0 (log 0 = -Inf: no term), not 0 / 0.
gmm_operators <- function(d) {
  memoised(gmm_cache, c("VVI", d), function() {
    terms <- "cst - 0.5 * WeightedSqDist(is2, x, mu)"            # log of component j's term at x_i
    vars <- c("cst = Vj(1)", sprintf(c("is2 = Vj(%d)", "x = Vi(%d)", "mu = Vj(%d)"), d))
    stats <- sprintf("stats = Vj(%d)", 1 + 2 * d)
    size <- "(Elem(stats, 0) + Exp(-IntCst(69)))"                 # the sum of responsibilities, >= 1e-30
    mean_dev <- sprintf("Extract(stats, 1, %d) / %s", d, size)
    floor <- "Exp(-IntCst(23))"                                    # gmm_variance_floor
    list(
      llold = keops_map("ll", "ll = Vi(1)"),
      lse = keops_kernel(sprintf("LogSumExp_Reduction(%s, 0)", terms), vars),
      ll = keops_kernel("Sum_Reduction(lse, 1)", "lse = Vi(1)"),
      delta = keops_map("Abs(ll - llold) / (IntCst(1) + Abs(ll))", c("ll = Vi(1)", "llold = Vi(1)")),
      # each component's total responsibility, sums of x - mu and of (x - mu)^2 in one reduction over i
      stats = keops_kernel(sprintf(paste0("Sum_Reduction(Exp(%s - lse) * ",
                                          "Concat(IntCst(1), Concat(x - mu, Square(x - mu))), 1)"), terms),
                           c(vars, "lse = Vi(1)")),
      mu = keops_map(sprintf("mu + %s", mean_dev), c(stats, sprintf("mu = Vj(%d)", d))),
      is2 = keops_map(sprintf("Inv(%s + ReLU(Extract(stats, %d, %d) / %s - Square(%s) - %s))", floor, d + 1, d, size,
                              mean_dev, floor), stats),
      cst = keops_map("Log(Elem(stats, 0) / n) + 0.5 * Sum(Log(is2)) - c0",
                      c(stats, sprintf("is2 = Vj(%d)", d), "n = Pm(1)", "c0 = Pm(1)")),
      best = keops_kernel(sprintf("ArgMax_Reduction(%s, 0)", terms), vars))
  })
}

# The program of EM in dimension `d`: E-step (log-sum-exp, log-likelihood, its relative change:
# the stopping rule), M-step (the sums, then the means, inverse variances and constants).
gmm_program <- function(d, iter.max, tol) {
  memoised(gmm_cache, c("program", d, iter.max, tol), function() {
    ops <- gmm_operators(d)
    keops_program(ops[c("llold", "lse", "ll", "delta", "stats", "mu", "is2", "cst")], iterations = iter.max,
                  until = "delta", tol = tol, trace = "ll", output = c("mu", "is2", "cst"))
  })
}

gmm_cache <- new.env(parent = emptyenv())

# EM with full covariances (model VVV) on the standardised points `z` from `start` (pro, mu G x D,
# sigma D x D x G): per iteration, the E-step's log-sum-exp and the M-step's sums (weights, sums of
# the deviations x - mu to the current means and of their outer products) as two reductions, the
# covariances (eigenvalues floored) inverted in R. The same counts and stopping rule as the VVI
# program. With `shards`, the two reductions run on the workers that keep the points
# (gmm_moments()).
gmm_vvv <- function(z, start, iter.max, tol, scaling, shards = NULL) {
  d <- ncol(z)
  G <- length(start$pro)
  shift <- sum(log(scaling$scale))
  theta <- list(pro = start$pro, mu = start$mu, sigma = start$sigma)
  trace <- numeric(0)
  for (t in seq_len(iter.max)) {
    moments <- gmm_moments(gmm_vvv_inputs(z, theta, shift), "VVV", shards)
    trace[t] <- moments$ll
    stats <- moments$stats
    size <- stats[, 1L]
    m <- stats[, 1L + seq_len(d), drop = FALSE] / pmax(size, 1e-30)      # mean deviation (0 for no points)
    sigma <- array(0, c(d, d, G))
    for (g in seq_len(G)) {
      s2 <- matrix(stats[g, 1L + d + seq_len(d * d)], d, d) / max(size[g], 1e-30) - tcrossprod(m[g, ])
      sigma[, , g] <- gmm_floor_covariance((s2 + t(s2)) / 2)
    }
    theta <- list(pro = size / nrow(z), mu = theta$mu + m, sigma = sigma)
    if (t > 1L && abs(trace[t] - trace[t - 1L]) / (1 + abs(trace[t])) < tol) break
  }
  final <- gmm_final(gmm_vvv_inputs(z, theta, shift), "VVV", shards)
  list(pro = theta$pro, mu = theta$mu, sigma = theta$sigma, loglik = final$loglik,
       loglik_trace = c(trace, final$loglik), classification = final$classification, iterations = length(trace),
       n = nrow(z))
}

# A covariance matrix whose eigenvalues below the floor are raised to it (unchanged otherwise).
gmm_floor_covariance <- function(s) {
  e <- eigen(s, symmetric = TRUE)
  if (min(e$values) >= gmm_variance_floor) return(s)
  v <- pmax(e$values, gmm_variance_floor)
  e$vectors %*% (v * t(e$vectors))
}

# The inputs of the VVV operators for parameters `theta`: each component's constant (log weight,
# log-determinant, minus `shift`, the log-Jacobian of the standardisation), its precision matrix (a
# row of D^2 values), the points, the means.
gmm_vvv_inputs <- function(x, theta, shift = 0) {
  d <- ncol(x)
  G <- length(theta$pro)
  precision <- matrix(0, G, d * d)
  cst <- numeric(G)
  for (g in seq_len(G)) {
    u <- chol(theta$sigma[, , g])    # positive definite: checked (init) or floored (EM)
    precision[g, ] <- chol2inv(u)
    cst[g] <- log(theta$pro[g]) - sum(log(diag(u))) - d / 2 * log(2 * pi) - shift
  }
  list(matrix(cst), precision, x, theta$mu)
}

# The VVV operators in dimension `d` (made once per dimension).
gmm_vvv_operators <- function(d) {
  memoised(gmm_cache, c("VVV", d), function() {
    terms <- "cst - 0.5 * SymSqNorm(prec, x - mu)"            # log of component j's term at x_i
    vars <- c("cst = Vj(1)", sprintf("prec = Vj(%d)", d * d), sprintf(c("x = Vi(%d)", "mu = Vj(%d)"), d))
    list(
      lse = keops_kernel(sprintf("LogSumExp_Reduction(%s, 0)", terms), vars),
      # each component's total responsibility, sums of x - mu and of (x - mu) (x - mu)^T in one
      # reduction over i
      stats = keops_kernel(sprintf(paste0("Sum_Reduction(Exp(%s - lse) * ",
                                          "Concat(IntCst(1), Concat(x - mu, TensorProd(x - mu, x - mu))), 1)"), terms),
                           c(vars, "lse = Vi(1)")),
      best = keops_kernel(sprintf("ArgMax_Reduction(%s, 0)", terms), vars))
  })
}
