#!/usr/bin/env bash
# The checks that need a machine with many cores, in one run that fits a
# lent device's time (about 15 minutes, all tries together; see the
# developers' guide). They are what issues #5 and #6 leave unmeasured on a
# 2-vCPU machine (docs/design.md §7 "Stripes by thread", §11 "Writers of
# different root children at once"):
#   1. hart's thread scaling, 1 to 16 threads, 1M sparse keys;
#   2. the radix trees' thread scaling, striped writers (the default)
#      beside the tree-wide lock (`writers=locked`), 1 to 16 threads;
#   3. killed writers with 16 threads (tests/killed_process.rs);
#   4. the stress tests with their oracle at 16 threads
#      (tests/hart_stress.rs, tests/radix_stress.rs);
#   5. two threads deleting, three runs of examples/delete_scaling.rs
#      (design.md §7 "Two threads deleting"), on a machine whose other
#      cores are idle;
#   6. the authors' HART, WORT and WOART beside ours, one key at a time
#      (scripts/authors/compare.sh --prebuilt; design.md §7 "Side by side,
#      reproducibly"): only where `build` was given AUTHORS_SRC=DIR (the
#      authors' checkouts, as compare.sh's --src), which puts their static
#      drivers and ours in .dev/bin/authors.
# SECTIONS="2 3" runs some of them only. PREFAULT=1 maps every pool
# before timing in sections 1 and 2 (`pmindex bench --prefault`);
# RADIX_ENGINES=wort,woart,... replaces section 2's six engines. Each section has a timeout, so
# that a slow one loses its own figures only. Everything lands in one
# archive, $OUT/device-check.tgz (the `run` tool brings back few files).
#
# Here, first:   scripts/device-check.sh build
#   builds static binaries into .dev/bin (ignored by git), so the device
#   needs no toolchain or crates, and stamps them with a hash of the
#   sources (.dev/bin/BUILD): `run` refuses binaries built from other
#   sources than the tree it runs in (FORCE=1 runs them anyway).
# On the device: scripts/device-check.sh run      (with the `run` tool:
#   carry [".dev/bin"]; results go to $OUT, or to ./device-out without
#   it). Section 2 alone may take 400 s (six engines at five thread
#   counts): run SECTIONS="1 3" and SECTIONS=2 as two calls, timeout_s
#   450 each). Times seen on 2026-11-27 (one call, 427 s with a 150 s
#   stress timeout spent twice): section 1 10 s, section 2 with
#   RADIX_ENGINES=wort,woart,art-cow 71 s, section 3 26 s, section 5
#   19 s, and the machine's start about 35 s.
# A smoke test of `run` at a small scale, anywhere: QUICK=1 scripts/device-check.sh run
set -euo pipefail
cd "$(dirname "$0")/.."

bin=.dev/bin
target=x86_64-unknown-linux-gnu
static=(env RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=/tmp/pmindex-static)

# A hash of everything the binaries are built from (no git needed: the
# device's copy of the tree may have none).
sources() {
    # The C locale's order: the device's locale sorts names differently.
    find src tests examples scripts/authors Cargo.toml Cargo.lock -type f -print0 | LC_ALL=C sort -z |
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
    local name
    for name in hart_stress radix_stress; do
        t=$("${static[@]}" cargo test --release --target "$target" --test "$name" --no-run \
            --message-format=json |
            sed -n 's/.*"executable":"\([^"]*'"$name"'[^"]*\)".*/\1/p' | tail -n 1)
        if [ -z "$t" ]; then
            echo "device-check: cargo named no $name test binary" >&2
            exit 1
        fi
        cp "$t" "$bin/$name"
    done
    "${static[@]}" cargo build --release --target "$target" --example delete_scaling
    cp /tmp/pmindex-static/$target/release/examples/delete_scaling "$bin/delete_scaling"
    rm -rf "$bin/authors"
    if [ -n "${AUTHORS_SRC:-}" ]; then
        scripts/authors/compare.sh --src "$AUTHORS_SRC" --build-only --static \
            --work /tmp/pmindex-authors
        mkdir -p "$bin/authors"
        cp /tmp/pmindex-authors/build-clwb/bin/{hart,wort,woart,FLUSH} "$bin/authors/"
        "${static[@]}" cargo build --release --target "$target" --example search_probe \
            --example write_keys
        cp /tmp/pmindex-static/$target/release/examples/{search_probe,write_keys} "$bin/authors/"
        strip "$bin"/authors/{hart,wort,woart,search_probe,write_keys}
    else
        echo "device-check: section 6 not built (AUTHORS_SRC unset)"
    fi
    rm -f "$bin"/pmindex-combined "$bin"/pmindex-new "$bin"/pmindex-nolock
    strip "$bin"/pmindex "$bin"/killed_process "$bin"/hart_stress "$bin"/radix_stress \
        "$bin"/delete_scaling
    sources >"$bin/BUILD"
    ls -l "$bin"
    du -sh "$bin"
}

