#!/usr/bin/env bash
# Runs the authors' published HART, WORT and WOART beside ours, on the same
# keys in the same order, in interleaved rounds, and prints ns per operation
# and our throughput against theirs (docs/design.md §7, "The authors'
# published code", and §11). This is how the speed goals of issues #5 and #6
# ("at least 1.5x the authors' insert and search throughput") are measured.
#
#   scripts/authors/compare.sh [--src DIR] [--engines hart,wort,woart]
#       [--keys sparse,rand-string,dictionary] [--records N] [--rounds R]
#       [--flush clwb|published] [--pages small|huge] [--work DIR] [--words FILE]
#       [--build-only] [--static] [--prebuilt DIR]
#
# --src DIR   a directory holding the authors' checkouts: DIR/hart
#             (github.com/CASL-SDSU/HART) and DIR/wort (github.com/SeKwonLee/WORT).
#             Without it they are cloned into WORK/src (WORT at the commit
#             the design notes used, HART at its default branch; the commits
#             are printed).
# --engines   which of the authors' engines (default all three).
# --keys      key sets, `pmindex bench --keys` names (default: sparse,
#             rand-string and dictionary for hart, sparse for wort and woart,
#             whose code takes 8-byte integers only). The dictionary is
#             --words (default /usr/share/dict/words, Debian's
#             wamerican-insane gives the 663,473 words of the notes).
# --records   keys per run (default 1000000; a dictionary gives its size).
# --rounds    interleaved rounds (default 3), ours first in odd rounds.
# --flush     clwb (default): the authors' flushes made `clwb` and their
#             `mfence`s `sfence`, as ours are; published: as published
#             (HART: `clflush` + `sfence`; WORT, WOART: `clflush` between
#             `mfence`s).
# --pages     small (default): both sides on base pages, our pool mapped with
#             SMALL_PAGES=1 and their heap as malloc gives it. huge: both
#             sides asked for transparent huge pages, our pool by its default
#             MADV_HUGEPAGE (Options::small_pages) and both processes' malloc
#             heaps by GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (their nodes and
#             values, our DRAM index; glibc 2.35 or later, older ones ignore
#             it); the kernel grants them only where
#             transparent_hugepage/enabled is madvise or always. Where it
#             is always, small keeps our pool on base pages
#             (MADV_NOHUGEPAGE) but both heaps get huge pages anyway: run
#             the comparison with the kernel at madvise.
# --work DIR  where builds, key files and results go (default target/authors).
# --build-only  build theirs into WORK/build-FLUSH/bin and stop.
# --static    build theirs static, for x86-64-v3 rather than this CPU (for
#             another machine: scripts/device-check.sh).
# --prebuilt DIR  run with binaries built elsewhere, no gcc, cargo or
#             sources needed: DIR holds theirs (hart, wort, woart, and FLUSH
#             naming their build) and ours (search_probe, write_keys).
#
# The authors' code is fetched and patched here, never kept in this
# repository. What is changed, and why (all of it is printed):
#   - HART: our driver splits keys itself, binary-safe (their hadix.c splits
#     with strncpy/strlen and loses keys with a 0 byte), and the hash table
#     is given hash keys without 0 bytes (adapter_hart.h). Their leaf holds
#     24 bytes of key past the 2-byte hash key (the paper's limit), so the
#     dictionary is written without its words over 25 bytes (29 of
#     663,473), for both sides.
#   - WOART: `make_leaf` is given its missing `l = ret;` (it writes through
#     an uninitialised pointer as published).
# Their values stay out of line, as published: a search that finds a key
# reads its value through the leaf's pointer, as ours reads its value.
#
# scripts/authors/selftest.sh (run by .ci/run) tests driver.c on a stand-in
# for the authors' code (adapter_mock.h).
#
# Output: one line per run in WORK/results-<time>.txt, then a table of
# medians. Ours runs `examples/search_probe.rs` with `ANON=1` (a pool in
# anonymous memory, as theirs is in the heap); a search figure is the best
# of three passes over all keys, for both.
set -euo pipefail
shopt -s inherit_errexit
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/scripts/authors"

src="" engines="hart,wort,woart" keys="" records=1000000 rounds=3 flush=clwb pages=small
build_only="" static="" prebuilt=""
work="$root/target/authors" words=/usr/share/dict/words
wort_commit=d3ab0e43b801c170212b50ee45b6ac217afd0b0b

die() { echo "compare.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --src|--engines|--keys|--records|--rounds|--flush|--pages|--work|--words|--prebuilt)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)" ;;
  esac
  case "$1" in
    --src) src="$2"; shift 2 ;;
    --engines) engines="$2"; shift 2 ;;
    --keys) keys="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --flush) flush="$2"; shift 2 ;;
    --pages) pages="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --words) words="$2"; shift 2 ;;
    --prebuilt) prebuilt="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --static) static=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
