#!/usr/bin/env bash
# Renders an HTML page (`fp8kit lab`'s index.html, say) to a PNG with headless Chromium and fails when
# the browser's console reports anything: fp8kit's pages have no scripts, so any console message (a
# script error, a refused or failed load) means the page is broken.
#   scripts/render-html.sh PAGE.html OUT.png [HEIGHT]   (window 1200 x HEIGHT pixels, default 3000)
# Needs Debian's chromium, which is optional: `scripts/bootstrap.sh --with-chromium` or
# `apt-get install chromium`. Without it this exits 77 (ctest's skip code) saying so.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 PAGE.html OUT.png [HEIGHT]" >&2
  exit 2
fi
page=$1 png=$2 height=${3:-3000}
[ -f "$page" ] || { echo "error: $page: no such file" >&2; exit 1; }
case $height in '' | *[!0-9]*) echo "error: HEIGHT must be a whole number of pixels, not '$height'" >&2; exit 2 ;; esac

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "skipped: chromium is not installed (scripts/bootstrap.sh --with-chromium, or apt-get install chromium)"
  exit 77
fi

log=$(mktemp)
profile=$(mktemp -d)  # a fresh profile each run: no state shared with another run
trap 'rm -rf "$log" "$profile"' EXIT
rm -f "$png"
# --enable-logging=stderr --v=0 prints each console message as "INFO:CONSOLE(line)] "text", source: ...".
url="file://$(realpath "$page")"
if ! timeout 120 "$browser" --headless --disable-gpu --no-sandbox --hide-scrollbars --user-data-dir="$profile" \
    --enable-logging=stderr --v=0 --window-size="1200,$height" --screenshot="$png" "$url" >"$log" 2>&1; then
  cat "$log" >&2
  echo "error: chromium failed to render $page" >&2
  exit 1
fi
if [ ! -s "$png" ]; then
  cat "$log" >&2
  echo "error: chromium wrote no screenshot of $page" >&2
  exit 1
fi
if grep -q ':CONSOLE' "$log"; then
  grep ':CONSOLE' "$log" >&2
  echo "error: the browser console reported the messages above for $page" >&2
  exit 1
fi
echo "rendered $page to $png (1200 x $height), console clean"
