#!/usr/bin/env bash
# ctest lab.render_page: `fp8kit lab --quick` renders in headless Chromium with a clean console, and the
# browser's DOM keeps every plot and section of the file. Exits 77 (skipped) where chromium is missing.
#   tests/lab/render_page.sh FP8KIT_BINARY RENDER_SCRIPT
set -euo pipefail
fp8kit=$1 render=$2
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "skipped: chromium is not installed (optional: scripts/bootstrap.sh --with-chromium)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$fp8kit" lab --quick --device cpu --out "$dir/lab"
"$render" "$dir/lab/index.html" "$dir/page.png" 4000
browser=$(command -v chromium || command -v chromium-browser)
timeout 120 "$browser" --headless --disable-gpu --no-sandbox --user-data-dir="$dir/profile" \
  --dump-dom "file://$dir/lab/index.html" >"$dir/dom.html" 2>/dev/null
for tag in '<svg' '<h2' '<table' '<figure'; do
  in_file=$(grep -o "$tag" "$dir/lab/index.html" | wc -l)
  in_dom=$(grep -o "$tag" "$dir/dom.html" | wc -l)
  if [ "$in_file" -eq 0 ] || [ "$in_file" -ne "$in_dom" ]; then
    echo "error: $tag: $in_file in index.html but $in_dom in the browser's DOM" >&2
    exit 1
  fi
done
echo "the lab page renders: console clean, every plot, section and table in the DOM"
