# The formulas of the site as MathML, so that they render offline: pkgdown's pages leave TeX in
# <span class="math inline|display"> for MathJax, which they load from a CDN (and, Debian's
# pkgdown, from file:///usr/share/javascript/mathjax). Here every formula of every page goes
# through pandoc --mathml once (one pandoc run for the whole site), the spans are replaced by
# the MathML that browsers draw natively (Chromium >= 109, Firefox, Safari), and the MathJax
# scripts are removed. Used by tools/site.R after pkgdown::build_site(); mathml_site(dir).

# The TeX of an HTML text node (pkgdown escapes <, >, & and quotes).
html_unescape <- function(x) {
  x <- gsub("&lt;", "<", x, fixed = TRUE)
  x <- gsub("&gt;", ">", x, fixed = TRUE)
  x <- gsub("&quot;", "\"", x, fixed = TRUE)
  x <- gsub("&#39;", "'", x, fixed = TRUE)
  gsub("&amp;", "&", x, fixed = TRUE)
}

math_span <- "(?s)<span class=\"math (inline|display)\">\\\\[\\(\\[](.*?)\\\\[\\)\\]]</span>"

# `formulas` (TeX) as MathML, `display` TRUE for displayed ones: one pandoc call, each formula a
# paragraph of its own.
tex_to_mathml <- function(formulas, display) {
  md <- tempfile(fileext = ".md")
  on.exit(unlink(md))
  writeLines(paste0(ifelse(display, "$$", "$"), formulas, ifelse(display, "$$", "$"), collapse = "\n\n"), md)
  html <- system2("pandoc", c("-f", "markdown", "-t", "html", "--mathml", md), stdout = TRUE)
  html <- paste(html, collapse = "\n")
  out <- regmatches(html, gregexpr("<math .*?</math>", html))[[1L]]
  if (length(out) != length(formulas)) stop("site-math: pandoc gave ", length(out), " formulas for ", length(formulas))
  out
}

# Replaces the TeX spans of every HTML page under `dir` by MathML and drops the MathJax scripts.
# Returns the number of formulas converted.
mathml_site <- function(dir) {
  pages <- list.files(dir, pattern = "\\.html$", recursive = TRUE, full.names = TRUE)
  texts <- lapply(pages, function(p) paste(readLines(p, warn = FALSE), collapse = "\n"))
  found <- lapply(texts, function(t) regmatches(t, gregexpr(math_span, t, perl = TRUE))[[1L]])
  spans <- unique(unlist(found))
  if (length(spans) > 0L) {
    parts <- regmatches(spans, regexec(math_span, spans, perl = TRUE))
    display <- vapply(parts, `[`, "", 2L) == "display"
    mathml <- tex_to_mathml(html_unescape(vapply(parts, `[`, "", 3L)), display)
  }
  for (k in seq_along(pages)) {
    t <- texts[[k]]
    for (s in unique(found[[k]])) t <- gsub(s, mathml[match(s, spans)], t, fixed = TRUE)
    # MathJax's scripts (a local copy and a CDN's configuration) and rmarkdown's dynamic loader
    t <- gsub("<script[^>]*(mathjax|MathJax)[^>]*>\\s*</script>\\n?", "", t, perl = TRUE)
    t <- gsub("(?s)<!-- dynamically load mathjax[^>]*-->\\s*<script[^>]*>.*?</script>\\n?", "", t, perl = TRUE)
    if (!identical(t, texts[[k]])) writeLines(t, pages[[k]])
  }
  length(spans)
}