case "$flush" in clwb|published) ;; *) die "--flush is clwb or published" ;; esac
case "$pages" in small|huge) ;; *) die "--pages is small or huge" ;; esac
[[ "$records" =~ ^[1-9][0-9]*$ ]] || die "--records is a positive number"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds is a positive number"
for e in ${engines//,/ }; do
  case "$e" in hart|wort|woart) ;; *) die "unknown engine $e (hart, wort, woart)" ;; esac
done
for k in ${keys//,/ }; do
  case "$k" in
    sparse|dense|clustered|random-u64|rand-string|seq-string|dictionary) ;;
    *) die "unknown key set $k (sparse, dense, clustered, random-u64, rand-string, seq-string, dictionary)" ;;
  esac
done
if [ -n "$prebuilt" ]; then
  [ -z "$build_only" ] || die "--build-only and --prebuilt exclude each other"
  for b in hart wort woart search_probe write_keys FLUSH; do
    [ -e "$prebuilt/$b" ] || die "$prebuilt/$b is missing (see --prebuilt)"
  done
  flush=$(cat "$prebuilt/FLUSH")
else
  command -v gcc >/dev/null || die "needs gcc"
fi
if [ "$flush" = clwb ] && [ -z "$build_only" ] && ! grep -qw clwb /proc/cpuinfo 2>/dev/null; then
  die "this CPU has no clwb: use --flush published"
fi
mkdir -p "$work"

if [ -n "$prebuilt" ]; then
  theirs="$prebuilt"
  probe="$prebuilt/search_probe"
  write_keys="$prebuilt/write_keys"
  echo "prebuilt: $prebuilt ($flush build)"
else
# --- the authors' sources --------------------------------------------------
if [ -z "$src" ]; then
  src="$work/src"
  mkdir -p "$src"
  if [ ! -d "$src/hart" ]; then
    git clone -q https://github.com/CASL-SDSU/HART "$src/hart" ||
      die "cannot clone CASL-SDSU/HART; pass --src DIR with hart/ and wort/ checkouts"
  fi
  if [ ! -d "$src/wort" ]; then
    git clone -q https://github.com/SeKwonLee/WORT "$src/wort" ||
      die "cannot clone SeKwonLee/WORT; pass --src DIR with hart/ and wort/ checkouts"
    git -C "$src/wort" checkout -q "$wort_commit" ||
      die "SeKwonLee/WORT has no commit $wort_commit any more; pass --src DIR"
  fi
fi
for f in hart/art.c hart/art.h hart/hash.c hart/hash.h hart/flush_delay.h \
         wort/src/wort/wort.c wort/src/woart/woart.c; do
  [ -f "$src/$f" ] || die "$src/$f is missing (see --src)"
done
for r in hart wort; do
  c=$(git -C "$src/$r" rev-parse HEAD 2>/dev/null || echo "not a git checkout")
  echo "authors' $r: $src/$r ($c)"
done

# --- build theirs -----------------------------------------------------------
build="$work/build-$flush"
rm -rf "$build"
mkdir -p "$build/bin"
cp -r "$src/hart" "$build/hart"
cp -r "$src/wort/src" "$build/wort"
if [ "$flush" = clwb ]; then
  sed -i 's/int support_clwb = 0;/int support_clwb = 1;/' "$build/hart/flush_delay.h"
  grep -q 'int support_clwb = 1;' "$build/hart/flush_delay.h" || die "HART's flush switch not found"
  for f in "$build/wort/wort/wort.c" "$build/wort/woart/woart.c"; do
    sed -i 's/"mfence"/"sfence"/g; s/clflush %0/clwb %0/g' "$f"
    grep -q 'clwb %0' "$f" || die "$f: flush not found"
    ! grep -q 'clflush\|"mfence"' "$f" || die "$f: a clflush or mfence is left"
  done
  echo "patched: flushes are clwb, WORT's and WOART's mfence is sfence"
fi
woart="$build/wort/woart/woart.c"
if ! sed -n '/^static art_leaf\* make_leaf/,/^}/p' "$woart" | grep -q 'l = ret;'; then
  sed -i '/^static art_leaf\* make_leaf/,/^}/ s/^\([[:space:]]*posix_memalign(&ret, 64, sizeof(art_leaf));\)$/\1\n    l = ret;/' "$woart"
  sed -n '/^static art_leaf\* make_leaf/,/^}/p' "$woart" | grep -q 'l = ret;' ||
    die "WOART's make_leaf could not be patched"
  echo "patched: WOART's make_leaf sets l = ret"
