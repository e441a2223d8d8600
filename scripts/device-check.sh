#!/usr/bin/env bash
# The checks that need a machine with many cores, in one run that fits a
# lent device's time (about 15 minutes, all tries together; see the
# developers' guide). They are what issues #5 and #6 leave unmeasured on a
# 2-vCPU machine (docs/design.md §7 "Stripes by thread", §11 "Writers
# prepare, or combine, while they wait"):
#   1. the four trees' thread scaling, 1 to 16 threads, 1M sparse keys
#      (one bench run and JSON file per engine, so that a timeout loses
#      one engine's figures only);
#   2. the radix trees' combined writes (branch exp/combined-writes)
#      beside the default, 1, 4 and 16 writer threads;
#   3. killed writers with 16 threads (tests/killed_process.rs).
#
# Here, first:   scripts/device-check.sh build
#   builds static binaries into .dev/bin (ignored by git), so the device
#   needs no toolchain or crates, and stamps them with a hash of the
#   sources (.dev/bin/BUILD): `run` refuses binaries built from other
#   sources than the tree it runs in (FORCE=1 runs them anyway).
# On the device: scripts/device-check.sh run      (with the `run` tool:
#   carry [".dev/bin"], timeout_s 600; results go to $OUT, or to
#   ./device-out without it)
# A smoke test of `run` at a small scale, anywhere: QUICK=1 scripts/device-check.sh run
set -euo pipefail
cd "$(dirname "$0")/.."

bin=.dev/bin
target=x86_64-unknown-linux-gnu
static=(env RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=/tmp/pmindex-static)

# A hash of everything the binaries are built from (no git needed: the
# device's copy of the tree may have none).
sources() {
    find src tests examples Cargo.toml Cargo.lock -type f -print0 | sort -z |
        xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

build() {
    mkdir -p "$bin"
    "${static[@]}" cargo build --release --target "$target" --bin pmindex
    cp /tmp/pmindex-static/$target/release/pmindex "$bin/pmindex"
    # The killed-process test binary (its path has a hash: ask cargo).
    local t
    t=$("${static[@]}" cargo test --release --target "$target" --test killed_process --no-run \
        --message-format=json |
        sed -n 's/.*"executable":"\([^"]*killed_process[^"]*\)".*/\1/p' | tail -n 1)
    if [ -z "$t" ]; then
        echo "device-check: cargo named no killed_process test binary" >&2
        exit 1
    fi
    cp "$t" "$bin/killed_process"
    # The combined-writes experiment, from its branch (not on main).
    local wt=/tmp/pmindex-combined-wt
    rm -rf "$wt"
    git worktree prune
    local branch=exp/combined-writes
    git rev-parse -q --verify "$branch" >/dev/null || branch=origin/$branch
    git worktree add --detach "$wt" "$branch" >/dev/null
    (cd "$wt" && "${static[@]}" cargo build --release --target "$target" --bin pmindex)
    cp /tmp/pmindex-static/$target/release/pmindex "$bin/pmindex-combined"
    git worktree remove --force "$wt"
    strip "$bin"/pmindex "$bin"/pmindex-combined "$bin"/killed_process
    sources >"$bin/BUILD"
    ls -l "$bin"
    du -sh "$bin"
}

run() {
    local out=${OUT:-device-out}
    mkdir -p "$out"
    local built now
    built=$(cat "$bin/BUILD" 2>/dev/null || echo none)
    now=$(sources)
    echo "binaries built from sources $built; this tree's are $now" | tee "$out/build.txt"
    if [ "$built" != "$now" ] && [ -z "${FORCE:-}" ]; then
        echo "device-check: .dev/bin is not built from this tree: run 'scripts/device-check.sh build' (or FORCE=1)" >&2
        exit 3
    fi
    local records=1000000 threads=1,2,4,8,16 few=1,4,16 kill_threads=16 kill_rounds=5
    if [ -n "${QUICK:-}" ]; then
        records=20000 threads=1,2 few=1,2 kill_threads=2 kill_rounds=1
    fi
    nproc >"$out/nproc.txt"
    lscpu >"$out/lscpu.txt" 2>&1 || true
    echo "== 1. thread scaling of the four trees ($records sparse keys; threads $threads)"
    local e
    for e in hart wort woart art-cow; do
        timeout 75 "$bin/pmindex" bench --engines "$e" --baseline "$e" --keys sparse --mix basic \
            --records "$records" --threads "$threads" --rounds 1 \
            --json >"$out/threads-$e.json" 2>"$out/threads-$e.err" ||
            echo "exit $?" >>"$out/threads-$e.err"
    done
    echo "== 2. combined radix writes beside single ones (threads $few)"
    timeout 150 "$bin/pmindex-combined" bench \
        --engines wort,wort:writes=combined,woart,woart:writes=combined --baseline wort \
        --keys sparse --mix basic --records "$records" --threads "$few" --rounds 1 \
        >"$out/combined.txt" 2>&1 || echo "exit $?" >>"$out/combined.txt"
    echo "== 3. killed writers ($kill_threads threads, $kill_rounds kills per engine)"
    PMINDEX_KILL_THREADS=$kill_threads PMINDEX_KILL_ROUNDS=$kill_rounds timeout 100 \
        "$bin/killed_process" --exact a_killed_writer_loses_nothing_it_acknowledged \
        --nocapture >"$out/killed.txt" 2>&1 || echo "exit $?" >>"$out/killed.txt"
    tail -n 3 "$out/killed.txt"
    echo "results in $out"
}

case "${1:-}" in
build) build ;;
run) run ;;
*)
    echo "usage: scripts/device-check.sh build|run" >&2
    exit 2
    ;;
esac
