#!/usr/bin/env python3
# tests/layering/check_prose.py — the guided reading of the tree, checked as the includes are
# (Note [Checked prose] in docs/design.md).
#
#   python3 tests/layering/check_prose.py [ROOT]     (ROOT: the repository, default: ../..)
#
# Reads every text file git tracks or does not ignore (sources, scripts, CMake, Markdown) as
# prose: comment markers (`//`, `#`, `*`) stripped and lines joined, so a Note's title or a path
# may wrap. It checks, and prints one line per problem, `path:line: what is wrong; what to do`:
#   1. Notes. A definition is a line holding only `§ Note [Title]` (after the comment marker);
#      a citation is any other `Note [Title]` (or `Notes [A], [B]`). Every title has exactly
#      one definition, every citation names a defined title, and a citation that names its
#      file ("Note [X] in path", "(Note [X], path)") names the file that defines it. A line
#      holding only `Note [Title]` is a definition without its marker.
#   2. Reading order. Every path of a "Read before:" / "Read next:" clause exists (beside
#      the file, or from ROOT), and no two files name each other as "Read before".
#   3. README's DDP track (the numbered list under "**The DDP track**") is the per-file
#      chain: each step's files exist, and each file of the track names the next one among
#      its "Read next:" paths.
#   4. No issue numbers ("issue 12", "issue #12", "(#12)"): a reader of the tree cannot look
#      them up; say what the work was instead.
# Exit 0 when all hold, else 1 after the problems and a count. Standard library only. Run by
# CTest (label unit); tested by test_check_prose.py on tiny trees. Only the first line of a
# track step is read for its files (the backticked paths before its " — ").
#
# Read before: tests/layering/check_includes.py. Read next: tests/layering/test_check_prose.py.
import os
import re
import sys

import tree
from tree import tree_files

TEXT_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl", ".py", ".sh", ".cmake",
                 ".md", ".txt", ".json.in")
TEXT_NAMES = ("CMakeLists.txt",)
SKIP_DIRS = ("fuzz/corpus/", "tests/golden/")
# The checker and its test describe the conventions with made-up notes and issue numbers.
EXEMPT = ("tests/layering/check_prose.py", "tests/layering/test_check_prose.py")

