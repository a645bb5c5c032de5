#!/usr/bin/env python3
"""memo-project --json on good and bad input: stdout is exactly one JSON
object, an error object's exit_status is the process's exit status, and
every byte count is a whole number below 2^64.

    cli_json.py TOOL SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

tool, scratch = sys.argv[1], sys.argv[2]
os.makedirs(scratch, exist_ok=True)
good = {
    "peak_flops": "312e12", "gemm_efficiency": "0.75", "attention_efficiency": "0.62",
    "host_link_bytes_per_second": "12e9", "intra_node_bytes_per_second": "200e9",
    "inter_node_bytes_per_second": "25e9", "device_memory_bytes": "85899345920",
    "host_memory_bytes": "1978906181632", "gpus_per_node": "8",
}


def profile(file_name, extra=b"", **fields):
    path = os.path.join(scratch, file_name)
    values = dict(good, **fields)
    with open(path, "wb") as out:
        out.write(extra + "".join(f"{k} = {v}\n" for k, v in values.items()).encode())
    return path


def too_large_to_count(report):
    """A strategy whose every setting is too large to count does not fit,
    whether it was asked alone or with the others."""
    (row,) = report["strategies"]
    if row["fits"] or row["limit"] != "every setting is too large to count" or not row["reason"]:
        raise ValueError(f"expected a row too large to count, got {row}")


def parts_add_up(report):
    """Every device breakdown's arena is its skeletal plus transient bytes,
    and its total the parts the allocator pays for (whole bytes each)."""
    for row in report["strategies"]:
        d = row.get("device_bytes")
        if not d:
            continue
        if d["planned_arena"] != d["skeletal"] + d["transient"]:
            raise ValueError(f"{row['strategy']}: arena {d['planned_arena']} != skeletal + transient")
        paid = d["planned_arena"] if d["allocator"] == "planned" else d["caching_reserve"]
        if d["total"] != d["params"] + d["grads"] + d["optimizer"] + d["framework"] + paid:
            raise ValueError(f"{row['strategy']}: total {d['total']} is not the sum of its parts")


def nothing_fits(shortest):
    """--seq max with nothing fitting: the strategy's object names the
    shortest length tried and the first resource to run out there, and its
    message says so in words."""
    def check(report):
        (row,) = report["strategies"]
        if row["fits"] or row.get("shortest_tried") != shortest or row["sequence"] != shortest:
            raise ValueError(f"expected no fit with shortest_tried {shortest}, got {row.get('shortest_tried')}")
        first = row["limits"][0]
        if row["limit"] != "device memory" or first["resource"] != row["limit"] or first["need"] <= first["capacity"]:
            raise ValueError(f"limit {row['limit']} is not the first exceeded resource {first}")
        words = f"does not fit even at {shortest // 1024}K, the shortest length tried"
        if words not in row["message"] or "the first resource to run out there: device memory" not in row["message"]:
            raise ValueError(f"message {row['message']!r}")
    return check


base = ["--model", "7b", "--gpus", "8", "--profile", "a800"]
cases = [  # (arguments, exit status, what the object must hold[, a check of the parsed object])
    (base + ["--seq", "64K"], 0, "best"),
    (base + ["--seq", "max", "--strategy", "memo"], 0, "best"),
    (["--model", "65b", "--gpus", "1", "--profile", "a800", "--seq", "max", "--strategy", "memo"], 3, "limit",
     nothing_fits(65536)),
    (["--model", "80,65536,64,50257", "--gpus", "640", "--profile", "a800", "--seq", "max", "--strategy", "sppo"], 3,
     "shortest_tried", nothing_fits(196608)),
    (["--model", "7b", "--gpus", "12", "--profile", "a800", "--seq", "1K", "--strategy", "sppo"], 3, "reason"),
    (["--model", "7b", "--gpus", "5", "--profile", "a800", "--seq", "max", "--strategy", "memo"], 0, "gpus_idle"),
    (["--model", "1,64,1,1", "--gpus", "64", "--profile", "a800", "--seq", "max", "--strategy", "memo"], 0,
     "search_limit_reached"),
    (["--model", "7,8"] + base[2:] + ["--seq", "1M"], 1, "error"),
    (["--model", "2147483647,2147483647,1,2147483647"] + base[2:] + ["--seq", "64K"], 1, "error"),
    (["--model", "1,2097152,1,1", "--gpus", "1", "--profile", "a800", "--seq", "1048576M", "--strategy", "memo"], 3,
     "strategies", too_large_to_count),
    # Per-GPU shards of fractional bytes (5, 3 and 12 GPUs): the printed parts still add up.
    (["--model", "7b", "--gpus", "5", "--profile", "a800", "--seq", "100001"], 0, "best", parts_add_up),
    (["--model", "7b", "--gpus", "3", "--profile", "a800", "--seq", "100001"], 0, "best", parts_add_up),
    (["--model", "8b", "--gpus", "12", "--profile", "a800", "--seq", "100001"], 0, "best", parts_add_up),
    (base + ["--seq", "lots"], 2, "error"),
    (base + ["--seq", "1048577M"], 2, "error"),
    (base + ["--seq", "64K", "--gpus", "3"], 2, "error"),
    (["--model", "7b", "--gpus", "99999999999", "--profile", "a800", "--seq", "64K"], 2, "error"),
    (["--model", "--json", "--gpus", "8", "--profile", "a800", "--seq", "64K"], 2, "error"),
    (["--model", "7b", "--gpus", "8", "--profile", os.path.join(scratch, "none"), "--seq", "64K"], 1, "error"),
    (["--model", "7b", "--gpus", "8", "--profile", scratch, "--seq", "64K"], 1, "error"),
    (["--model", "7b", "--gpus", "8", "--profile", profile("junk.profile", b"\x00\x1b\xff\xfe\"\\\n"), "--seq", "64K"],
     1, "error"),
    (["--model", "7b", "--gpus", "8", "--profile", profile("name.profile", name="\x1b[31m\"red\""), "--seq", "64K"],
     1, "error"),
    (["--model", "7b", "--gpus", "8", "--profile", profile("bom.profile", b"\xef\xbb\xbf"), "--seq", "64K"], 0,
     "best"),
]

failed = 0


def check_bytes(value, where):
    if isinstance(value, dict):
        for key, inner in value.items():
            check_bytes(inner, where + "." + key)
    elif isinstance(value, list):
        for k, inner in enumerate(value):
            check_bytes(inner, f"{where}[{k}]")
    elif where.endswith("bytes") or ".device_bytes." in where:
        if isinstance(value, int) and not 0 <= value < 2**64:
            raise ValueError(f"{where} = {value} is not below 2^64")


for arguments, status, key, *check in cases:
    run = subprocess.run([tool] + arguments + ["--json"], capture_output=True, timeout=60)
    problem = None
    try:
        lines = run.stdout.decode().splitlines()
        if len(lines) != 1:
            raise ValueError(f"{len(lines)} lines on stdout")
        report = json.loads(lines[0])
        if run.returncode != status:
            raise ValueError(f"exit status {run.returncode}, expected {status}")
        if "error" in report and report.get("exit_status") != status:
            raise ValueError(f"exit_status {report.get('exit_status')} in the object")
        if key not in json.dumps(report):
            raise ValueError(f"no '{key}' in the object")
        check_bytes(report, "")
        for extra in check:
            extra(report)
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        problem = str(e)
    print(("FAIL" if problem else "ok  "), " ".join(arguments), "->", problem or run.returncode)
    if problem:
        print("    stdout:", run.stdout[:400], "\n    stderr:", run.stderr[:400])
        failed += 1
print(f"{len(cases) - failed} of {len(cases)} passed")
sys.exit(1 if failed else 0)
