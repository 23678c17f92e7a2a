#!/usr/bin/env python3
# tests/layering/test_check_includes.py — the test of the layering check: check_includes.py
# run on tiny trees made in a temporary folder, one allowed and one of each kind of
# violation, must pass the first and fail the others naming the file, the line and the edge.
#
#   python3 tests/layering/test_check_includes.py     (unittest; exit 1 on failure)
#
# Read before: tests/layering/check_includes.py.
import os
import unittest

from tree import run_on_tree

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_includes.py")

DESIGN = """# design

```layers
core:
nn: core
app: nn       # a comment
```
"""


def run(files):
    return run_on_tree(CHECKER, {"docs/design.md": DESIGN, **files})


GOOD = {
    "core/tensor.h": "#pragma once\n#include <vector>\n",
    "core/sub/kernel.cpp": '#include "core/tensor.h"\n#include "third_party/x.h"\n',
    "nn/module.h": '#pragma once\n#include "core/tensor.h"\n',
    "app/main.cpp": '#include "nn/module.h"\n#include "core/tensor.h"\n#include "helper.h"\n',
    "app/helper.h": "#pragma once\n",
}


# (the file added to GOOD, the line the checker must print for it)
VIOLATIONS = {
    "an upward include": (
        {"core/bad.cpp": '// a kernel\n\n#include "nn/module.h"\n'},
        'core/bad.cpp:3: forbidden include "nn/module.h" (core -> nn;'),
    "a transitive upward include": (
        {"core/bad.h": '#  include "app/helper.h"\n'},
        'core/bad.h:1: forbidden include "app/helper.h" (core -> app;'),
    "a relative include, resolved": (
        {"core/rel.cpp": '#include "../nn/module.h"\n'},
        'core/rel.cpp:1: forbidden include "../nn/module.h" (core -> nn;'),
    "an angle include of a file of the tree": (
        {"nn/up.h": "#include <app/helper.h>\n"},
        'nn/up.h:1: forbidden include "app/helper.h" (nn -> app;'),
    "a stale path inside a unit, even under #if": (
        {"app/old.cpp": '#if 0\n#include "core/moved.h"\n#endif\n'},
        'app/old.cpp:2: include "core/moved.h" names no file of the tree'),
    "a file outside every unit": (
        {"stray/x.cpp": "int x;\n"},
        "stray/x.cpp:1: file is in no unit"),
}


class CheckIncludes(unittest.TestCase):
    def test_allowed_tree_passes(self):
        rc, out = run(GOOD)
        self.assertEqual(rc, 0, out)

    def test_each_violation_fails_naming_file_line_and_edge(self):
        for what, (files, expected) in VIOLATIONS.items():
            with self.subTest(what):
                rc, out = run({**GOOD, **files})
                self.assertEqual(rc, 1, out)
                self.assertIn(expected, out)

    def test_cycle_in_the_graph_fails_naming_it(self):
        cyclic = DESIGN.replace("core:\n", "core: app\n")
        rc, out = run_on_tree(CHECKER, {**GOOD, "docs/design.md": cyclic})
        self.assertNotEqual(rc, 0)
        self.assertIn("the layer graph has a cycle: core -> app -> nn -> core", out)

    def test_design_doc_without_graph_fails(self):
        rc, out = run_on_tree(CHECKER, {**GOOD, "docs/design.md": "# design\n"})
        self.assertNotEqual(rc, 0)
        self.assertIn("no ```layers block", out)


if __name__ == "__main__":
    unittest.main()
