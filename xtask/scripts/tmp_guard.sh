#!/usr/bin/env bash
# A guard that a test run leaves nothing in its temporary directory.
#
#   tmp_guard.sh start DIR   creates DIR, a fresh directory only this user can read; prints nothing
#   tmp_guard.sh check DIR   fails (exit 1) naming up to 20 entries left in DIR; if DIR is empty,
#                            removes it and exits 0
#
# CI runs `start`, exports TMPDIR=DIR for `cargo test --workspace`, then runs `check`: a test that
# makes its scratch files with `tempfile` (or cleans up on every path, failure included) passes.
# On failure DIR is kept so its leftovers can be inspected.
set -euo pipefail

usage() {
    echo "usage: $0 start|check DIR" >&2
    exit 2
}

[[ $# -eq 2 ]] || usage
mode=$1
dir=$2
[[ -n $dir ]] || usage

case $mode in
start)
    if [[ -e $dir ]]; then
        echo "tmp_guard: $dir already exists; start wants a fresh directory" >&2
        exit 1
    fi
    # `mkdir -m` sets the mode at creation: never readable by others, even for a moment.
    mkdir -p -- "$(dirname -- "$dir")"
    mkdir -m 700 -- "$dir"
    ;;
check)
    if [[ ! -d $dir ]]; then
        echo "tmp_guard: $dir is not a directory (was \`start\` run?)" >&2
        exit 1
    fi
    # Top-level entries name their test well enough (a prefix, a directory).
    mapfile -d '' left < <(find "$dir" -mindepth 1 -maxdepth 1 -print0 | sort -z)
    n=${#left[@]}
    if ((n > 0)); then
        echo "tmp_guard: the test run left $n entr$( ((n == 1)) && echo y || echo ies) in $dir:" >&2
        for entry in "${left[@]:0:20}"; do
            # `ls -ld` shows whether each is a file or a directory, its size and its time.
            ls -ld -- "$entry" >&2
        done
        ((n <= 20)) || echo "  ... and $((n - 20)) more" >&2
        echo "tmp_guard: make temporary files and directories with \`tempfile\` (TempDir," \
            "NamedTempFile), kept alive for the test, so they are removed even when it fails" >&2
        exit 1
    fi
    rmdir -- "$dir"
    ;;
*)
    usage
    ;;
esac
