//! The code of an insertion into a row's sorted list of its K best values: written out as a
//! network of selects on registers (`selection_network`), or a loop that shifts the values in
//! local memory (`sorted_insertion`).

use std::fmt::Write;

/// Selections of at most this many values per row (K times the dimension) keep them in registers:
/// their insertion is written out with every index known when compiling. Larger ones index arrays
/// in local memory, with less code (compile time grows with the network).
pub(super) const REGISTER_SELECTION: usize = 64;

/// The insertion of `fv[c]`, the value of the reduced index `j`, into the sorted list of the `k`
/// best values of component `c` (`best@`, `best_j@` from `c * k`), as the CPU accumulator does it
/// (NaN wins, equal values keep index order, an empty slot, of index -1, takes any value, a marker
/// of the earlier blocks' K-th value, of index -2, is a value that comes after its equals), written
/// as selects on registers: slot `s` takes the value of slot `s - 1` if the new value goes before
/// that one, the new value if it goes before slot `s` only, else keeps its own. Values that are
/// neither infinite nor NaN compare with one comparison (an empty slot holds the infinity that any
/// of them passes, a NaN slot stays ahead of them), which a warp takes unless one of its rows holds
/// an infinite or NaN value.
pub(super) fn selection_network(fv: &str, c: usize, k: usize, cmp: &str, fabs: &str) -> String {
    let (first, last) = (c * k, c * k + k - 1);
    let general =
        |s: usize| format!("(best_j@[{s}] == -1 || x {cmp} best@[{s}] || (rk_isnan(x) && !rk_isnan(best@[{s}])))");
    let plain = |s: usize| format!("(x {cmp} best@[{s}])");
    let network = |goes_before: &dyn Fn(usize) -> String| {
        let mut code = format!("            bool c{last} = true;\n");
        for s in (first + 1..=last).rev() {
            let _ = writeln!(
                code,
                "            bool c{p} = {before}; best@[{s}] = c{p} ? best@[{p}] : c{s} ? x : best@[{s}]; best_j@[{s}] = c{p} ? best_j@[{p}] : c{s} ? j : best_j@[{s}];",
                p = s - 1,
                before = goes_before(s - 1)
            );
        }
        let _ = writeln!(code, "            if (c{first}) {{ best@[{first}] = x; best_j@[{first}] = j; }}");
        code
    };
    format!(
        "        {{ T x = {fv}[{c}];\n\
         \x20         if ({enters}) {{\n\
         \x20           if ({fabs}(x) < RK_INF) {{\n{plain}\x20           }} else {{\n{general}\x20           }}\n\
         \x20         }}\n\
         \x20       }}",
        enters = general(last),
        plain = network(&plain),
        general = network(&general),
    )
}

/// The insertion of `x`, of index `j`, into the sorted list `b`, `bj` of `k` values and indices,
/// as the CPU accumulator does it: NaN wins, equal values keep index order. A value that does not
/// enter (`worst` is the last of the list and `full` whether it holds `k`) does `skip`.
pub(super) fn sorted_insertion(k: usize, cmp: &str, worst: &str, full: &str, skip: &str) -> String {
    let last = k - 1;
    format!(
        "          if ({full} && !(x {cmp} {worst} || (rk_isnan(x) && !rk_isnan({worst})))) {skip};\n\
         \x20         int p = {last};\n\
         \x20         while (p > 0 && (bj[p - 1] == -1 || x {cmp} b[p - 1] || (rk_isnan(x) && !rk_isnan(b[p - 1])))) {{ b[p] = b[p - 1]; bj[p] = bj[p - 1]; p--; }}\n\
         \x20         b[p] = x; bj[p] = j;\n\
         \x20         {worst} = b[{last}]; {full} = bj[{last}] != -1;\n"
    )
}
