#!/usr/bin/env python3
"""memo-plan --json records the exact search's switches: every one on by
default, the one turned off by --no-<name> false, and the object absent
when --solver does not run the exact search.

    cli_exact_switches.py MEMO_PLAN INPUT
"""
import json
import subprocess
import sys

tool, input_file = sys.argv[1], sys.argv[2]
switches = ["dominance", "section_bounds", "alignment_bounds", "symmetry", "decomposition", "restarts",
            "tight_branching", "transpositions"]
cases = [  # (arguments, the switches expected off, or None when the object must be absent)
    (["--solver", "exact"], set()),
    (["--solver", "exact", "--no-symmetry"], {"symmetry"}),
    (["--solver", "exact", "--no-transpositions"], {"transpositions"}),
    (["--solver", "exact", "--no-section-bounds", "--no-tight-branching"], {"section_bounds", "tight_branching"}),
    (["--solver", "greedy"], None),
]

failed = 0
for arguments, off in cases:
    run = subprocess.run([tool, "--json"] + arguments + [input_file], capture_output=True, timeout=60)
    problem = None
    try:
        if run.returncode != 0:
            raise ValueError(f"exit status {run.returncode}, expected 0")
        lines = run.stdout.decode().splitlines()
        if len(lines) != 1:
            raise ValueError(f"{len(lines)} lines on stdout, expected one JSON object")
        report = json.loads(lines[0])
        if off is None:
            if "exact_switches" in report:
                raise ValueError(f"exact_switches present without the exact search: {report['exact_switches']}")
        else:
            got = report.get("exact_switches")
            expected = {name: name not in off for name in switches}
            if got != expected:
                raise ValueError(f"exact_switches is {got}, expected {expected}")
            if not any(r.get("solver") == "exact" and r.get("proven_optimal") for r in report["solvers"]):
                raise ValueError("no proven exact row: the switches changed the answer")
    except (ValueError, UnicodeDecodeError) as e:
        problem = str(e)
    print("FAIL" if problem else "ok  ", " ".join(arguments), "->", problem or run.returncode)
    if problem:
        print("    stdout:", run.stdout[:600], "\n    stderr:", run.stderr[:400])
        failed += 1
print(f"{len(cases) - failed} of {len(cases)} passed")
sys.exit(1 if failed else 0)
