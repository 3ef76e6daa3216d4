# Log-domain Sinkhorn with the raw log-sum-exps f and g as buffers (or iterated variables), in
# dimension d: the steps g (over i) then f (over j), reading x, y, lmu, lnu and the scale s.
sinkhorn_steps <- function(d = 1L) {
  decl <- function(...) c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), ...)
  list(g = keops_kernel("LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)", decl("lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)")),
       f = keops_kernel("LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)", decl("lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)")))
}
