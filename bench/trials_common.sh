# Sourced by the kill-trial scripts (bench/crash_trials.sh,
# bench/local_kill_trials.sh): `trials_setup NAME BUILD` moves to the
# repository root and sets `bin` (BUILD/tests/crash, where the trial
# programs and kill_shim.so are built) and `dir` (a scratch directory under
# $TMPDIR, removed when the script exits).
trials_setup() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  bin=$2/tests/crash
  dir=${TMPDIR:-/tmp}/sp_$1_$$
  trap 'rm -rf "$dir"' EXIT
}
