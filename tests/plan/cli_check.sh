#!/bin/sh
# Runs a command and checks what it did, for the memo-plan CLI tests:
#
#   cli_check.sh STATUS [--output REGEX] [--file PATH REGEX] [--no-file PATH] -- COMMAND...
#
# STATUS is the exit status the command must return; --output an extended
# regular expression its stdout + stderr must match (newlines are folded
# into spaces first); --file a file the command must have written, with
# content matching REGEX; --no-file a path that must not exist afterwards.
# Prints the command's output, then PASS or the first check that failed,
# and exits 0 only when every check passed (ctest looks at the exit status).
set -u
expected=$1
shift
output_regex=
checks=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    --output) output_regex=$2; shift 2 ;;
    --file) checks="$checks
file	$2	$3"; shift 3 ;;
    --no-file) rm -f "$2"; checks="$checks
none	$2	"; shift 2 ;;
    *) echo "cli_check.sh: unknown option $1"; exit 2 ;;
  esac
done
shift
# Files the command should write are removed first, so a stale one cannot pass.
echo "$checks" | while IFS='	' read -r kind path regex; do
  [ "$kind" = file ] && rm -f "$path"
done
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -ne "$expected" ]; then
  echo "FAIL: exit status $status, expected $expected"
  exit 1
fi
if [ -n "$output_regex" ] && ! printf '%s' "$out" | tr '\n' ' ' | grep -Eq -- "$output_regex"; then
  echo "FAIL: output does not match: $output_regex"
  exit 1
fi
failed=$(echo "$checks" | while IFS='	' read -r kind path regex; do
  case $kind in
    file)
      if [ ! -f "$path" ]; then echo "FAIL: $path was not written"; break; fi
      if ! tr '\n' ' ' < "$path" | grep -Eq -- "$regex"; then echo "FAIL: $path does not match: $regex"; break; fi ;;
    none)
      if [ -e "$path" ]; then echo "FAIL: $path exists"; break; fi ;;
  esac
done)
if [ -n "$failed" ]; then
  echo "$failed"
  exit 1
fi
echo PASS
