#!/usr/bin/env python3
"""What NVIDIA's C headers say, as plain text lines the Rust tests compare with (tests/headers/README.md).

Two uses:

  probe.py dcgm --src DCGM_SOURCE --out FILE   DCGM: every DCGM_FI_* id (dcgm_fields.h and the internal
                                               dcgm_fields_internal.hpp), each field's type, entity level,
                                               scope and size as dcgmlib/src/dcgm_fields.cpp registers it,
                                               every prototype of the public headers, the constants.
  probe.py nvml --header nvml.h --out FILE     NVML: every prototype, every struct member's offset, size
                                               and type, every constant (macros and enumerators).

Nothing is copied by hand: the headers are preprocessed by gcc and parsed with pycparser, prototypes are
written with every typedef resolved ("canonical"), and a C program generated from what was parsed is
compiled against the same headers: it asserts (`_Static_assert` + `__builtin_types_compatible_p`) that
each canonical prototype is the header's own, and prints the numbers (macro values, enumerators, the
integer type behind each enum, sizeof/offsetof). For DCGM's field table, NVIDIA's own registration code
(the body of DcgmFieldsPopulateFieldTableWithFormatting in dcgm_fields.cpp, cut out at run time, never
stored) is compiled with tests/headers/field_table_probe.cpp, which records each registration.

Requires gcc, g++ and pycparser (`pip install pycparser`).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

from pycparser import c_ast, c_generator, c_parser

HERE = os.path.dirname(os.path.abspath(__file__))

# GNU spellings pycparser does not know, removed before parsing (they do not change a type).
GNU_AWAY = [
    "-D__attribute__(x)=",
    "-D__attribute(x)=",
    "-D__extension__=",
    "-D__restrict=",
    "-D__restrict__=",
    "-D__inline=",
    "-D__inline__=",
    "-D__asm__(x)=",
    "-D__asm(x)=",
    "-D__builtin_va_list=void*",
    "-D_Noreturn=",
    "-D__signed__=signed",
    "-D_Nullable=",
    "-D_Nonnull=",
]


def run(cmd, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        sys.exit(f"probe.py: {' '.join(cmd)} failed:\n{res.stdout}{res.stderr}")
    return res.stdout


# --------------------------------------------------------------------------------------------------
# Parsing and canonical types
# --------------------------------------------------------------------------------------------------

BASE_NAMES = {
    ("void",): "void",
    ("char",): "char",
    ("signed", "char"): "signed char",
    ("unsigned", "char"): "unsigned char",
    ("short",): "short",
    ("short", "int"): "short",
    ("signed", "short"): "short",
    ("signed", "short", "int"): "short",
    ("unsigned", "short"): "unsigned short",
    ("unsigned", "short", "int"): "unsigned short",
    ("int",): "int",
    ("signed",): "int",
    ("signed", "int"): "int",
    ("unsigned",): "unsigned int",
    ("unsigned", "int"): "unsigned int",
    ("long",): "long",
    ("long", "int"): "long",
    ("signed", "long"): "long",
    ("signed", "long", "int"): "long",
    ("unsigned", "long"): "unsigned long",
    ("unsigned", "long", "int"): "unsigned long",
    ("long", "long"): "long long",
    ("long", "long", "int"): "long long",
    ("signed", "long", "long"): "long long",
    ("signed", "long", "long", "int"): "long long",
    ("unsigned", "long", "long"): "unsigned long long",
    ("unsigned", "long", "long", "int"): "unsigned long long",
    ("float",): "float",
    ("double",): "double",
    ("long", "double"): "long double",
    ("_Bool",): "_Bool",
}


class Headers:
    """One preprocessed translation unit: typedefs, struct/enum definitions, prototypes."""

    def __init__(self, text):
        self.ast = c_parser.CParser().parse(text, "probe")
        self.typedefs = {}  # name -> Typedef node
        self.defining_typedef = {}  # id(struct/union/enum node with a body) -> typedef name
        self.tagged = {}  # ("struct", tag) -> node with a body
        self.protos = []  # (name, FuncDecl, file)
        self.enums = {}  # canonical enum name -> [enumerator names]
        self.structs = {}  # canonical name -> node with members
        for ext in self.ast.ext:
            self._visit(ext)

    def _remember_body(self, node, typedef_name=None):
        kind = type(node).__name__.lower()
        if getattr(node, "decls", None) is None and getattr(node, "values", None) is None:
            return
        if node.name:
            self.tagged[(kind, node.name)] = node
        if typedef_name and id(node) not in self.defining_typedef:
            self.defining_typedef[id(node)] = typedef_name
        name = self.defining_typedef.get(id(node)) or f"{kind} {node.name}"
        if isinstance(node, c_ast.Enum):
            self.enums[name] = [e.name for e in node.values.enumerators]
        elif node.name or typedef_name:
            self.structs[name] = node

    def _visit(self, ext):
        if isinstance(ext, c_ast.Typedef):
            self.typedefs[ext.name] = ext
            inner = ext.type
            while isinstance(inner, (c_ast.PtrDecl, c_ast.ArrayDecl)):
                inner = inner.type
            if isinstance(inner, c_ast.TypeDecl) and isinstance(
                inner.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)
            ):
                direct = isinstance(ext.type, c_ast.TypeDecl)
                self._remember_body(inner.type, ext.name if direct else None)
        elif isinstance(ext, c_ast.Decl):
            if isinstance(ext.type, c_ast.FuncDecl):
                self.protos.append((ext.name, ext.type, ext.coord.file if ext.coord else ""))
            elif isinstance(ext.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
                self._remember_body(ext.type)
            elif isinstance(ext.type, c_ast.TypeDecl) and isinstance(
                ext.type.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)
            ):
                self._remember_body(ext.type.type)

    def aggregate_name(self, node):
        """The canonical name of a struct/union/enum: the typedef that defines it, else `struct TAG`."""
        kind = type(node).__name__.lower()
        body = node
        if getattr(node, "decls", None) is None and getattr(node, "values", None) is None:
            body = self.tagged.get((kind, node.name), node)
        if id(body) in self.defining_typedef:
            return self.defining_typedef[id(body)]
        if body.name:
            return f"{kind} {body.name}"
        raise ValueError(f"anonymous {kind} without a typedef")

    def is_enum(self, name):
        return name in self.enums

    # Canonical spelling: typedefs resolved (scalars to their base type, aggregates to their
    # defining name), arrays in parameters decayed to pointers, top-level qualifiers of a parameter
    # dropped (they are not part of a function type), `const` kept on what a pointer points to.
    def canon(self, node, top=False, member=False):
        if isinstance(node, c_ast.Typename) or isinstance(node, c_ast.Decl):
            return self.canon(node.type, top, member)
        if isinstance(node, c_ast.TypeDecl):
            quals = [] if top else [q for q in node.quals if q == "const"]
            base = self.canon_base(node.type, quals)
            return base
        if isinstance(node, c_ast.ArrayDecl) and not top and member:
            # a struct member keeps its array type: `T[N]`
            dim = c_generator.CGenerator().visit(node.dim) if node.dim is not None else ""
            return f"{self.canon(node.type, member=True)}[{dim}]"
        if isinstance(node, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            inner = node.type
            if isinstance(inner, c_ast.FuncDecl):
                return self.canon_func(inner, "(*)")
            return self.canon(inner) + " *"
        if isinstance(node, c_ast.FuncDecl):
            return self.canon_func(node, "(*)")
        raise ValueError(f"unhandled type node {type(node).__name__}")

    def canon_base(self, t, quals):
        const = "const " if "const" in quals else ""
        if isinstance(t, c_ast.IdentifierType):
            names = tuple(t.names)
            if len(names) == 1 and names[0] in self.typedefs:
                target = self.typedefs[names[0]].type
                resolved = self.canon(target)
                if const and not resolved.endswith("*") and not resolved.startswith("const "):
                    return const + resolved
                if const and resolved.endswith("*"):
                    return resolved + " const"
                return resolved
            key = tuple(n for n in names)
            if key not in BASE_NAMES:
                raise ValueError(f"unknown base type {' '.join(names)}")
            return const + BASE_NAMES[key]
        if isinstance(t, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
            return const + self.aggregate_name(t)
        raise ValueError(f"unhandled base {type(t).__name__}")

    def canon_func(self, fd, declarator):
        ret = self.canon(fd.type)
        params = []
        for p in fd.args.params if fd.args else []:
            if isinstance(p, c_ast.EllipsisParam):
                params.append("...")
                continue
            params.append(self.canon(p, top=True))
        if params == ["void"]:
            params = []
        if declarator:
            return f"{ret} {declarator}({', '.join(params) or 'void'})"
        return ret, params

    def prototype(self, fd):
        ret, params = self.canon_func(fd, None)
        return ret, params


def preprocess(header, includes, lang="c", defines=()):
    cmd = ["gcc", "-E", f"-x{lang}", "-std=gnu11" if lang == "c" else "-std=gnu++17"]
    cmd += [f"-I{d}" for d in includes] + GNU_AWAY + list(defines) + [header]
    return run(cmd)


def macro_names(header, includes, pattern, lang="c", defines=()):
    """Object-like macros whose names match `pattern`, in name order, with the header each is from."""
    cmd = ["gcc", "-E", "-dM", f"-x{lang}"] + [f"-I{d}" for d in includes] + list(defines) + [header]
    names = []
    for line in run(cmd).splitlines():
        m = re.match(r"#define (\w+)(\(?)", line)
        if m and not m.group(2) and re.fullmatch(pattern, m.group(1)):
            names.append(m.group(1))
    return sorted(set(names))


def proto_line(name, ret, params):
    """`proto NAME (P1; P2) -> RET`: parameters separated by `; ` (a function-pointer parameter keeps
    its C spelling, `R (*)(A, B)`, whose commas are not separators)."""
    return f"proto {name} ({'; '.join(params)}) -> {ret}"


def fn_ptr(ret, params):
    return f"{ret} (*)({', '.join(params) or 'void'})"


# --------------------------------------------------------------------------------------------------
# The generated C program: checks the canonical prototypes and prints the numbers
# --------------------------------------------------------------------------------------------------


def check_program(includes_text, protos, enums, value_macros, char_macros, layouts, headers):
    """C source: static asserts for each prototype, then a main() printing the facts."""
    out = [includes_text, "#include <stdio.h>", "#include <stddef.h>", ""]
    for name, ret, params in protos:
        sig = fn_ptr(ret, params)
        out.append(
            f"_Static_assert(__builtin_types_compatible_p(__typeof__(&{name}), {sig}), "
            f'"{name}: the canonical prototype differs from the header");'
        )
    out.append("#define BASE(T) _Generic((T)0, int: \"int\", unsigned int: \"unsigned int\", "
               "long: \"long\", unsigned long: \"unsigned long\", default: \"?\")")
    out.append("int main(void) {")
    for enum_name, enumerators in enums:
        out.append(f'  printf("enumtype %s %s\\n", "{enum_name}", BASE({enum_name}));')
        for e in enumerators:
            out.append(f'  printf("enumval {e} %lld\\n", (long long)({e}));')
    for m in value_macros:
        out.append(f'  printf("define {m} %lld\\n", (long long)({m}));')
    for m in char_macros:
        out.append(f'  printf("definechar {m} %c\\n", (char)({m}));')
    for struct, members in layouts:
        out.append(f'  printf("sizeof {struct} %zu\\n", sizeof({struct}));')
        for m, ctype in members:
            out.append(f'  printf("offsetof {struct}.{m} %zu\\n", offsetof({struct}, {m}));')
            out.append(f'  printf("membersize {struct}.{m} %zu\\n", sizeof((({struct} *)0)->{m}));')
    out.append("  return 0;\n}")
    return "\n".join(out) + "\n"


def compile_and_run(source, includes, workdir, name, cxx=False, extra=()):
    src = os.path.join(workdir, name + (".cpp" if cxx else ".c"))
    exe = os.path.join(workdir, name)
    with open(src, "w") as f:
        f.write(source)
    compiler = ["g++", "-std=gnu++17"] if cxx else ["gcc", "-std=gnu11"]
    run(compiler + ["-w", "-o", exe, src] + [f"-I{d}" for d in includes] + list(extra))
    return run([exe]).splitlines()


def prototype_lines(headers, wanted_files):
    protos = []
    seen = set()
    for name, fd, file in headers.protos:
        if not any(file.endswith(w) for w in wanted_files) or name in seen:
            continue
        seen.add(name)
        ret, params = headers.prototype(fd)
        protos.append((name, ret, params))
    protos.sort()
    return protos


def enums_used(headers, protos):
    """Every enum named in a prototype (directly or through a function-pointer parameter)."""
    used = set()
    for _, ret, params in protos:
        for t in [ret] + params:
            for word in re.findall(r"enum \w+|\b\w+\b", t):
                if headers.is_enum(word):
                    used.add(word)
    return sorted(used)


def struct_members(headers, struct):
    """Top-level named members of a struct (name, canonical type); anonymous members skipped."""
    node = headers.structs[struct]
    members = []
    for d in node.decls or []:
        if d.name is None or d.bitsize is not None:
            continue
        try:
            members.append((d.name, headers.canon(d.type, member=True)))
        except ValueError:
            members.append((d.name, "?"))
    return members


def member_type_lines(headers, structs):
    lines = []
    for s in structs:
        for m, t in struct_members(headers, s):
            lines.append(f"membertype {s}.{m} {t}")
    return lines


def alias_lines(headers):
    """`alias NAME CANONICAL` for every typedef name of a struct, union or enum that is not its
    canonical (defining) name: `typedef struct {...} a_v2_t, a_t;` or `typedef a_v2_t a_t;`."""
    lines = []
    for name in sorted(headers.typedefs):
        try:
            canonical = headers.canon(headers.typedefs[name].type)
        except ValueError:
            continue
        if canonical != name and (canonical in headers.structs or canonical in headers.enums):
            lines.append(f"alias {name} {canonical}")
    return lines


def function_typedef_lines(headers, names):
    lines = []
    for n in names:
        lines.append(f"typedef {n} {headers.canon(headers.typedefs[n].type)}")
    return lines


# --------------------------------------------------------------------------------------------------
# DCGM
# --------------------------------------------------------------------------------------------------


def cut_field_table(cpp_text):
    """NVIDIA's registration code: from `enum UNIT` to the end of
    DcgmFieldsPopulateFieldTableWithFormatting (the units, widths, the registration function, the
    NvLink range helper and the table itself)."""
    start = cpp_text.find("enum UNIT")
    fn = cpp_text.find("static int DcgmFieldsPopulateFieldTableWithFormatting(void)")
    if start < 0 or fn < 0:
        sys.exit("probe.py: dcgm_fields.cpp has no `enum UNIT` or no DcgmFieldsPopulateFieldTableWithFormatting")
    end = cpp_text.find("\n}\n", fn)
    if end < 0:
        sys.exit("probe.py: the end of DcgmFieldsPopulateFieldTableWithFormatting was not found")
    return cpp_text[start : end + 3]


def dcgm(args):
    src = os.path.abspath(args.src)
    lib = os.path.join(src, "dcgmlib")
    nvml = os.path.join(src, "sdk", "nvidia", "nvml")
    for p in [os.path.join(lib, "dcgm_agent.h"), os.path.join(lib, "src", "dcgm_fields.cpp")]:
        if not os.path.exists(p):
            sys.exit(f"probe.py: {p} not found: --src must be the root of NVIDIA's DCGM source")
    includes = [lib]
    headers = Headers(preprocess(os.path.join(lib, "dcgm_agent.h"), includes))
    public = ["dcgm_agent.h", "dcgm_structs.h", "dcgm_fields.h"]
    protos = prototype_lines(headers, public)
    enums = enums_used(headers, protos) + ["dcgm_field_entity_group_t"]
    enums = sorted(set(enums))
    fn_typedefs = sorted(
        n
        for n, td in headers.typedefs.items()
        if isinstance(td.type, c_ast.PtrDecl) and isinstance(td.type.type, c_ast.FuncDecl)
        and td.coord and any(td.coord.file.endswith(h) for h in public)
    )

    field_macros = macro_names(os.path.join(lib, "dcgm_fields.h"), includes, r"DCGM_FI_\w+")
    internal_macros = [
        m
        for m in macro_names(
            os.path.join(lib, "dcgm_fields_internal.hpp"), includes, r"DCGM_FI_\w+", lang="c++"
        )
        if m not in field_macros
    ]
    char_macros = macro_names(os.path.join(lib, "dcgm_fields.h"), includes, r"DCGM_FT_\w+")
    scope_macros = macro_names(os.path.join(lib, "dcgm_fields.h"), includes, r"DCGM_FS_\w+")

    with tempfile.TemporaryDirectory() as work:
        program = check_program(
            '#include "dcgm_agent.h"\n#include "dcgm_structs.h"\n#include "dcgm_fields.h"',
            protos,
            [(e, headers.enums[e]) for e in enums],
            field_macros + scope_macros,
            char_macros,
            [],
            headers,
        )
        facts = compile_and_run(program, includes, work, "dcgm_probe")
        # The internal header is C++ (it includes <vector>): its extra ids are printed by g++.
        internal = "\n".join(
            ['#include "dcgm_fields.h"', '#include "dcgm_fields_internal.hpp"', "#include <cstdio>",
             "int main() {"]
            + [f'  std::printf("internal {m} %lld\\n", (long long)({m}));' for m in internal_macros]
            + ["  return 0;", "}"]
        )
        facts += compile_and_run(internal, includes, work, "dcgm_internal_probe", cxx=True)
        with open(os.path.join(lib, "src", "dcgm_fields.cpp")) as f:
            table = cut_field_table(f.read())
        with open(os.path.join(work, "dcgm_field_table.inc"), "w") as f:
            f.write(table)
        with open(os.path.join(HERE, "field_table_probe.cpp")) as f:
            probe_src = f.read()
        meta = compile_and_run(probe_src, [lib, nvml, work], work, "field_table_probe", cxx=True)

    commit = args.commit or git_commit(src)
    lines = [
        "# DCGM header facts: what NVIDIA's DCGM sources say, for tests/e2e/dcgm_header_facts.rs.",
        f"# source: NVIDIA/DCGM {commit} (dcgmlib/dcgm_agent.h, dcgm_structs.h, dcgm_fields.h,",
        "#   dcgm_fields_internal.hpp; field metadata from dcgmlib/src/dcgm_fields.cpp's",
        "#   DcgmFieldsPopulateFieldTableWithFormatting, compiled and run).",
        f"# made by: tests/headers/regenerate-dcgm.sh (probe.py dcgm), {tool_versions()}, x86_64 Linux.",
        "# line kinds:",
        "#   define NAME N        every object-like DCGM_FI_*/DCGM_FS_* macro of dcgm_fields.h, value as the compiler evaluates it",
        "#   internal NAME N      a DCGM_FI_* macro only dcgm_fields_internal.hpp defines",
        "#   definechar NAME c    DCGM_FT_* (the field type characters)",
        "#   meta ID TYPE LEVEL SCOPE SIZE TAG   one registered field: type char, entity level (DCGM_FE_* value),",
        "#                        scope (DCGM_FS_* value), size, tag",
        "#   metacount registered N   how many fields were registered (the number of meta lines)",
        "#   proto NAME (P1; P2) -> RET   every function the public headers declare, typedefs resolved: scalars",
        "#                        to their C type, structs and enums to their defining typedef name; checked",
        "#                        by the compiler against the headers (__builtin_types_compatible_p)",
        "#   typedef NAME TYPE    a function-pointer typedef of the public headers, canonical",
        "#   enumtype NAME T      the integer type the compiler gives an enum used in a prototype",
        "#   enumval NAME N       the value of each enumerator of those enums",
        "#   alias NAME CANONICAL another typedef name of a struct, union or enum",
    ]
    body = []
    for name, ret, params in protos:
        body.append(proto_line(name, ret, params))
    body += function_typedef_lines(headers, fn_typedefs)
    body += alias_lines(headers)
    body += [l for l in facts]
    body += [l for l in meta]
    out = "\n".join(lines + body) + "\n"
    with open(args.out, "w") as f:
        f.write(out)
    print(f"wrote {args.out}: {len(protos)} prototypes, {sum(1 for l in meta if l.startswith('meta '))} registered fields, "
          f"{len(field_macros)} + {len(internal_macros)} DCGM_FI_* names")


# --------------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------------


def nvml(args):
    header = os.path.abspath(args.header)
    inc = os.path.dirname(header)
    headers = Headers(preprocess(header, [inc]))
    base = os.path.basename(header)
    protos = prototype_lines(headers, [base])
    enums = sorted(headers.enums)
    structs = sorted(
        s for s, node in headers.structs.items()
        if isinstance(node, c_ast.Struct) and node.decls and not s.startswith("struct ")
    )
    unions = sorted(
        s for s, node in headers.structs.items()
        if isinstance(node, c_ast.Union) and node.decls and not s.startswith("union ")
    )
    macros = [
        m for m in macro_names(header, [inc], r"NVML_\w+|nvml\w+|INVALID_\w+")
        if not m.startswith("NVML_API") and m not in headers.typedefs
    ]
    values, skipped = numeric_macros(header, inc, macros)
    layouts = [(s, struct_members(headers, s)) for s in structs + unions]
    with tempfile.TemporaryDirectory() as work:
        program = check_program(
            f'#include "{base}"', protos, [(e, headers.enums[e]) for e in enums], values, [],
            layouts, headers,
        )
        facts = compile_and_run(program, [inc], work, "nvml_probe")
    lines = [
        "# NVML header facts, written at test time by tests/headers/probe.py nvml from " + header,
        f"# {tool_versions()}; line kinds as in tests/fixtures/dcgm/dcgm-header-facts.txt, plus",
        "#   sizeof T N | offsetof T.m N | membersize T.m N | membertype T.m TYPE (canonical)",
    ]
    body = [proto_line(n, r, p) for n, r, p in protos]
    body += alias_lines(headers)
    body += member_type_lines(headers, structs + unions)
    body += facts
    with open(args.out, "w") as f:
        f.write("\n".join(lines + body) + "\n")
    print(f"wrote {args.out}: {len(protos)} prototypes, {len(structs)} structs, {len(values)} macros")


def numeric_macros(header, inc, macros):
    """The macros whose value is an integer constant expression (others — strings, function-like
    uses — are left out): each is tried in one compile, the failures are dropped and it is retried."""
    base = os.path.basename(header)
    candidates = list(macros)
    with tempfile.TemporaryDirectory() as work:
        for _ in range(10):
            src = os.path.join(work, "m.c")
            with open(src, "w") as f:
                f.write(f'#include "{base}"\n')
                for i, m in enumerate(candidates):
                    # an integer (classes 1-4: integer, char, enum, bool), not an address or a string
                    f.write(
                        f"#line {i + 100000}\n_Static_assert(__builtin_classify_type({m}) >= 1 && "
                        f'__builtin_classify_type({m}) <= 4, "{m}");\n'
                    )
            res = subprocess.run(
                ["gcc", "-std=gnu11", "-fsyntax-only", "-w", f"-I{inc}", src],
                capture_output=True, text=True,
            )
            if res.returncode == 0:
                return candidates, sorted(set(macros) - set(candidates))
            bad = {int(n) - 100000 for n in re.findall(r"m\.c:(\d+):", res.stderr) if int(n) >= 100000}
            if not bad:
                sys.exit(f"probe.py: cannot evaluate NVML macros:\n{res.stderr[:2000]}")
            candidates = [m for i, m in enumerate(candidates) if i not in bad]
    sys.exit("probe.py: NVML macros still failing after 10 rounds")


# --------------------------------------------------------------------------------------------------


def git_commit(path):
    res = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 else "(commit unknown: pass --commit)"


def tool_versions():
    gcc = run(["gcc", "-dumpfullversion"]).strip()
    import pycparser

    return f"gcc {gcc}, pycparser {pycparser.__version__}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    d = sub.add_parser("dcgm")
    d.add_argument("--src", required=True, help="root of NVIDIA's DCGM source (has dcgmlib/)")
    d.add_argument("--commit", help="the DCGM commit, when --src is not a git checkout")
    d.add_argument("--out", required=True)
    n = sub.add_parser("nvml")
    n.add_argument("--header", required=True, help="path to nvml.h")
    n.add_argument("--out", required=True)
    args = ap.parse_args()
    {"dcgm": dcgm, "nvml": nvml}[args.what](args)


if __name__ == "__main__":
    main()
