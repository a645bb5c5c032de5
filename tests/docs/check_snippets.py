#!/usr/bin/env python3
"""Check that every ```cpp block in docs/*.md and README.md is compiled code.

Each block must have `<!-- compiled: path -->` on the line directly above it;
the path (relative to the repository root) must be a file that a
CMakeLists.txt names (so the build compiles it), and every non-blank line of
the block must appear, in order, in that file, ignoring whitespace. A block
line `// ...` elides code. Prints file:line and the reason for each failing
block; exits 1 if any block fails.

Usage: check_snippets.py [--root DIR] [markdown files...]
"""
import pathlib
import re
import sys

MARKER = re.compile(r"^\s*<!--\s*compiled:\s*(\S+)\s*-->\s*$")


def squash(line):
    return "".join(line.split())


def compiled_sources(root):
    """Source files named by any CMakeLists.txt, or globbed by one."""
    named = set()
    for cml in root.rglob("CMakeLists.txt"):
        parts = cml.relative_to(root).parts
        # Build trees and the checker's own fixtures are not the project's build.
        if parts[0].startswith("build") or "fixtures" in parts[:-1]:
            continue
        text = cml.read_text(errors="replace")
        for token in re.findall(r"[\w./-]+\.(?:cpp|cu|cc)", text):
            named.add((cml.parent / token).resolve())
        # Directories that compile every source in them by a helper macro.
        if re.search(r"memo_add_tools_in_directory|file\s*\(\s*GLOB", text):
            for src in cml.parent.glob("*.cpp"):
                named.add(src.resolve())
    return named


def blocks(md_path):
    lines = md_path.read_text(errors="replace").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            start = i
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            above = lines[start - 1] if start > 0 else ""
            yield start + 1, above, body
        i += 1


def check_block(root, sources, above, body):
    m = MARKER.match(above)
    if not m:
        return "no `<!-- compiled: path -->` line directly above the block"
    rel = m.group(1)
    path = (root / rel).resolve()
    if not path.is_file():
        return f"compiled file {rel} does not exist"
    if path not in sources:
        return f"{rel} is not compiled by the build (no CMakeLists.txt names it)"
    file_lines = [squash(l) for l in path.read_text(errors="replace").splitlines()]
    pos = 0
    for n, line in enumerate(body, 1):
        s = squash(line)
        if not s or s == "//...":
            continue
        while pos < len(file_lines) and file_lines[pos] != s:
            pos += 1
        if pos == len(file_lines):
            return f"block line {n} not found (in order) in {rel}: {line.strip()}"
        pos += 1
    return None


def main(argv):
    root = pathlib.Path(__file__).resolve().parents[2]
    args = list(argv)
    if len(args) >= 2 and args[0] == "--root":
        root = pathlib.Path(args[1]).resolve()
        args = args[2:]
    mds = [pathlib.Path(a) for a in args] or sorted(root.glob("docs/*.md")) + [root / "README.md"]
    sources = compiled_sources(root)
    failures = 0
    for md in mds:
        md = md if md.is_absolute() else root / md
        if not md.is_file():
            continue
        for line, above, body in blocks(md):
            why = check_block(root, sources, above, body)
            if why:
                failures += 1
                print(f"{md.relative_to(root)}:{line}: {why}")
    if failures:
        print(f"{failures} cpp block(s) in docs are not compiled code")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
