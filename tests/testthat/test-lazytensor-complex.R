# ComplexLazyTensor against plain R complex arithmetic, in float64.
lsqdist <- rkeops::sqdist

N <- 7; M <- 11

cmat <- function(n, d) matrix(complex(real = rmat(n, d), imaginary = rmat(n, d)), n, d)

cz_data <- function(seed = 3) {
  set.seed(seed)
  list(a = cmat(N, 2), b = cmat(M, 2), u = rmat(N, 2), v = rmat(M, 2),
       p = complex(real = c(0.4, -1.2), imaginary = c(0.9, 0.3)),
       x = rmat(N, 3), y = rmat(M, 3), w = cmat(M, 1)[, 1], s = cmat(N, 1))
}

# Dense reference: sum over j (axis "j", N x d) or over i (M x d) of fun(i-row list, j-row list).
ref_pairs <- function(fun, iv, jv, index) {
  n <- nrow(iv[[1L]]); m <- nrow(jv[[1L]])
  vals <- lapply(seq_len(n), function(i) lapply(seq_len(m), function(j) {
    fun(lapply(iv, function(v) v[i, ]), lapply(jv, function(v) v[j, ]))
  }))
  if (index == "j") {
    do.call(rbind, lapply(vals, function(r) Reduce(`+`, r)))
  } else {
    do.call(rbind, lapply(seq_len(m), function(j) Reduce(`+`, lapply(vals, function(r) r[[j]]))))
  }
}

expect_cclose <- function(object, expected, info, tol = 1e-10) {
  expect_true(is.complex(object), info = info)
  expect_identical(dim(object), dim(expected), info = info)
  if (!identical(dim(object), dim(expected))) return(invisible())
  err <- max(Mod(object - expected)) / max(1, max(Mod(expected)))
  expect_lt(err, tol, label = paste("relative error", info))
}

# Checks sum(lazy, index) over both indices; fun(I, J) gets the rows of (a, u, s) and (b, v, w).
expect_csum <- function(lazy, fun, d, info) {
  iv <- list(a = d$a, u = d$u, s = d$s); jv <- list(b = d$b, v = d$v, w = as.matrix(d$w))
  for (index in c("j", "i")) {
    expect_cclose(sum(lazy, index = index), ref_pairs(fun, iv, jv, index), paste(info, index))
  }
}

test_that("complex constructors, printing and parts", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a)
  expect_true(is.ComplexLazyTensor(za))
  expect_true(is.LazyTensor(za))
  expect_identical(class(za), c("ComplexLazyTensor", "LazyTensor"))
  expect_identical(za$args, "V0 = Vi(4)")
  expect_identical(za$cdim, 2L)
  expect_identical(za$vars[[1L]][, c(1, 3)], unname(Re(d$a)))
  expect_identical(za$vars[[1L]][, c(2, 4)], unname(Im(d$a)))
  expect_true(is.ComplexLazyTensor(Vj(d$w)))
  expect_identical(Vj(d$w)$args, "V0 = Vj(2)")
  expect_identical(LazyTensor(d$b, index = "j")$args, "V0 = Vj(4)")
  expect_identical(LazyTensor(d$p)$args, "V0 = Pm(4)")
  expect_true(is.ComplexLazyTensor(LazyTensor(d$a, "i")))
  expect_true(is.ComplexLazyTensor(Pm(d$p)))
  expect_false(is.ComplexLazyTensor(Vi(d$u)))
  out <- capture.output(print(za * Vj(d$b)))
  expect_true(any(grepl("ComplexLazyTensor", out)) && any(grepl("complex dimension 2", out)))
  expect_true(any(grepl("7 x 4", out)) && any(grepl("11 x 4", out)))
  expect_false(is.ComplexLazyTensor(Re(za)))
  expect_identical(Re(za)$dimres, 2L)
  expect_identical(Mod(za)$dimres, 2L)
  expect_false(is.ComplexLazyTensor(Arg(za)))
})

test_that("complex parts, modulus, argument, conjugate and exponentials, summed over i and j", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a); zb <- Vj(d$b); vb <- Vj(d$v)
  # real results are brought back as complex (times 1 + 0i) to share the checks
  expect_csum(Re(za) * vb + 0i, function(I, J) Re(I$a) * J$v + 0i, d, "Re")
  expect_csum(Im(zb) * Vi(d$u) + 0i, function(I, J) Im(J$b) * I$u + 0i, d, "Im")
  expect_csum(Mod(za - zb) + 0i, function(I, J) Mod(I$a - J$b) + 0i, d, "Mod")
  expect_csum(abs(za * zb) + 0i, function(I, J) abs(I$a * J$b) + 0i, d, "abs")
  expect_csum(Arg(za * zb) + 0i, function(I, J) Arg(I$a * J$b) + 0i, d, "Arg")
  expect_csum(Conj(za) * zb, function(I, J) Conj(I$a) * J$b, d, "Conj")
  expect_csum(exp(za - zb), function(I, J) exp(I$a - J$b), d, "exp")
  expect_csum(exp1j(Vi(d$u) * vb), function(I, J) exp(1i * I$u * J$v), d, "exp1j")
  expect_csum(-za + zb, function(I, J) -I$a + J$b, d, "unary minus")
})

