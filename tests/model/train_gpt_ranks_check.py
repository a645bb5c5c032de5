#!/usr/bin/env python3
"""train_gpt across ranks against train_gpt on one rank.

    train_gpt_ranks_check.py --launch "mpirun -np 2" --ranks 2 --rank-args "--sp 2" -- PROGRAM ARGS...

Runs `PROGRAM ARGS --json` alone and `LAUNCH PROGRAM ARGS RANK-ARGS --json`,
and checks that both succeed, that every step's loss agrees (to the fp32
rounding of a different order of sums, and the JSON's six digits), and that
the multi-rank report holds every rank's device peak and communication
(the gradient sums a positive part of it, their exposed time not negative).
Exits 0 only when every check passed.
"""
import argparse
import json
import shlex
import subprocess
import sys


def run(command):
    print("$ " + " ".join(shlex.quote(c) for c in command), flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if done.returncode != 0:
        print(done.stdout + done.stderr)
        sys.exit(f"FAIL: exit status {done.returncode}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as e:
        print(done.stdout + done.stderr)
        sys.exit(f"FAIL: the output is not one JSON object ({e})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--rank-args", default="")
    parser.add_argument("--tolerance", type=float, default=2e-5)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    single = run(command + ["--json"])
    multi = run(shlex.split(a.launch) + command + shlex.split(a.rank_args) + ["--json"])
    want, got = single["loss"], multi["loss"]
    print("one rank:", want)
    print(f"{a.ranks} ranks:", got)
    if len(want) != len(got) or not want:
        sys.exit(f"FAIL: {len(want)} steps on one rank, {len(got)} across ranks")
    for step, (w, g) in enumerate(zip(want, got), start=1):
        if abs(w - g) > a.tolerance * max(1.0, abs(w)):
            sys.exit(f"FAIL: step {step}: loss {g} across ranks, {w} on one rank")
    figures = multi.get("rank_figures", [])
    if sorted(r["rank"] for r in figures) != list(range(a.ranks)):
        sys.exit(f"FAIL: rank figures of ranks {[r['rank'] for r in figures]}, expected 0..{a.ranks - 1}")
    for r in figures:
        if r["device_peak_bytes"] <= 0 or r["communication_bytes_per_step"] <= 0:
            sys.exit(f"FAIL: rank {r['rank']} reports no device peak or no communication: {r}")
        sums, exposed = r["gradient_reduction_seconds_per_step"], r["gradient_reduction_exposed_seconds_per_step"]
        if sums <= 0 or exposed < 0 or sums > r["communication_seconds_per_step"] * (1 + 1e-6) + 1e-9:
            sys.exit(f"FAIL: rank {r['rank']}'s gradient sums are not a positive part of its communication: {r}")
        print(f"rank {r['rank']} (stage {r['stage']}): device peak {r['device_peak_bytes']} B, "
              f"communication {r['communication_seconds_per_step'] * 1e3:.2f} ms of "
              f"{r['step_seconds'] * 1e3:.2f} ms per step, gradient sums {sums * 1e3:.2f} ms "
              f"({exposed * 1e3:.2f} ms exposed)")
    print("PASS")


if __name__ == "__main__":
    main()
