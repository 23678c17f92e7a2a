#!/usr/bin/env python3
# tests/layering/check_includes.py — the layering rule of docs/design.md, checked on every
# project #include of the tree (Note [Layer graph] in docs/design.md).
#
#   python3 tests/layering/check_includes.py [ROOT]     (ROOT: the repository, default: ../..)
#
# The graph is read from the ```layers block of ROOT/docs/design.md: one line per unit,
# `unit: the units it may include directly`; a unit may include itself and, transitively,
# everything its direct dependencies may include. The graph must have no cycle (two units
# that may include each other are one unit, or one of them holds code the other needs). A unit is a folder (`distributed/ddp`) or a
# root file (`lockstep.h`); a file belongs to the longest unit that is a prefix of its path.
# Every `#include "..."` (and `#include <...>` that names a file of the tree) of every C++
# file is resolved, beside the including file first, then from ROOT; an include that resolves
# to no file of the tree is third-party and not checked, unless it is a quoted path inside a
# unit (`"distributed/tcp_store.h"` after a move): that one fails, even under an `#if` the
# build does not compile (a CPU-only build would not see it). The files are those git tracks or
# does not ignore (in a tree that is no checkout: every file outside build*/ and hidden
# folders). Exit 0 when every edge is allowed;
# otherwise exit 1 after one line per violation:
#   path:line: forbidden include "target" (unit -> unit; unit may include: ...)
# A file outside every unit is a violation too (a new folder must be placed in the graph).
# Standard library only. Run by CTest (label unit); tested by test_check_includes.py.
#
# Read before: tests/layering/tree.py. Read next: tests/layering/test_check_includes.py.
import os
import re
import sys

import tree
from tree import tree_files

SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*(["<])([^">]+)[">]')


def read_graph(root):
    """{unit: [direct dependencies]} from the ```layers block of docs/design.md."""
    path = os.path.join(root, "docs", "design.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```layers\n(.*?)^```", text, re.S | re.M)
    if not m:
        raise SystemExit(f"{path}: no ```layers block (the layer graph)")
    graph = {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        unit, sep, deps = line.partition(":")
        if not sep:
            raise SystemExit(f"{path}: layers line {n}: expected 'unit: deps', got {line!r}")
        graph[unit.strip()] = deps.replace(",", " ").split()
    for unit, deps in graph.items():
        for d in deps:
            if d not in graph:
                raise SystemExit(f"{path}: unit {unit} depends on {d}, which is not a unit")
    cycle = find_cycle(graph)
    if cycle:
        raise SystemExit(f"{path}: the layer graph has a cycle: {' -> '.join(cycle)}; a layer "
                         "graph is a hierarchy: move the shared code into the lower unit")
    return graph


def find_cycle(graph):
    """A list [a, b, ..., a] of units that depend on each other in a ring, or None."""
    state = {}  # unit -> 1 while on the path, 2 when done

    def visit(unit, path):
        state[unit] = 1
        path.append(unit)
        for d in graph[unit]:
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                found = visit(d, path)
                if found:
                    return found
        path.pop()
        state[unit] = 2
        return None

    for unit in graph:
        if unit not in state:
            found = visit(unit, [])
            if found:
                return found
    return None


def closure(graph):
    """{unit: set of units it may include}, itself included."""
    allowed = {}
    for unit in graph:
        seen, todo = {unit}, [unit]
        while todo:
            for d in graph[todo.pop()]:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        allowed[unit] = seen
    return allowed


def unit_of(rel, units):
    best = None
    for u in units:
        if rel == u or rel.startswith(u + "/"):
            if best is None or len(u) > len(best):
                best = u
    return best


def source_files(root):
    return [f for f in tree_files(root) if f.endswith(SOURCE_SUFFIXES)]


def resolve(root, rel, target):
    """The tree path an include names, or None (third-party or standard)."""
    for base in (os.path.dirname(rel), ""):
        cand = os.path.normpath(os.path.join(base, target)).replace(os.sep, "/")
        if not cand.startswith("../") and os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def check(root):
    graph = read_graph(root)
    allowed = closure(graph)
    problems = []
    for rel in source_files(root):
        unit = unit_of(rel, graph)
        if unit is None:
            problems.append(f"{rel}:1: file is in no unit of the layer graph (docs/design.md)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(2))
                if target is None:
                    if m.group(1) == '"' and unit_of(m.group(2), graph) is not None:
                        problems.append(f'{rel}:{n}: include "{m.group(2)}" names no file of '
                                        "the tree (moved or renamed?)")
                    continue
                to = unit_of(target, graph)
                if to is None or to not in allowed[unit]:
                    may = " ".join(sorted(allowed[unit]))
                    problems.append(f'{rel}:{n}: forbidden include "{m.group(2)}" '
                                    f"({unit} -> {to or target}; {unit} may include: {may})")
    return problems


def main(argv):
    return tree.main(argv, check, "include(s) break the layer graph of docs/design.md",
                     "every #include follows the layer graph of docs/design.md")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
