#!/usr/bin/env python3
"""Tests of check_snippets.py against the fixtures in fixtures/."""
import io
import contextlib
import pathlib
import sys

here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import check_snippets  # noqa: E402

fixtures = here / "fixtures"


def run(md):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = check_snippets.main(["--root", str(fixtures), str(fixtures / md)])
    return rc, out.getvalue()


failed = 0


def expect(md, rc_want, text_want):
    global failed
    rc, out = run(md)
    if rc != rc_want or text_want not in out:
        failed += 1
        print(f"FAIL {md}: rc={rc} (want {rc_want}), output:\n{out}")


expect("good.md", 0, "")
expect("missing_marker.md", 1, "missing_marker.md:3: no `<!-- compiled")
expect("missing_file.md", 1, "nowhere.cpp does not exist")
expect("changed_line.md", 1, "block line 1 not found")
expect("out_of_order.md", 1, "block line 2 not found")
expect("not_built.md", 1, "orphan.cpp is not compiled by the build")
sys.exit(1 if failed else 0)