run() {
    local out=${OUT:-device-out}
    local res
    res=$(mktemp -d)
    local built now
    built=$(cat "$bin/BUILD" 2>/dev/null || echo none)
    now=$(sources)
    echo "binaries built from sources $built; this tree's are $now" | tee "$res/build.txt"
    if [ "$built" != "$now" ] && [ -z "${FORCE:-}" ]; then
        echo "device-check: .dev/bin is not built from this tree: run 'scripts/device-check.sh build' (or FORCE=1)" >&2
        exit 3
    fi
    local records=1000000 threads=1,2,4,8,16 kill_threads=16 kill_rounds=5
    local stress_threads=16 stress_ops=5000 delete_keys=1000000
    if [ -n "${QUICK:-}" ]; then
        records=20000 threads=1,2 kill_threads=2 kill_rounds=1
        stress_threads=2 stress_ops=5000 delete_keys=20000
    fi
    local prefault=()
    if [ -n "${PREFAULT:-}" ]; then
        prefault=(--prefault)
    fi
    local sections=${SECTIONS:-1 2 3 4 5 6}
    nproc >"$res/nproc.txt"
    lscpu >"$res/lscpu.txt" 2>&1 || true
    if [[ " $sections " == *" 1 "* ]]; then
        echo "== 1. hart's thread scaling ($records sparse keys; threads $threads)"
        timeout 75 "$bin/pmindex" bench --engines hart --baseline hart --keys sparse --mix basic \
            --records "$records" --threads "$threads" --rounds 1 "${prefault[@]}" \
            --json >"$res/threads-hart.json" 2>"$res/threads-hart.err" ||
            echo "exit $?" >>"$res/threads-hart.err"
    fi
    if [[ " $sections " == *" 2 "* ]]; then
        echo "== 2. the radix trees' thread scaling, striped and locked writers (threads $threads)"
        local e engines=()
        for e in wort woart art-cow; do
            engines+=("$e" "$e:writers=locked")
        done
        local list
        list=${RADIX_ENGINES:-$(IFS=,; echo "${engines[*]}")}
        timeout 400 "$bin/pmindex" bench --engines "$list" \
            --baseline "${list%%,*}" --keys sparse --mix basic --records "$records" \
            --threads "$threads" --rounds 1 "${prefault[@]}" \
            --json >"$res/threads-radix.json" 2>"$res/threads-radix.err" ||
            echo "exit $?" >>"$res/threads-radix.err"
    fi
    if [[ " $sections " == *" 3 "* ]]; then
        echo "== 3. killed writers ($kill_threads threads, $kill_rounds kills per engine)"
        PMINDEX_KILL_THREADS=$kill_threads PMINDEX_KILL_ROUNDS=$kill_rounds timeout 100 \
            "$bin/killed_process" --exact a_killed_writer_loses_nothing_it_acknowledged \
            --nocapture >"$res/killed.txt" 2>&1 || echo "exit $?" >>"$res/killed.txt"
        tail -n 3 "$res/killed.txt"
    fi
    if [[ " $sections " == *" 4 "* ]]; then
        echo "== 4. the stress tests ($stress_threads threads, $stress_ops ops per writer)"
        local t
        for t in hart_stress radix_stress; do
            PMINDEX_STRESS_THREADS=$stress_threads PMINDEX_STRESS_OPS=$stress_ops timeout 240 \
                "$bin/$t" --test-threads 1 >"$res/$t.txt" 2>&1 || echo "exit $?" >>"$res/$t.txt"
            tail -n 2 "$res/$t.txt"
        done
    fi
    if [[ " $sections " == *" 5 "* ]]; then
        echo "== 5. two threads deleting ($delete_keys keys, three runs)"
        local i
        for i in 1 2 3; do
            timeout 60 "$bin/delete_scaling" "$delete_keys" hart >>"$res/delete_scaling.txt" 2>&1 ||
                echo "exit $?" >>"$res/delete_scaling.txt"
        done
        cat "$res/delete_scaling.txt"
    fi
    if [[ " $sections " == *" 6 "* ]]; then
        if [ -d "$bin/authors" ]; then
            local keys=sparse,rand-string
            [ -s /usr/share/dict/words ] && keys=$keys,dictionary
            echo "== 6. the authors' code beside ours ($records keys: $keys; 3 rounds)"
            timeout 300 scripts/authors/compare.sh --prebuilt "$bin/authors" --work "$res/authors" \
                --records "$records" --rounds 3 --keys "$keys" >"$res/authors.txt" 2>&1 ||
                echo "exit $?" >>"$res/authors.txt"
            rm -rf "$res/authors/keys"
            tail -n 8 "$res/authors.txt"
        else
            echo "== 6. skipped: .dev/bin/authors was not built (AUTHORS_SRC)"
        fi
    fi
    mkdir -p "$out"
    tar czf "$out/device-check.tgz" -C "$res" .
    echo "results in $out/device-check.tgz"
}

case "${1:-}" in
build) build ;;
run) run ;;
*)
    echo "usage: scripts/device-check.sh build|run" >&2
    exit 2
    ;;
esac