fi
cc=(gcc -O3 -march=native -w -I"$here")
[ -z "$static" ] || cc=(gcc -O3 -march=x86-64-v3 -static -w -I"$here")
"${cc[@]}" -DENGINE_WORT -I"$build/wort/wort" -o "$build/bin/wort" "$here/driver.c" "$build/wort/wort/wort.c" -lm
"${cc[@]}" -DENGINE_WOART -I"$build/wort/woart" -o "$build/bin/woart" "$here/driver.c" "$build/wort/woart/woart.c" -lm
"${cc[@]}" -DENGINE_HART -I"$build/hart" -o "$build/bin/hart" "$here/driver.c" "$build/hart/art.c" "$build/hart/hash.c" -lm
echo "$flush" >"$build/bin/FLUSH"
echo "built: $build/bin/{hart,wort,woart}"
[ -z "$build_only" ] || exit 0
theirs="$build/bin"

# --- build ours -----------------------------------------------------------------
(cd "$root" && cargo build --release --quiet --example search_probe --example write_keys)
probe="$root/target/release/examples/search_probe"
write_keys="$root/target/release/examples/write_keys"
fi

# --- the keys -------------------------------------------------------------------
keyfile() { # kind -> file, written once
  local f="$work/keys/$1-$records.keys" max=""
  if [ "$1" = dictionary ]; then
    # Their HART's leaf: 24 key bytes past the hash key.
    f="$work/keys/$1-$records-max25-$(basename "$words").keys"
    max=25
  fi
  if [ ! -s "$f" ]; then
    mkdir -p "$work/keys"
    MAX_LEN="$max" "$write_keys" "$1" "$records" "$f.tmp" 42 "$words" >&2 ||
      die "could not write the $1 keys"
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# --- run ----------------------------------------------------------------------
out="$work/results-$(date +%Y%m%d-%H%M%S).txt"
echo "# engine keys round who insert_ns search_ns (best of 3 passes)" > "$out"
best() { awk '/search/ { v = $(NF - 1); if (b == "" || v < b) b = v } END { print b }'; }
ins() { awk '/insert/ { print $(NF - 1) }'; }
one() { # who engine keyset file round
  local o
  local rc=0
  if [ "$pages" = small ]; then
    if [ "$1" = ours ]; then
      o=$(SMALL_PAGES=1 ANON=1 SEARCHES=3 "$probe" "$records" "$2" "$4") || rc=$?
    else
      o=$(SEARCHES=3 "$theirs/$2" "$4" "$records") || rc=$?
    fi
  else
    local tun="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
    if [ "$1" = ours ]; then
      o=$(GLIBC_TUNABLES="$tun" ANON=1 SEARCHES=3 "$probe" "$records" "$2" "$4") || rc=$?
    else
      o=$(GLIBC_TUNABLES="$tun" SEARCHES=3 "$theirs/$2" "$4" "$records") || rc=$?
    fi
  fi
  [ "$rc" = 0 ] || die "$1 $2 on $3 keys, round $5, failed (exit $rc); the rounds before are in $out"
  echo "$2 $3 $5 $1 $(echo "$o" | ins) $(echo "$o" | best)" | tee -a "$out"
}
for e in ${engines//,/ }; do
  ks="$keys"
  if [ -z "$ks" ]; then
    [ "$e" = hart ] && ks="sparse,rand-string,dictionary" || ks="sparse"
  fi
  for k in ${ks//,/ }; do
    if [ "$e" != hart ] && [ "$k" != sparse ] && [ "$k" != dense ] && [ "$k" != clustered ] &&
       [ "$k" != random-u64 ]; then
      echo "skipped: $e with $k keys (the authors' $e takes 8-byte integers only)"
      continue
    fi
    f=$(keyfile "$k")
    for r in $(seq 1 "$rounds"); do
      if [ $((r % 2)) -eq 1 ]; then
        one ours "$e" "$k" "$f" "$r"; one theirs "$e" "$k" "$f" "$r"
      else
        one theirs "$e" "$k" "$f" "$r"; one ours "$e" "$k" "$f" "$r"
      fi
    done
  done
done

# --- table of medians -----------------------------------------------------------
echo
echo "medians over $rounds rounds, ns/op; x = our throughput / theirs ($flush build, $pages pages)"
printf '%-6s %-12s %9s %9s %6s %9s %9s %6s\n' engine keys "ins:them" "ins:ours" x "srch:them" "srch:ours" x
awk '!/^#/ { k = $1 " " $2; ins[k, $4] = ins[k, $4] " " $5; srch[k, $4] = srch[k, $4] " " $6; seen[k] = 1; if (!(k in order)) { order[k] = ++n; keys[n] = k } }
  function median(s,   a, m, i, j, t) {
    m = split(s, a, " ")
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= n; i++) {
      k = keys[i]; split(k, kk, " ")
      ti = median(ins[k, "theirs"]); oi = median(ins[k, "ours"])
      ts = median(srch[k, "theirs"]); os = median(srch[k, "ours"])
      printf "%-6s %-12s %9.0f %9.0f %5.2fx %9.0f %9.0f %5.2fx\n", kk[1], kk[2], ti, oi, ti / oi, ts, os, ts / os
    }
  }' "$out"
echo "(each run: $out)"
