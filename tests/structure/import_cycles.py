#!/usr/bin/env python3
"""Module dependencies of src/: no import cycle between files, and the layers stay in order.

Reads every `crate::...`, `super::...` and `self::...` path and every `use child::...` in the code of
src/**/*.rs (comments and unit-test modules left out), resolves
each to the file that defines the module it names, and fails when:
  - two or more files depend on each other in a cycle (strongly connected components of the graph);
  - a file of a lower layer depends on a file of a higher one (`LAYERS` below: every top-level folder
    or file of src/ has its layer; the message names the file and its target).
Run by tests/run-all.sh; `--graph` prints the edges, `--layers` the folder-level arrows between layers.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC = os.path.join(ROOT, "src")

# The layers of src/, lowest first: a top-level folder or file may depend on its own layer and the ones
# below, never on a higher one. The data flow decides the middle: a source fills a snapshot, the
# enrichers add to it, the exporters read it, the pipeline runs them and the server serves them; the
# wiring (cli, engine, app) is on top. Every top-level entry of src/ must be listed.
LAYERS = [
    # Helpers that know no feature, and the error every start-up plan returns.
    ["fields", "lock.rs", "local_file.rs", "retry.rs", "error_chain.rs", "telemetry", "start_error.rs"],
    # The Kubernetes API client (the counters ConfigMap and the pod enricher both use it).
    ["kubernetes_api"],
    # The counters CSV and its followers.
    ["counters"],
    # Shared settings (the config file's `metrics` are parsed as counters).
    ["config"],
    # The start-up contract every feature's plan receives.
    ["startup.rs"],
    ["snapshot"],
    ["source"],
    ["enrich"],
    ["export"],
    ["pipeline.rs", "pipeline"],
    ["server"],
    ["cli.rs"],
    ["engine"],
    ["app.rs", "app"],
]

# Arrows that go up, each as (file, target prefix) with a comment giving its reason, for one that
# cannot be fixed at once: fix rather than add (move the type to where it belongs, or pass a value).
# An entry no arrow uses any more fails. None today.
ALLOWED_UPWARD = set()


def module_files():
    """Module path (tuple of names) -> file, for every .rs file under src/."""
    out = {}
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), SRC)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
                if f == "main.rs":
                    continue
            out[tuple(parts)] = rel
    return out


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = []
    for line in text.splitlines():
        # A `//` outside a string ends the code of the line (good enough for this code base).
        in_str = False
        cut = len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if c == '"' and (i == 0 or line[i - 1] != "\\"):
                in_str = not in_str
            elif not in_str and line.startswith("//", i):
                cut = i
                break
            i += 1
        lines.append(line[:cut])
    return "\n".join(lines)


def expand(path):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (`self` -> the prefix)."""
    m = re.match(r"^([\w:]*?)::\{(.*)\}$", path, flags=re.S)
    if not m:
        return [path]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    out = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        p = re.split(r"\s+as\s+", p)[0].strip()
        if p == "self":
            out.append(prefix)
        else:
            out.extend(expand(prefix + "::" + p))
    return out


PATH_RE = re.compile(r"\b(crate|super|self)((?:::(?:\w+|\{[^;]*?\}))+)", flags=re.S)
USE_RE = re.compile(r"\buse\s+(\w+)((?:::(?:\w+|\{[^;]*?\}|\*))*)\s*;", flags=re.S)


def resolve(current, head, names, modules):
    """The file a path points into: the longest module prefix that has a file."""
    names = [n for n in names if n and n != "*"]
    if head == "crate":
        base = []
    elif head == "self":
        base = list(current)
    else:  # super
        base = list(current[:-1])
        while names and names[0] == "super":
            names.pop(0)
            base = base[:-1]
    full = base + names
    for n in range(len(full), -1, -1):
        key = tuple(full[:n])
        if key in modules:
            return modules[key]
    return None


def graph():
    modules = module_files()
    edges = {}
    for mod_path, rel in modules.items():
        with open(os.path.join(SRC, rel), encoding="utf-8") as fh:
            text = fh.read()
        # Unit tests are not part of the module structure: a test-only module declaration
        # (`#[cfg(test)] mod x;`) is dropped where it stands, and a file's test block (from its first
        # other `#[cfg(test)]`, by convention at the end) is cut.
        text = re.sub(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*;", "", text, flags=re.M)
        cut = re.search(r"^#\[cfg\(test\)\]", text, flags=re.M)
        code = strip_comments(text[: cut.start()] if cut else text)
        current = tuple(mod_path)
        deps = set()
        found = []
        for m in PATH_RE.finditer(code):
            found.append((m.group(1), m.group(2)))
        # `use child::...;` inside a module: relative to it (Rust 2018 paths).
        for m in USE_RE.finditer(code):
            if current + (m.group(1),) in modules:
                found.append(("self", "::" + m.group(1) + m.group(2)))
        for head, tail in found:
            for p in expand(tail[2:]):
                target = resolve(current, head, p.split("::"), modules)
                if target and target != rel and target != "lib.rs":
                    deps.add(target)
        edges[rel] = deps
    return edges


def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def top(rel):
    """The top-level folder or file of src/ a file belongs to."""
    return rel.split("/")[0]


def layer_of(name):
    for i, names in enumerate(LAYERS):
        if name in names:
            return i
    return None


def layering(edges):
    """One line per upward arrow (file -> target), and per top-level entry no layer names."""
    out = []
    unplaced = sorted({top(f) for f in edges if layer_of(top(f)) is None} - {"lib.rs"})
    for name in unplaced:
        out.append(f"layering: src/{name} is in no layer: add it to LAYERS in {os.path.basename(__file__)}")
    used = set()
    for f in sorted(edges):
        mine = layer_of(top(f))
        for d in sorted(edges[f]):
            theirs = layer_of(top(d))
            if mine is None or theirs is None or theirs <= mine:
                continue
            allowed = [a for a in ALLOWED_UPWARD if f == a[0] and d.startswith(a[1])]
            if allowed:
                used.update(allowed)
                continue
            out.append(
                f"layering: src/{f} (layer {mine}: {top(f)}) depends on src/{d} "
                f"(layer {theirs}: {top(d)}), a higher layer"
            )
    for entry in sorted(set(ALLOWED_UPWARD) - used):
        out.append(f"layering: the allowed upward arrow {entry} is gone: remove it from ALLOWED_UPWARD")
    return out


def main():
    edges = graph()
    if "--graph" in sys.argv:
        for k in sorted(edges):
            for d in sorted(edges[k]):
                print(f"{k} -> {d}")
    failures = []
    for comp in cycles(edges):
        # One concrete loop through the component, for the message.
        failures.append("import cycle between: " + ", ".join(comp))
    failures.extend(layering(edges))
    if "--layers" in sys.argv:
        arrows = {}
        for f, deps in edges.items():
            for d in deps:
                if top(f) != top(d):
                    arrows.setdefault((top(f), top(d)), 0)
                    arrows[(top(f), top(d))] += 1
        for (a, b), n in sorted(arrows.items()):
            up = " UP" if layer_of(a) < layer_of(b) else ""
            print(f"{a} -> {b} ({n}){up}")
    if failures:
        for line in failures:
            print(line, file=sys.stderr)
        sys.exit(1)
    print(
        f"module dependencies: {len(edges)} files, no import cycle, "
        f"{len(LAYERS)} layers and no arrow up ({len(ALLOWED_UPWARD)} allowed, with reasons)"
    )


if __name__ == "__main__":
    main()
