#!/usr/bin/env python3
"""Checks the include layering docs/architecture.md describes.

Every header under include/memo/ may include memo headers of its own layer
or of a layer below it. The layers, lowest first:

  core < backend < {plan, schedule} < swap < model (operators, attention,
  single-device model) < pipeline < {model's parallel model, project}

plan and schedule are siblings (neither includes the other); project
includes nothing of model. Prints each include that breaks the rule, with
its file and line, and exits 1 if there is one.

usage: layering_check.py INCLUDE_DIR | --self-test
"""
import pathlib
import re
import sys

RANK = {"core": 0, "backend": 1, "plan": 2, "schedule": 2, "swap": 3, "model": 4, "pipeline": 5, "project": 6}
# The parallel model sits above pipeline/, beside project/.
UPPER_MODEL = {"gpt2_parallel_model.hpp", "gpt2_parallel_training.hpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"memo/([^"]+)"')


def layer_of(relative: pathlib.PurePosixPath):
    """(layer name, rank) of a header path relative to include/memo."""
    if len(relative.parts) == 1:
        return ("umbrella", len(RANK))  # memo.hpp includes every layer
    top = relative.parts[0]
    if top not in RANK:
        return None
    if top == "model" and relative.name in UPPER_MODEL:
        return ("model (parallel)", 6)
    return (top, RANK[top])


def allowed(mine, theirs) -> bool:
    (name, rank), (other, other_rank) = mine, theirs
    if name == other or (name.startswith("model") and other == "model" and rank >= other_rank):
        return True
    if name == "project" and other.startswith("model"):
        return False
    if {name, other} == {"plan", "schedule"}:
        return False
    return other_rank < rank


def check(root: pathlib.Path):
    """(headers checked, problems, unknown) for the tree under root (include/memo)."""
    headers = sorted(root.rglob("*.hpp"))
    problems = []
    unknown = []
    for header in headers:
        relative = pathlib.PurePosixPath(header.relative_to(root).as_posix())
        mine = layer_of(relative)
        if mine is None:
            unknown.append(str(relative))
            continue
        for number, line in enumerate(header.read_text(encoding="utf-8").splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = pathlib.PurePosixPath(match.group(1))
            theirs = layer_of(target)
            if theirs is None:
                unknown.append(f"{relative}:{number}: memo/{target}")
            elif not allowed(mine, theirs):
                problems.append(f"include/memo/{relative}:{number}: {mine[0]} includes memo/{target} ({theirs[0]})")
    return headers, problems, unknown


def self_test() -> int:
    """The checker on a made-up tree: it must find exactly the bad includes."""
    import tempfile

    tree = {
        "core/a.hpp": [],
        "backend/b.hpp": ["core/a.hpp"],
        "plan/p.hpp": ["schedule/s.hpp"],                     # bad: siblings
        "schedule/s.hpp": ["backend/b.hpp"],
        "swap/w.hpp": ["schedule/s.hpp", "plan/p.hpp"],
        "model/attention.hpp": ["swap/w.hpp", "pipeline/x.hpp"],  # bad: below pipeline
        "pipeline/x.hpp": ["model/attention.hpp", "model/gpt2_parallel_model.hpp"],  # second bad
        "model/gpt2_parallel_model.hpp": ["pipeline/x.hpp", "model/attention.hpp"],
        "project/q.hpp": ["pipeline/x.hpp", "model/attention.hpp"],  # bad: project and model
        "memo.hpp": ["project/q.hpp", "model/gpt2_parallel_model.hpp"],
    }
    expected = {
        "include/memo/plan/p.hpp:1",
        "include/memo/model/attention.hpp:2",
        "include/memo/pipeline/x.hpp:2",
        "include/memo/project/q.hpp:2",
    }
    with tempfile.TemporaryDirectory() as directory:
        root = pathlib.Path(directory) / "memo"
        for name, includes in tree.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f'#include "memo/{i}"\n' for i in includes), encoding="utf-8")
        _, problems, unknown = check(root)
    found = {p.split(": ")[0] for p in problems}
    if found != expected or unknown:
        print(f"layering_check self-test: found {sorted(found)}, expected {sorted(expected)}; unknown {unknown}")
        return 1
    print("layering_check self-test: the four bad includes found, nothing else")
    return 0


def main(argv) -> int:
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1]) / "memo"
    headers, problems, unknown = check(root)
    if not headers:
        print(f"layering_check: no headers under {root}", file=sys.stderr)
        return 2
    for name in unknown:
        print(f"layering_check: not in a known layer: {name}", file=sys.stderr)
    for problem in problems:
        print(problem)
    print(f"layering_check: {len(headers)} headers, {len(problems)} includes against the layering")
    return 1 if problems or unknown else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
