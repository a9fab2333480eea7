#!/usr/bin/env python3
"""Every `unsafe` block of the crate says why it is sound, where it is (docs/developing.md, issue 35).

The files that allow `unsafe` (`#![allow(unsafe_code)]`: the DCGM and NVML FFI modules, systemd.rs) are
read; each `unsafe {` must have a `// SAFETY:` comment in the comment lines right above its statement.
And no macro may run a call through its parameters inside one `unsafe` block (`unsafe { f($($arg),*) }`):
such a macro puts every call site of the library behind one SAFETY comment that cannot speak for any of
them (nvml/ffi.rs's `optional_call!` did, for 35 NVML calls). Usage: python3 tests/structure/unsafe_blocks.py
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CALL_THROUGH_MACRO = re.compile(r"unsafe\s*\{\s*[A-Za-z_][\w.]*\s*\(\s*\$")

fail = []
files = 0
blocks = 0
# src/ and the C ABI crate (capi/src/ffi.rs, issue 36).
for path in sorted([*(ROOT / "src").rglob("*.rs"), *(ROOT / "capi" / "src").rglob("*.rs")]):
    text = path.read_text()
    if "#![allow(unsafe_code)]" not in text:
        continue
    files += 1
    rel = path.relative_to(ROOT)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        code = line.split("//", 1)[0]
        if not re.search(r"\bunsafe\s*\{", code):
            continue
        blocks += 1
        # Walk up over the comment lines directly above this line.
        j, found = i - 1, False
        while j >= 0:
            above = lines[j].strip()
            if above.startswith("//"):
                if above.startswith("// SAFETY") or "SAFETY:" in above:
                    found = True
                    break
                j -= 1
                continue
            break
        if not found:
            fail.append(f"{rel}:{i + 1}: unsafe block without a // SAFETY: comment right above it")
    # Macros that call through their parameters inside one unsafe block.
    for m in re.finditer(r"macro_rules!\s*(\w+)\s*\{", text):
        depth, k = 1, m.end()
        while depth and k < len(text):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        body = text[m.end():k]
        if CALL_THROUGH_MACRO.search(body):
            line = text[:m.start()].count("\n") + 1
            fail.append(f"{rel}:{line}: macro {m.group(1)}! runs calls through its parameters inside one "
                        f"unsafe block: write `unsafe` at each call site, with its own // SAFETY: comment")

if fail:
    print("\n".join("FAIL: " + f for f in fail), file=sys.stderr)
    sys.exit(1)
print(f"unsafe blocks: {blocks} in {files} files, each with its own // SAFETY: comment; no macro calls "
      f"through its parameters inside unsafe")
