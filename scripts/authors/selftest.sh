#!/usr/bin/env bash
# Self-test of scripts/authors/driver.c without the authors' code: builds it
# with adapter_mock.h (a hash table), runs it on key files written by
# examples/write_keys.rs, and checks that it finds every key and prints
# what compare.sh parses. Skipped (exit 0) where gcc is missing. .ci/run
# calls it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/scripts/authors"
if ! command -v gcc >/dev/null; then
  echo "selftest: no gcc here; skipped"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -Werror -DENGINE_MOCK -I"$here" -o "$tmp/mock" "$here/driver.c"
(cd "$root" && cargo build --release --quiet --example write_keys --example search_probe)
probe="$root/target/release/examples/search_probe"
for kind in sparse rand-string; do
  "$root/target/release/examples/write_keys" "$kind" 20000 "$tmp/$kind.keys" 42 >/dev/null
  # The mock fails (exit 1) unless every key is found with its value and
  # searched as often as every other.
  out=$(SEARCHES=2 "$tmp/mock" "$tmp/$kind.keys" 20000)
  [ "$(echo "$out" | grep -c '^mock: insert [0-9]* ns/op$')" = 1 ] || { echo "$out"; exit 1; }
  [ "$(echo "$out" | grep -c '^mock: search [0-9]* ns/op$')" = 2 ] || { echo "$out"; exit 1; }
  # The same keys, in the same loading and search orders, as ours.
  theirs=$(echo "$out" | sed -n 's/^mock: key digest //p')
  ours=$(ANON=1 SEARCHES=0 "$probe" 20000 pmlog "$tmp/$kind.keys" | sed -n 's/^pmlog: key digest //p')
  if [ -z "$ours" ] || [ "$theirs" != "$ours" ]; then
    echo "selftest: $kind: driver.c's keys and orders ($theirs) differ from search_probe's ($ours)"
    exit 1
  fi
done
# A file of fewer keys than asked gives what it has; a truncated record ends it.
head -c 100 "$tmp/sparse.keys" > "$tmp/short.keys"
SEARCHES=1 "$tmp/mock" "$tmp/short.keys" 100 >/dev/null
# A missing file, an empty one and N = 0 are errors, not crashes.
: > "$tmp/empty.keys"
for args in "$tmp/none.keys 10" "$tmp/empty.keys 10" "$tmp/sparse.keys 0"; do
  set +e
  # shellcheck disable=SC2086 # two words on purpose
  "$tmp/mock" $args >/dev/null 2>&1
  rc=$?
  set -e
  if [ "$rc" != 1 ]; then
    echo "selftest: mock $args exited $rc, not 1"
    exit 1
  fi
done
echo "selftest: driver.c passed"
