# tests/layering/tree.py — what the tree checkers share: the files of the tree, the command
# line (`checker.py [ROOT]`, exit 0 or 1 after one line per problem), and for their tests a
# tiny tree in a temporary folder.
# Standard library only; imported from the checkers' folder (Python puts a script's folder first
# on its path).
# Read before: docs/design.md "Layers". Read next: tests/layering/check_includes.py.
import os
import subprocess
import sys
import tempfile


def tree_files(root):
    """The files git tracks or does not ignore, when ROOT is a checkout's top; elsewhere every
    file outside build*/ and hidden folders. Paths relative to ROOT, '/'-separated, sorted."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if os.path.realpath(top) == os.path.realpath(root):
            out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                                  "--exclude-standard", "-z"],
                                 capture_output=True, text=True, check=True).stdout
            return sorted(f for f in out.split("\0") if f and os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Build trees and hidden folders (.git) hold no project sources.
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "build")))
        rel_dir = os.path.relpath(dirpath, root)
        found += [os.path.normpath(os.path.join(rel_dir, n)).replace(os.sep, "/") for n in filenames]
    return sorted(found)


def main(argv, check, failed, passed):
    """`checker.py [ROOT]` (default: the repository above tests/layering): prints check(root)'s
    problems, then `N <failed>`, and returns 1; or prints `passed` and returns 0."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(here, "..", ".."))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} {failed}")
        return 1
    print(passed)
    return 0


def run_on_tree(checker, files):
    """(exit status, stdout + stderr) of `checker ROOT` on a temporary tree of {path: text}."""
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        p = subprocess.run([sys.executable, checker, root], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr
