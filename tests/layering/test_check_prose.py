#!/usr/bin/env python3
# tests/layering/test_check_prose.py — the test of the prose check: check_prose.py run on tiny
# trees made in a temporary folder, one that keeps every rule and one per kind of problem,
# must pass the first and fail each of the others naming the file, the line and the fix.
#
#   python3 tests/layering/test_check_prose.py     (unittest; exit 1 on failure)
#
# Read before: tests/layering/check_prose.py.
import os
import unittest

from tree import run_on_tree

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_prose.py")

README = """# tree

**The DDP track** — two steps:

1. `core/a.h` → `core/b.h` — a and b.
2. `net/c.h` — c.

**The full map:**
"""

GOOD = {
    "README.md": README,
    "core/a.h": ("// core/a.h — a.\n//\n// § Note [Alpha rule]\n// Everything is alpha.\n"
                 "// Read next: core/b.h.\n#pragma once\n"),
    "core/b.h": ("// core/b.h — b, under Note [Alpha rule] (core/a.h) and Notes [Alpha rule],\n"
                 "// [Beta\n// rule]. Read before: core/a.h. Read next: core/impl.cpp;\n"
                 "// on README's DDP track, net/c.h.\n//\n// § Note [Beta rule]\n// Beta.\n"),
    "core/impl.cpp": '// core/impl.cpp — see Note [Beta rule] in b.h; "rank #3".\n// Read before: core/b.h.\n',
    "net/c.h": "// net/c.h — c (Note [Alpha rule] in core/a.h). Read before: core/.\n",
    "docs/notes.md": "Note [Beta rule], `docs/notes.md` section 2, walks through it.\n",
}

# (the files replaced in GOOD, the text the checker must print)
PROBLEMS = {
    "a note defined twice": (
        {"net/c.h": "// net/c.h — c.\n// § Note [Alpha rule]\n// again.\n"},
        "net/c.h:2: Note [Alpha rule] is defined 2 times (core/a.h:3, net/c.h:2)"),
    "a citation of no definition": (
        {"core/impl.cpp": "// core/impl.cpp — see Note [Gamma\n// rule].\n"},
        "core/impl.cpp:1: Note [Gamma rule] is cited but defined nowhere"),
    "a citation naming the wrong file": (
        {"core/impl.cpp": "// core/impl.cpp — (Note [Alpha rule], core/b.h).\n"},
        "core/impl.cpp:1: Note [Alpha rule] is cited in core/b.h but defined in core/a.h"),
    "a citation naming a missing file": (
        {"core/impl.cpp": "// core/impl.cpp — (Note [Alpha rule] in core/gone.h).\n"},
        "core/impl.cpp:1: Note [Alpha rule] is cited in core/gone.h, which does not exist"),
    "a definition without its marker": (
        {"net/c.h": "// net/c.h — c.\n//\n// Note [Delta rule]\n// Delta.\n"},
        "net/c.h:3: 'Note [Delta rule]' alone on its line reads as a definition without its marker"),
    "a missing reading path": (
        {"core/impl.cpp": "// core/impl.cpp.\n// Read before: core/b.h, core/moved.h.\n"},
        "core/impl.cpp:2: 'Read before: core/moved.h' names no file or folder of the tree"),
    "two files reading each other first": (
        {"core/impl.cpp": "// core/impl.cpp. Read before: core/b.h.\n",
         "core/b.h": GOOD["core/b.h"].replace("Read before: core/a.h.", "Read before: core/impl.cpp.")},
        "core/b.h:1: core/b.h and core/impl.cpp each name the other as 'Read before'"),
    "a track the per-file chain does not follow": (
        {"core/a.h": GOOD["core/a.h"].replace("Read next: core/b.h.", "Read next: net/c.h.")},
        "README.md:5: the DDP track goes core/a.h -> core/b.h, but core/a.h's 'Read next:' names net/c.h"),
    "a track naming a missing file": (
        {"README.md": README.replace("`net/c.h`", "`net/gone.h`")},
        "README.md:6: the DDP track names net/gone.h, which does not exist"),
    "an issue number": (
        {"net/c.h": "# net/c.h — c, built for issue #12.\n"},
        "net/c.h:1: 'issue #12' cites an issue number"),
    "a parenthesized issue number": (
        {"docs/notes.md": "| fig | beyond (#10) |\n"},
        "docs/notes.md:1: '(#10)' cites an issue number"),
}


def run(files):
    return run_on_tree(CHECKER, files)


class CheckProse(unittest.TestCase):
    def test_good_tree_passes(self):
        rc, out = run(GOOD)
        self.assertEqual(rc, 0, out)

    def test_each_problem_fails_naming_file_and_line(self):
        for what, (files, expected) in PROBLEMS.items():
            with self.subTest(what):
                rc, out = run({**GOOD, **files})
                self.assertEqual(rc, 1, out)
                self.assertIn(expected, out)


if __name__ == "__main__":
    unittest.main()
