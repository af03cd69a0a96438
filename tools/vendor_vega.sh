#!/usr/bin/env bash
# Refresh templates/vendor/ from the npm registry: tools/vendor_vega.sh 6.4.0 6.5.0 7.3.0
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in "vega@$1" "vega-lite@$2" "vega-embed@$3"; do
  name=${spec%@*}
  (cd "$tmp" && npm pack -q "$spec" >/dev/null && mkdir "$name" && tar xzf "$name"-*.tgz -C "$name")
  cp "$tmp/$name/package/build/$name.min.js" templates/vendor/
  cp "$tmp/$name/package/LICENSE" "templates/vendor/LICENSE-$name.txt"
done
(cd templates/vendor && sha256sum LICENSE-*.txt *.min.js > SHA256SUMS)
echo "vendored vega $1, vega-lite $2, vega-embed $3 (SHA256SUMS rewritten): update templates/vendor/README.md"
