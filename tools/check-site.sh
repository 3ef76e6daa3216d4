#!/usr/bin/env bash
# Browser check of the documentation site (make site-check, after make site): Debian's chromium,
# headless, renders the home page, the reference index and one article from docs/, saves a
# screenshot of each, and fails unless the rendered DOM holds the expected text.
#
# Usage: tools/check-site.sh [docs-dir]   (default docs; screenshots in docs-dir/_check/ unless
# SITE_SHOTS=dir). Runs as root in a container: --no-sandbox, a temporary profile, a timeout.
set -euo pipefail

docs=${1:-docs}
shots=${SITE_SHOTS:-$docs/_check}
timeout_s=${SITE_CHECK_TIMEOUT:-60}

browser=""
for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [ -z "$browser" ]; then
	echo "check-site: no chromium found (apt-get install chromium, or make deps as root)" >&2
	exit 1
fi
[ -f "$docs/index.html" ] || { echo "check-site: $docs/index.html missing (run make site)" >&2; exit 1; }

docs_abs=$(cd "$docs" && pwd)
mkdir -p "$shots"
shots_abs=$(cd "$shots" && pwd)
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT

# The package title, as in DESCRIPTION.
title=$(sed -n 's/^Title:[[:space:]]*//p' DESCRIPTION)

chrome() {
	# --virtual-time-budget lets the page's scripts run before the DOM is dumped; failing CDN
	# requests (MathJax, offline) do not block it.
	timeout --kill-after=10 "$timeout_s" "$browser" --headless --no-sandbox --disable-gpu \
		--disable-dev-shm-usage --no-first-run --no-default-browser-check --disable-extensions \
		--user-data-dir="$profile" --window-size=1280,2000 --virtual-time-budget=5000 "$@"
}

status=0
# check PAGE NAME TEXT...: screenshot PAGE into NAME.png, then look for each TEXT in its DOM.
check() {
	local page=$1 name=$2
	shift 2
	local url="file://$docs_abs/$page" dom="$shots_abs/$name.html" png="$shots_abs/$name.png"
	rm -f "$png"
	if ! chrome --screenshot="$png" "$url" >"$shots_abs/$name.log" 2>&1 || [ ! -s "$png" ]; then
		echo "check-site: FAIL $page: no screenshot (see $shots_abs/$name.log)" >&2
		status=1
		return
	fi
	if ! chrome --dump-dom "$url" >"$dom" 2>>"$shots_abs/$name.log" || [ ! -s "$dom" ]; then
		echo "check-site: FAIL $page: no DOM (see $shots_abs/$name.log)" >&2
		status=1
		return
	fi
	local text
	for text in "$@"; do
		if grep -qF -- "$text" "$dom"; then
			echo "check-site: ok   $page: \"$text\""
		else
			echo "check-site: FAIL $page: \"$text\" not in the rendered page ($dom)" >&2
			status=1
		fi
	done
	echo "check-site: screenshot $png ($(stat -c %s "$png") bytes)"
}

# The home page: the README, the package title, the figure, the navbar's links.
check index.html home "<title>$title" "Documentation site" 'src="reference/figures/' \
	'href="reference/index.html"' 'href="articles/kmeans.html"'
# The reference index: its groups.
check reference/index.html reference "Formulas and operators" "Algorithms" \
	"Devices, options and other topics" 'href="keops_kmeans.html"'
# An article: its title, a heading, a figure that knitr made, a formula drawn as MathML.
check articles/kmeans.html article-kmeans "<h1>K-means clustering" "Where the two variants differ" '<img src="kmeans_files/' \
	'<math display="block"'
# No page loads MathJax (offline, its formulas would stay TeX).
mathjax='<script[^>]*mathjax|load mathjax'
if grep -rlqiE "$mathjax" --include='*.html' "$docs_abs"; then
	echo "check-site: FAIL pages still load MathJax: $(grep -rliE "$mathjax" --include='*.html' "$docs_abs" | head -3)" >&2
	status=1
else
	echo "check-site: ok   no page loads MathJax"
fi

if [ "$status" = 0 ]; then
	echo "check-site: all checks passed (screenshots in $shots_abs)"
else
	echo "check-site: FAILED (screenshots and DOMs in $shots_abs)" >&2
fi
exit "$status"
