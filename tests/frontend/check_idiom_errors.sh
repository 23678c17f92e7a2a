#!/usr/bin/env bash
# tests/frontend/check_idiom_errors.sh — the libtorch habits lockstep spells differently
# fail to compile with a one-line message naming the lockstep spelling.
#
#   check_idiom_errors.sh CXX SOURCE_ROOT
#
# Each tests/frontend/idiom_errors/*.cpp is one habit; its first line is
# `// expect: TEXT`. The snippet is compiled once (-fsyntax-only, the project's include
# root); the check passes when the compiler fails and its diagnostics hold TEXT. A snippet
# that compiles, or fails with another message, is reported with its diagnostics.
#
# Read before: tests/frontend/test_libtorch_idioms.cpp. Read next: docs/api.md ("Coming from libtorch").
set -u
cxx=$1
root=$2
failed=0
for snippet in "$root"/tests/frontend/idiom_errors/*.cpp; do
  expect=$(sed -n '1s|^// expect: ||p' "$snippet")
  name=$(basename "$snippet")
  if [ -z "$expect" ]; then
    echo "FAIL $name: its first line must be '// expect: TEXT'"
    failed=1
    continue
  fi
  if out=$("$cxx" -std=c++20 -fsyntax-only -I"$root" "$snippet" 2>&1); then
    echo "FAIL $name: compiled, but the libtorch habit must fail naming the lockstep spelling"
    failed=1
  elif ! grep -qF -- "$expect" <<<"$out"; then
    echo "FAIL $name: the diagnostics do not say: $expect"
    echo "$out" | grep -E "error|static assert" | head -5
    failed=1
  else
    echo "ok   $name: $(grep -m1 -oF -- "$expect" <<<"$out")"
  fi
done
exit $failed
