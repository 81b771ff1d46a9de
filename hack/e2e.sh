#!/usr/bin/env bash
# Runs the e2e suite (test/e2e), in shards side by side, each on a cluster of
# its own (hack/e2eshard), and then makes sure nothing it started is left:
# each shard tears its cluster down itself, on failure and on Ctrl-C too;
# this script is the backstop for a test process that was killed outright
# (SIGKILL, a go test timeout), and fails the run if it had to clean up.
#
# Usage: hack/e2e.sh [-shards N] [-timeout D] [-run REGEXP] [-count N] [-update]
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
prefix=lockstep-e2e-

# pids_of_dir DIR: processes whose command line mentions DIR, i.e. those
# started for that test cluster (configs, data and logs all live there).
pids_of_dir() {
	local dir=$1 pid
	for pid in $(ls /proc | grep -E '^[0-9]+$'); do
		[ "$pid" = "$$" ] && continue
		if tr "\0" " " 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/"; then
			echo "$pid"
		fi
	done
}

# reap: removes test clusters whose owning test process is gone. Prints what
# it removed; returns 1 if there was anything.
reap() {
	local found=0 dir owner pids
	for dir in "$tmp"/"$prefix"*; do
		[ -d "$dir" ] || continue
		owner=$(cat "$dir/owner.pid" 2>/dev/null || echo)
		if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then
			continue # a live run owns it
		fi
		found=1
		pids=$(pids_of_dir "$dir")
		if [ -n "$pids" ]; then
			echo "e2e: killing processes left by a dead test run: $(echo $pids)" >&2
			kill -9 $pids 2>/dev/null || true
		fi
		echo "e2e: removing $dir left by a dead test run" >&2
		rm -rf "$dir"
	done
	return $found
}

reap || true # leftovers of an earlier run are not this run's failure

interrupted=0
trap 'interrupted=1' INT TERM
cd "$root"
go run ./hack/e2eshard "$@"
status=$?
trap - INT TERM

if ! reap; then
	echo "e2e: FAIL: the suite left processes or directories behind (removed now)" >&2
	[ $status -eq 0 ] && status=1
fi
if [ $interrupted -eq 1 ]; then
	exit 130
fi
exit $status
