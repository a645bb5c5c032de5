#!/usr/bin/env python3
"""Runs train_gpt with --timeline and checks the Chrome trace it writes.

The trace must hold two processes, the measured last step and the simulated
step, each with the threads compute, offload and prefetch; on every thread
the two name the same ops in the same order (the swapper walks the protocol
the simulator schedules), the measured ops of one thread do not overlap,
and each swapped layer's offload starts after its forward ends and its
backward after its prefetch ends.

usage: train_gpt_timeline_check.py TIMELINE_FILE -- TRAIN_GPT ARGS...
"""
import json
import subprocess
import sys


def fail(message):
    print("train_gpt_timeline_check: " + message)
    sys.exit(1)


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        fail("usage: train_gpt_timeline_check.py TIMELINE_FILE -- TRAIN_GPT ARGS...")
    path, command = sys.argv[1], sys.argv[3:]
    run = subprocess.run(command + ["--timeline", path], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        fail("train_gpt exited with %d: %s" % (run.returncode, run.stderr.strip()))
    with open(path) as f:
        trace = json.load(f)
    processes, threads, ops = {}, {}, {}
    for event in trace["traceEvents"]:
        pid = event["pid"]
        if event["ph"] == "M" and event["name"] == "process_name":
            processes[pid] = event["args"]["name"]
        elif event["ph"] == "M" and event["name"] == "thread_name":
            threads[(pid, event["tid"])] = event["args"]["name"]
        elif event["ph"] == "X":
            ops.setdefault((pid, event["tid"]), []).append(event)
    if sorted(processes) != [1, 2]:
        fail("expected two processes, got %s" % processes)
    if not processes[1].startswith("measured on ") or not processes[2].startswith("simulated on "):
        fail("expected the measured step first and the simulated one second, got %s" % processes)
    for pid in (1, 2):
        names = [threads.get((pid, tid)) for tid in range(3)]
        if names != ["compute", "offload", "prefetch"]:
            fail("process %d has threads %s" % (pid, names))
    # Chrome trace events carry no order of their own: the ops of a thread
    # in time order (the writer emits them in issue order, which this also
    # checks: a thread's events must not go back in time).
    swapped = 0
    for tid in range(3):
        measured = ops.get((1, tid), [])
        simulated = ops.get((2, tid), [])
        if [e["name"] for e in measured] != [e["name"] for e in simulated]:
            fail("thread %s: measured %s, simulated %s" % (threads[(1, tid)], [e["name"] for e in measured],
                                                          [e["name"] for e in simulated]))
        free_at = 0
        for e in measured:
            if e["ts"] + 1 < free_at:  # whole microseconds, each rounded
                fail("thread %s: %s starts at %d us, before the op before it ends at %d us"
                     % (threads[(1, tid)], e["name"], e["ts"], free_at))
            free_at = e["ts"] + e["dur"]
        if tid == 1:
            swapped = len(measured)
    if swapped == 0:
        fail("no layer was swapped: the run does not exercise the offload streams")
    at = {e["name"]: e for events in (ops.get((1, t), []) for t in range(3)) for e in events}
    for layer in range(swapped):
        offload, forward = at["offload %d" % layer], at["forward %d" % layer]
        backward, prefetch = at["backward %d" % layer], at["prefetch %d" % layer]
        if offload["ts"] + 1 < forward["ts"] + forward["dur"]:
            fail("offload %d starts before forward %d ends" % (layer, layer))
        if backward["ts"] + 1 < prefetch["ts"] + prefetch["dur"]:
            fail("backward %d starts before prefetch %d ends" % (layer, layer))
    print("timeline: %d swapped layers, measured and simulated ops in the same order" % swapped)


if __name__ == "__main__":
    main()
