#!/usr/bin/env python3
"""An independent check of a memo-plan run, for the CLI tests.

    check_plan.py PROBLEM.csv PLAN.csv EXPECTED_BOUND [--optimal]

Reads the DSA problem (id,lower,upper,size[,alignment]) and the plan that
memo-plan wrote (id,offset,size,lower,upper) with Python's unbounded
integers, and checks, without any of the library's code:

* the lower bound, recomputed at every instant a buffer starts (the most
  bytes live at once), equals EXPECTED_BOUND (worked by hand in the test);
* the plan covers every buffer with its size and lifetime, respects each
  alignment, ends within 64 bits, and no two buffers live at one instant
  share an address (every pair compared);
* with --optimal, the plan's peak equals the lower bound.

Prints what it found; exits 1 on the first failed check.
"""
import csv
import sys


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    problem_path, plan_path, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
    optimal = "--optimal" in sys.argv[4:]
    with open(problem_path, newline="") as f:
        buffers = {}
        for row in csv.DictReader(f):
            buffers[int(row["id"])] = (int(row["lower"]), int(row["upper"]), int(row["size"]),
                                       int(row.get("alignment") or 1))
    bound = max(sum(size for lower, upper, size, _ in buffers.values() if lower <= t < upper)
                for t in {lower for lower, _, _, _ in buffers.values()})
    print("lower bound recomputed: %d" % bound)
    if bound != expected:
        fail("lower bound %d, expected %d" % (bound, expected))
    with open(plan_path, newline="") as f:
        plan = {int(row["id"]): (int(row["offset"]), int(row["size"]), int(row["lower"]), int(row["upper"]))
                for row in csv.DictReader(f)}
    if sorted(plan) != sorted(buffers):
        fail("the plan's ids %s are not the problem's %s" % (sorted(plan), sorted(buffers)))
    for i, (offset, size, lower, upper) in plan.items():
        b_lower, b_upper, b_size, alignment = buffers[i]
        if (size, lower, upper) != (b_size, b_lower, b_upper):
            fail("buffer %d: the plan says size %d on [%d, %d)" % (i, size, lower, upper))
        if offset % alignment != 0:
            fail("buffer %d at %d breaks its alignment %d" % (i, offset, alignment))
        if offset + size > 2**64 - 1:
            fail("buffer %d ends at %d, past 2^64 - 1" % (i, offset + size))
    ids = sorted(plan)
    for x in ids:
        for y in ids:
            if x >= y:
                continue
            ox, sx, lx, ux = plan[x]
            oy, sy, ly, uy = plan[y]
            if lx < uy and ly < ux and ox < oy + sy and oy < ox + sx:
                fail("buffers %d and %d overlap in time and in address" % (x, y))
    peak = max(offset + size for offset, size, _, _ in plan.values())
    print("plan valid, peak %d" % peak)
    if optimal and peak != bound:
        fail("peak %d is not the lower bound %d" % (peak, bound))
    print("PASS")


if __name__ == "__main__":
    main()