MARKER = "§"
DEFINITION = re.compile(r"^\s*(?://+|#+|\*|/\*+)?\s*(" + MARKER + r"\s*)?Note \[([^\[\]]+)\]\s*$")
# "Note [A]" or "Notes [A], [B] and [C]": the bracketed titles after the word.
CITATION = re.compile(r"\bNotes? ((?:\[[^\[\]]{1,100}\](?:,? (?:and )?(?=\[))?)+)")
TITLE = re.compile(r"\[([^\[\]]+)\]")
PATH_TOKEN = r"`?((?:\.\./|\./)?[\w.+-]+(?:/[\w.+-]+)*\.(?:hpp|h|cpp|cuh|cu|md|py|sh|cmake)(?![\w]))`?"
# The file a citation names right after it: "Note [X] in path", "Note [X], path", "Note [X] (path".
CITED_FILE = re.compile(r"^(?: in| \(in|,| \()\s*" + PATH_TOKEN)
READ_CLAUSE = re.compile(r"Read (before|next):\s*(.*?)(?=Read (?:before|next):|\.(?:\s|$)|$)")
READ_PATH = re.compile(r"(?:^|[\s,(`])((?:\.\./|\./)?[\w.+-]+(?:/[\w.+-]+)*"
                       r"(?:\.(?:h|hpp|cpp|cu|cuh|md|py|sh|cmake|txt|json)|/))(?=[\s,;:)`]|$)")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\(#\d+[,)]")
COMMENT_PREFIX = re.compile(r"^\s*(?://+!?|#+(?!include|pragma|if|endif|define|else|elif)|\*+/?|/\*+)?\s?")


def text_files(root):
    return [f for f in tree_files(root)
            if (f.endswith(TEXT_SUFFIXES) or os.path.basename(f) in TEXT_NAMES)
            and not f.startswith(SKIP_DIRS)]


class Prose:
    """A file's lines with comment markers stripped, joined by spaces; line() maps back."""

    def __init__(self, lines):
        parts, self.starts = [], []
        at = 0
        for line in lines:
            body = COMMENT_PREFIX.sub("", line, count=1).strip()
            self.starts.append(at)
            parts.append(body)
            at += len(body) + 1
        self.text = " ".join(parts)

    def line(self, offset):
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1


def resolve(root, rel, path):
    """The tree path `path` names from file `rel` (beside it, then from ROOT), or None."""
    path = path.strip("`")
    for base in (os.path.dirname(rel), ""):
        cand = os.path.normpath(os.path.join(base, path)).replace(os.sep, "/")
        if not cand.startswith("../") and os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def read_files(root):
    files = {}
    for rel in text_files(root):
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        files[rel] = (lines, Prose(lines))
    return files


def check_notes(root, files, problems):
    definitions = {}  # title -> [(path, line)]
    for rel, (lines, _) in files.items():
        for n, line in enumerate(lines, 1):
            m = DEFINITION.match(line)
            if not m:
                continue
            if m.group(1) is None:
                problems.append(f"{rel}:{n}: 'Note [{m.group(2)}]' alone on its line reads as a "
                                f"definition without its marker; write '{MARKER} Note [{m.group(2)}]' "
                                "if it defines the note, or put the citation in a sentence")
            else:
                definitions.setdefault(m.group(2), []).append((rel, n))
    for title, places in definitions.items():
        if len(places) > 1:
            where = ", ".join(f"{p}:{n}" for p, n in places)
            problems.append(f"{places[1][0]}:{places[1][1]}: Note [{title}] is defined "
                            f"{len(places)} times ({where}); keep one definition and cite it")
    for rel, (lines, prose) in files.items():
        if rel in EXEMPT:
            continue
        for m in CITATION.finditer(prose.text):
            line = prose.line(m.start())
            if DEFINITION.match(lines[line - 1]) and lines[line - 1].count("[") == 1:
                continue  # the definition itself
            # A title wrapped inside a C++ string literal reads `Note [A " "B]`.
            titles = [" ".join(t.replace('" "', "").split()) for t in TITLE.findall(m.group(1))]
            for title in titles:
                if title in ("...", "Title"):
                    continue  # the convention described, not a note
                if title not in definitions:
                    problems.append(f"{rel}:{line}: Note [{title}] is cited but defined nowhere; "
                                    f"fix the title or define it as '{MARKER} Note [{title}]'")
                    continue
            if len(titles) != 1:
                continue
            title = titles[0]
            if title not in definitions:
                continue
            after = CITED_FILE.match(prose.text[m.end():m.end() + 200])
            if not after:
                continue
            home = definitions[title][0][0]
            named = after.group(1)
            if named.endswith(".md") and prose.text[m.end() + after.end():].startswith(" section"):
                continue  # a walk-through of the note's subject, not its definition
            # The path from the citing file or ROOT, or a shorter tail of the defining file's
            # ("batch_norm.cpp" for core/native/batch_norm.cpp), as prose names a file.
            cited = resolve(root, rel, named)
            if cited != home and home.endswith("/" + named.lstrip("./")):
                cited = home
            if cited is None:
                problems.append(f"{rel}:{line}: Note [{title}] is cited in {after.group(1)}, which "
                                f"does not exist; it is defined in {home}")
            elif cited != home:
                problems.append(f"{rel}:{line}: Note [{title}] is cited in {cited} but defined in "
                                f"{home}; cite {home}")


def header_end(lines):
    """The number of the last line of a file's opening comment block."""
    for n, line in enumerate(lines, 1):
        if line.strip() and not line.lstrip().startswith(("//", "#", "*", "/*")):
            return n - 1
    return len(lines)


def read_clauses(rel, prose):
    """[(kind, [path tokens], line)] of a file's "Read before:" / "Read next:" clauses."""
    out = []
    for m in READ_CLAUSE.finditer(prose.text):
        out.append((m.group(1), READ_PATH.findall(m.group(2)), prose.line(m.start())))
    return out


def check_reading_order(root, files, problems):
    before = {}  # file -> set of files it names as "Read before"
    nexts = {}   # file -> [files it names as "Read next", in order]
    for rel, (lines, prose) in files.items():
        if rel.endswith(".md"):
            continue  # Markdown documents walk the tree; their own order is the text's
        for kind, paths, line in read_clauses(rel, prose):
            if rel in EXEMPT and line > header_end(lines):
                continue  # the checker's own examples
            for path in paths:
                target = resolve(root, rel, path)
                if target is None:
                    problems.append(f"{rel}:{line}: 'Read {kind}: {path}' names no file or folder "
                                    "of the tree; fix the path (moved or renamed?)")
                    continue
                if kind == "before":
                    before.setdefault(rel, set()).add(target)
                else:
                    nexts.setdefault(rel, []).append(target)
    for a, targets in sorted(before.items()):
        for b in sorted(targets):
            if a < b and a in before.get(b, set()):
                problems.append(f"{a}:1: {a} and {b} each name the other as 'Read before'; one of "
                                "them comes first: make it the other's 'Read next'")
    return nexts


def ddp_track(readme_lines):
    """[(line, [paths])] of the numbered steps under "**The DDP track**" in README.md."""
    steps, inside, current = [], False, None
    for n, line in enumerate(readme_lines, 1):
        if line.startswith("**The DDP track**"):
            inside = True
            continue
        if not inside:
            continue
        if line.startswith("**") or line.startswith("#"):
            break
        m = re.match(r"^(\d+)\. (.*)$", line)
        if m:
            current = (n, [])
            steps.append(current)
            text = m.group(2)
        elif current and line.startswith(" "):
            text = line
        else:
            continue
        # The step's files: the backticked paths before its " — " description.
        head = text.split(" — ", 1)[0] if m else ""
        if m:
            current[1].extend(re.findall(r"`([\w./+-]+\.(?:h|cpp|md))`", head))
    return steps


def check_track(root, files, nexts, problems):
    readme = files.get("README.md")
    if readme is None:
        return
    steps = ddp_track(readme[0])
    if not steps:
        problems.append("README.md:1: no '**The DDP track**' numbered list; the checker reads the "
                        "DDP reading track from it")
        return
    chain = []
    for line, paths in steps:
        for path in paths:
            if not os.path.exists(os.path.join(root, path)):
                problems.append(f"README.md:{line}: the DDP track names {path}, which does not exist")
            chain.append((line, path))
    for (line, a), (_, b) in zip(chain, chain[1:]):
        if a not in files or not os.path.exists(os.path.join(root, b)):
            continue
        if b not in nexts.get(a, []):
            named = ", ".join(nexts.get(a, [])) or "nothing"
            problems.append(f"README.md:{line}: the DDP track goes {a} -> {b}, but {a}'s "
                            f"'Read next:' names {named}; add {b} to it (or change the track)")


def check_issue_numbers(files, problems):
    for rel, (lines, _) in files.items():
        if rel in EXEMPT:
            continue
        for n, line in enumerate(lines, 1):
            m = ISSUE.search(line)
            if m:
                problems.append(f"{rel}:{n}: '{m.group(0)}' cites an issue number a reader of the "
                                "tree cannot look up; say what the work or the promise was instead")


def check(root):
    files = read_files(root)
    problems = []
    check_notes(root, files, problems)
    nexts = check_reading_order(root, files, problems)
    check_track(root, files, nexts, problems)
    check_issue_numbers(files, problems)
    return problems


def main(argv):
    return tree.main(argv, check, "problem(s) in the tree's notes and reading order "
                     "(Note [Checked prose] in docs/design.md)",
                     "every note is defined once and cited by its file; every reading path "
                     "exists; the DDP track is the per-file chain; no issue numbers")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