test_that("complex arithmetic with complex and real LazyTensors and numbers", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a); zb <- Vj(d$b); ui <- Vi(d$u); vj <- Vj(d$v); zp <- Pm(d$p)
  expect_csum(za + zb, function(I, J) I$a + J$b, d, "c + c")
  expect_csum(za - zb, function(I, J) I$a - J$b, d, "c - c")
  expect_csum(za * zb, function(I, J) I$a * J$b, d, "c * c")
  expect_csum(za / zb, function(I, J) I$a / J$b, d, "c / c")
  expect_csum(za * vj + ui, function(I, J) I$a * J$v + I$u, d, "c * r + r")
  expect_csum(vj / za - ui * zb, function(I, J) J$v / I$a - I$u * J$b, d, "r / c - r * c")
  expect_csum((za - zb) * (2 + 3i), function(I, J) (I$a - J$b) * (2 + 3i), d, "* complex number")
  expect_csum((1 - 2i) / za + zb, function(I, J) (1 - 2i) / I$a + J$b, d, "complex number /")
  expect_csum(2 * za - zb / 4 + 1.5, function(I, J) 2 * I$a - J$b / 4 + 1.5, d, "real numbers")
  expect_csum(za * zp + zb^2, function(I, J) I$a * d$p + J$b^2, d, "complex parameter, ^2")
  expect_csum(za * Vi(d$s) + zb * Vj(d$w), function(I, J) I$a * I$s + J$b * J$w, d,
              "broadcast of complex dimension 1")
  expect_csum((Vi(d$s) - Vj(d$w)) * d$p, function(I, J) (I$s - J$w) * d$p,
              d, "complex vector as a parameter")
})

test_that("complex Gaussian-like kernel and matrix products", {
  local_precision("float64")
  d <- cz_data()
  D <- sqdist(d$x, d$y)                      # the helper's dense distance matrix
  K <- exp1j(-lsqdist(Vi(d$x), Vj(d$y)))
  Kref <- exp(-1i * D)
  expect_cclose(sum(K * Vj(d$w), "j"), Kref %*% d$w, "kernel j")
  expect_cclose(sum(K * Vi(d$s), "i"), t(Kref) %*% d$s, "kernel i")
  W <- cmat(M, 3)
  expect_cclose(K %*% W, Kref %*% W, "K %*% complex W")
  expect_cclose(K %*% d$v, Kref %*% d$v, "K %*% real v")
  Kr <- exp(-lsqdist(Vi(d$x), Vj(d$y)))
  expect_cclose(Kr %*% W, exp(-D) %*% W, "real K %*% complex W")
  G <- exp(-lsqdist(Vi(d$x), Vj(d$y)) + 1i * (Vi(d$u[, 1]) - Vj(d$v[, 1])))
  expect_cclose(sum(G, "j"), rowSums(exp(-D + 1i * outer(d$u[, 1], d$v[, 1], "-"))) |> as.matrix(),
                "exp of complex kernel")
})

test_that("Re, Im, Mod, Arg and Conj of real LazyTensors", {
  local_precision("float64")
  d <- cz_data()
  ui <- Vi(d$u); vj <- Vj(d$v)
  f <- ui - vj
  expect_false(is.ComplexLazyTensor(Re(f)))
  expect_csum(Re(f) + 1i * Im(f) + Mod(f) + 2i * Arg(f) + Conj(f) * 1i,
              function(I, J) {
                z <- I$u - J$v
                Re(z) + 1i * Im(z) + Mod(z) + 2i * Arg(z + 0i) + Conj(z) * 1i
              }, d, "real parts")
})

test_that("unsupported combinations give errors", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a); zb <- Vj(d$b)
  expect_error(za < zb, "not defined for ComplexLazyTensors")
  expect_error(za == 1i, "not defined for ComplexLazyTensors")
  expect_error(za^3, "not defined for ComplexLazyTensors")
  expect_error(za | zb, "not defined for ComplexLazyTensors")
  expect_error(sqrt(za), "not defined for ComplexLazyTensors")
  expect_error(log(za), "not defined for ComplexLazyTensors")
  expect_error(lsqdist(za, zb), "not supported for ComplexLazyTensors")
  expect_error(elem(za, 1), "not supported for ComplexLazyTensors")
  expect_error(min(za * zb, index = "j"), "not supported for ComplexLazyTensors")
  expect_error(argmin(za * zb, index = "j"), "not supported for ComplexLazyTensors")
  expect_error(logsumexp(Vi(d$s) * Vj(d$w), index = "j"), "dimension 1")
  expect_error(sum(za * zb), "only be reduced over an index")
  expect_error(sum(za * zb, index = "k"), "index")
  expect_error(exp1j(za), "real LazyTensor")
  expect_error(exp1j(2), "must be a LazyTensor")
  expect_error(za + Vj(cmat(M, 3)), "do not match")
  expect_error((za * zb) %*% cmat(M, 1), "complex dimension 1")
  expect_error((Vi(d$s) * Vj(d$w)) %*% cmat(M + 1, 1), "rows")
  expect_error(sum(za + Vi(d$u), index = "j"), "no variable indexed by j")
  expect_error(solve(Vi(d$s) * Vj(d$w), d$v[, 1]), "not supported for ComplexLazyTensors")
  expect_error(Vi(array(1i, c(2, 2, 2))), "matrix or vector")
})
