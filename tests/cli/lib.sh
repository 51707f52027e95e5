# What the shell tests share. Source it with a name for the scratch directory:
#   source "$(dirname "$0")/lib.sh" NAME
# It makes $work (removed on exit), counts failures, and ends the test with `finish MESSAGE`.
work=$(mktemp -d "/tmp/boostlm_$1.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# expect_error "what" "fragment" cmd...: the command must fail and print the fragment.
expect_error() {
  local what=$1 fragment=$2; shift 2
  local out
  if out=$("$@" 2>&1); then fail "$what: succeeded"; return; fi
  grep -qF -- "$fragment" <<< "$out" || fail "$what: message lacks '$fragment': $out"
}
# finish "message": exits 1 after any failure, else prints the message.
finish() {
  if ((failures)); then echo "$failures failure(s)"; exit 1; fi
  echo "$1"
}
