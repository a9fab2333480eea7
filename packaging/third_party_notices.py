#!/usr/bin/env python3
"""The third-party notices of the dcgm-otel binary: the licence texts of every crate it is built from.

Which crates: every package reachable from dcgm-otel (default features, Linux x86_64) through normal
dependencies in `cargo metadata` (Cargo.lock's resolution), proc-macros included; build- and
dev-only dependencies are left out (nothing of them is in the binary). What of each: the licence
files the crate ships at its root (LICENSE*, LICENCE*, COPYING*, NOTICE*, COPYRIGHT*, UNLICENSE, and the
manifest's `license-file`), read from cargo's registry sources (~/.cargo/registry/src, where the build
put them). Crates whose texts are byte-identical (after line-end and trailing-space normalisation) are
listed together above one copy. A crate that ships no licence file takes its upstream's text from
`FALLBACK` (packaging/third-party-licenses/); one that is not there either fails the run.

Usage:
  python3 packaging/third_party_notices.py > packaging/THIRD-PARTY-NOTICES   # regenerate
  python3 packaging/third_party_notices.py --check                           # fail if stale (run-all.sh)
The Debian package (Cargo.toml [package.metadata.deb] assets) and the image (Dockerfile) install the file as
/usr/share/doc/dcgm-otel/THIRD-PARTY-NOTICES.
"""
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTICES = os.path.join(ROOT, "packaging", "THIRD-PARTY-NOTICES")
PREFIXES = ("license", "licence", "copying", "notice", "copyright", "unlicense")
# Crates that publish no licence file: their upstream's text (packaging/third-party-licenses/README.md).
FALLBACK = {
    "opentelemetry": "LICENSE",
    "opentelemetry_sdk": "LICENSE",
    "opentelemetry-proto": "LICENSE",
    "symbolic-common": "packaging/third-party-licenses/symbolic.LICENSE",
    "symbolic-demangle": "packaging/third-party-licenses/symbolic.LICENSE",
    "tonic-prost": "packaging/third-party-licenses/grpc-rust.LICENSE",
}


def host_triple():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return next(l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("host: "))


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", host_triple()],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def runtime_packages(meta):
    """The packages reachable from dcgm-otel through normal dependencies."""
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"] if p["name"] == "dcgm-otel" and p["source"] is None)
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    seen.discard(root)
    packages = {p["id"]: p for p in meta["packages"]}
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))


def normalise(text):
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines) + "\n"


def licence_files(p):
    """(file name, text) of each licence file a package ships."""
    folder = os.path.dirname(p["manifest_path"])
    names = sorted(n for n in os.listdir(folder)
                   if n.lower().startswith(PREFIXES) and os.path.isfile(os.path.join(folder, n)))
    if p.get("license_file"):
        extra = os.path.normpath(os.path.join(folder, p["license_file"]))
        if os.path.isfile(extra) and os.path.basename(extra) not in names:
            names.append(os.path.relpath(extra, folder))
    paths = [(n, os.path.join(folder, n)) for n in names]
    if not paths and p["name"] in FALLBACK:
        rel = FALLBACK[p["name"]]
        paths = [(f"upstream {os.path.basename(rel)}", os.path.join(ROOT, rel))]
    out = []
    for n, path in paths:
        with open(path, "rb") as f:
            out.append((n, normalise(f.read().decode("utf-8", errors="replace"))))
    return out


def render(packages):
    groups = {}  # text hash -> (text, [(crate, file)])
    missing = []
    expressions = {}
    for p in packages:
        crate = f"{p['name']} {p['version']}"
        expressions[crate] = p.get("license") or "(no SPDX expression)"
        files = licence_files(p)
        if not files:
            missing.append(crate)
        for name, text in files:
            key = hashlib.sha256(text.encode()).hexdigest()
            groups.setdefault(key, (text, []))[1].append((crate, name))
    if missing:
        sys.exit("third_party_notices: no licence file shipped by: " + ", ".join(missing)
                 + " (write their notices by hand or find the texts)")
    out = ["THIRD-PARTY NOTICES for dcgm-otel",
           "",
           "dcgm-otel is licensed under the Apache License 2.0 (LICENSE). Its binary is built from the following",
           f"{len(packages)} third-party Rust crates (Cargo.lock, Linux x86_64, default features), under the licences",
           "below. Generated by packaging/third_party_notices.py from the crates' own licence files; do not edit.",
           "",
           "Crates and their licence expressions:",
           ""]
    out += [f"  {c}: {e}" for c, e in expressions.items()]
    ordered = sorted(groups.values(), key=lambda g: (g[1][0][0], g[1][0][1]))
    for text, users in ordered:
        out += ["", "=" * 100, ""]
        out += [f"{crate} ({name})" for crate, name in users]
        out += ["", "-" * 100, "", text.rstrip("\n")]
    return "\n".join(out) + "\n"


def main():
    packages = runtime_packages(metadata())
    text = render(packages)
    if sys.argv[1:] == ["--check"]:
        try:
            with open(NOTICES, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            sys.exit(f"third_party_notices: {os.path.relpath(NOTICES, ROOT)} is missing: "
                     f"python3 packaging/third_party_notices.py > packaging/THIRD-PARTY-NOTICES")
        if old != text:
            sys.exit(f"third_party_notices: {os.path.relpath(NOTICES, ROOT)} is stale (Cargo.lock changed): "
                     f"python3 packaging/third_party_notices.py > packaging/THIRD-PARTY-NOTICES")
        print(f"third-party notices: {os.path.relpath(NOTICES, ROOT)} is current: the licence texts of "
              f"{len(packages)} crates")
        return
    if sys.argv[1:]:
        sys.exit(__doc__)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
