#!/usr/bin/env bash
# Validates every *.yaml under docs/deploy/kubernetes against the Kubernetes API schemas,
# offline: kubernetes-validate ships the schemas, so no cluster and no network is needed
# (beyond PyPI, once, to install it). --strict rejects fields the schema does not know, so
# a misspelled field fails instead of being silently ignored.
#
#   bash xtask/scripts/validate_k8s.sh
#
# Installs kubernetes-validate into target/k8s-validate/venv (ignored by git) the first time.
# K8S_VERSION overrides the Kubernetes version validated against (one kubernetes-validate
# ships schemas for).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$root/target/k8s-validate/venv"
# Pinned so that the set of schemas it ships (1.25.0 to 1.37.0 in this version) is known.
pkg_version=1.37.0
k8s_version=${K8S_VERSION:-1.33.0}
validate="$venv/bin/kubernetes-validate"

if [[ ! -x "$validate" ]]; then
    echo "installing kubernetes-validate $pkg_version into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$pkg_version"
fi

mapfile -t files < <(find "$root/docs/deploy/kubernetes" -name '*.yaml' -type f | sort)
if [[ ${#files[@]} -eq 0 ]]; then
    echo "no *.yaml under docs/deploy/kubernetes" >&2
    exit 1
fi

echo "kubernetes-validate $("$validate" --version), Kubernetes $k8s_version, --strict"
failed=0
for f in "${files[@]}"; do
    rel=${f#"$root"/}
    # --quiet prints only failures and warnings; a warning (e.g. a deprecated field) fails too.
    if out=$("$validate" --strict --quiet -k "$k8s_version" "$f" 2>&1) && [[ -z "$out" ]]; then
        echo "ok      $rel"
    else
        echo "FAILED  $rel"
        if [[ -n "$out" ]]; then
            printf '%s\n' "$out" | sed 's/^/        /'
        fi
        failed=1
    fi
done
exit "$failed"
