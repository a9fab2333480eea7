#!/usr/bin/env python3
"""Function length in src/: no function longer than LIMIT lines, except those the allow-list names.

A function's length counts the lines from the one holding `fn` to the one holding its closing brace.
Unit tests are left out: files named *_tests.rs and every item under `#[cfg(test)]` (a test module
or a test-only function). The allow-list (function_length_allow.txt beside this file) names the
functions that stay longer, one `path::function  reason` a line; the check also fails on a line of
it that no longer matches a long function, so the list only shrinks.
Run by tests/run-all.sh; `--list` prints every function over LIMIT.
"""
import os
import re
import sys

LIMIT = 120
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "src")
ALLOW = os.path.join(HERE, "function_length_allow.txt")

FN_RE = re.compile(r"\bfn\s+(\w+)")
CFG_TEST_RE = re.compile(r"#\[cfg\(test\)\]")


def blank(text):
    """The text with comments, strings and char literals replaced by spaces (newlines kept), so
    that every brace left is code."""
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif (m := re.compile(r"b?r(#*)\"").match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            wipe(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}', '{') rather than a lifetime ('a).
            m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'").match(text, i)
            if m:
                wipe(i, m.end())
                i = m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def body_end(code, start):
    """Index of the brace closing the block opened at or after `start`, or None when an item
    ends with `;` first (a declaration without a body)."""
    depth = 0
    nested = 0  # inside () or [] of a signature: `-> [u8; 4]` is not the end of an item
    for k in range(start, len(code)):
        ch = code[k]
        if ch in "([":
            nested += 1
        elif ch in ")]":
            nested -= 1
        elif ch == ";" and depth == 0 and nested == 0:
            return None
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return k
    return None


def functions(path):
    """(name, first line, length in lines) of every non-test function with a body in a file."""
    with open(path, encoding="utf-8") as fh:
        code = blank(fh.read())
    test_ranges = []
    for m in CFG_TEST_RE.finditer(code):
        end = body_end(code, m.end())
        if end is not None:
            test_ranges.append((m.start(), end))
    out = []
    for m in FN_RE.finditer(code):
        if any(a <= m.start() <= b for a, b in test_ranges):
            continue
        # The body opens at the first `{` after the signature (a `where` clause included).
        end = body_end(code, m.end())
        if end is None:
            continue
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        out.append((m.group(1), first, last - first + 1))
    return out


def long_functions():
    found = {}
    for dirpath, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith(".rs") or f.endswith("_tests.rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, os.path.join(SRC, "..")).replace(os.sep, "/")
            for name, line, length in functions(path):
                if length > LIMIT:
                    found[f"{rel}::{name}"] = (line, length)
    return found


def allowed():
    out = {}
    with open(ALLOW, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, reason = line.partition(" ")
            if not reason.strip():
                sys.exit(f"{ALLOW}:{number}: `{key}` has no reason")
            out[key] = number
    return out


def main():
    found = long_functions()
    if "--list" in sys.argv:
        for key, (line, length) in sorted(found.items(), key=lambda kv: -kv[1][1]):
            print(f"{length:4} {key} (line {line})")
        return 0
    allow = allowed()
    failures = []
    for key, (line, length) in sorted(found.items()):
        if key not in allow:
            path, _, name = key.rpartition("::")
            failures.append(f"{path}:{line}: fn {name} is {length} lines (limit {LIMIT}): split it into named steps, or allow-list it with a reason")
    for key, number in sorted(allow.items(), key=lambda kv: kv[1]):
        if key not in found:
            failures.append(f"{ALLOW}:{number}: {key} is no longer over {LIMIT} lines (or gone): remove the line")
    for line in failures:
        print(line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
