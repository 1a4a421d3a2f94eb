#!/usr/bin/env python3
"""Import circles between the modules of each crate under crates/.

For every crate target (the library at src/lib.rs, the binaries at src/main.rs and
src/bin/*.rs) this builds the graph of module-to-module edges and reports every import circle:
a strongly connected component of two or more modules. It exits 1 when there is one, listing
each circle with the source lines that make its edges, and 0 otherwise. It needs Python 3's
standard library and nothing else.

What is a module: a file. `src/a.rs` and `src/a/mod.rs` are module `a`, `src/sys/dm.rs` is
`sys::dm`, the crate root (`lib.rs`, `main.rs`) is `crate`. An inline `mod x { .. }` belongs to
the file it is written in. Modules are found by following `mod x;` declarations from the root.

What is an edge: module A names module B in a path, anywhere in A's file: a `use` declaration
(at the top or inside a function body, nested groups `use crate::{a, b::{c, self}}` included) or a
path in code (`crate::a::f()`, `super::X`, `self::x::Y`, and `x::f()` where `x` is a child module
or a name a `use` bound to a module). A parent naming its child is an edge like any other, so a
child that imports from its parent and a parent that imports from the child form a circle; the
`mod x;` declaration alone is not an edge. A path to an item that a module only re-exports
(`pub use`, or any `use` the path reaches through) is followed to the module that defines the
item, so `crate::Error` re-exported by lib.rs from `error.rs` is an edge to `error`, not to the
root; a path to an item from another crate is no edge.

What is left out: test code. Modules named `tests`, any module or item under `#[cfg(test)]`
(`mod tests { .. }` at the bottom of a file, `tests.rs`, `tests/mod.rs` and their children,
`#[cfg(test)] mod testutil;`), and the integration tests, benches and examples (tests/,
benches/, examples/: separate crates that only see the library's public API). Comments, doc
links and string literals are not code. Macros are not expanded: a path inside `macro_rules!`
counts for the module that defines the macro.

Usage: scripts/import-cycles.py [--edges] [CRATES_DIR]
  CRATES_DIR  the folder of crates (default: crates/ in the repository this script is in)
  --edges     also list every edge of every crate, with the lines that make it
"""

import os
import re
import sys
from collections import defaultdict

# ---------------------------------------------------------------------------------------------
# Tokens

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<raw_str>b?r(?P<hashes>\#*)")
  | (?P<str>b?")
  | (?P<char>b?'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])')
  | (?P<lifetime>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>(?:r\#)?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9A-Za-z_]*)?)
  | (?P<path_sep>::)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text):
    """Yields (kind, value, line) for the code tokens of a Rust file; drops comments, strings."""
    pos, line, n = 0, 1, len(text)
    while pos < n:
        m = TOKEN.match(text, pos)
        kind = m.lastgroup if m.lastgroup != "hashes" else "raw_str"
        if m.group("raw_str") is not None:
            kind = "raw_str"
        start = pos
        if kind == "block_comment":
            depth, pos = 1, m.end()
            while depth and pos < n:
                if text.startswith("/*", pos):
                    depth, pos = depth + 1, pos + 2
                elif text.startswith("*/", pos):
                    depth, pos = depth - 1, pos + 2
                else:
                    pos += 1
        elif kind == "raw_str":
            end = text.find('"' + m.group("hashes"), m.end())
            pos = n if end < 0 else end + 1 + len(m.group("hashes"))
            yield ("lit", "", line)
        elif kind == "str":
            pos = m.end()
            while pos < n and text[pos] != '"':
                pos += 2 if text[pos] == "\\" else 1
            pos += 1
            yield ("lit", "", line)
        else:
            pos = m.end()
            if kind in ("ident", "path_sep", "punct"):
                value = m.group(0)
                if kind == "ident" and value.startswith("r#"):
                    value = value[2:]
                yield (kind, value, line)
            elif kind in ("char", "number", "lifetime"):
                yield ("lit", "", line)
        line += text.count("\n", start, pos)


# ---------------------------------------------------------------------------------------------
# One file: its child modules, its `use`s, its paths, the items it defines

ITEM_KEYWORDS = {"fn", "struct", "enum", "union", "trait", "type", "const", "static"}
PATH_ROOTS = {"crate", "super", "self"}


class FileScan:
    """What one file module declares and names."""

    def __init__(self):
        self.children = []  # (name, inline_prefix) for `mod x;`
        self.exports = {}  # name -> path (segments, relative to this file) of a top-level use
        self.globs = []  # paths of top-level `use x::*`
        self.defined = set()  # names of items defined at the top level
        self.paths = []  # (segments, line, is_use) every path the file names in code
        self.aliases = {}  # name -> path for every `use` anywhere in the file (for `x::f()` paths)


def is_test_cfg(attr_tokens):
    """True for `#[cfg(test)]`, `#[cfg(all(test, ..))]`, `#[cfg(any(test, ..))]`."""
    values = [t[1] for t in attr_tokens]
    return values[:1] == ["cfg"] and "test" in values and "not" not in values


def parse_use_tree(toks, i, prefix, out):
    """Parses a use tree at toks[i]; appends (path, bound_name or None for glob, line).

    Returns the index after the tree."""
    path = list(prefix)
    line = toks[i][2] if i < len(toks) else 0
    if i < len(toks) and toks[i][0] == "path_sep":  # `use ::std::..`
        i += 1
    while i < len(toks):
        kind, value, line = toks[i]
        if kind == "ident":
            path.append(value)
            i += 1
            if i < len(toks) and toks[i][0] == "path_sep":
                i += 1
                continue
            name = value
            if i + 1 < len(toks) and toks[i][1] == "as":
                name = toks[i + 1][1]
                i += 2
            if path[-1] == "self":  # `a::{self}` binds `a`
                path = path[:-1]
                name = name if name != "self" else (path[-1] if path else None)
            if name is not None and name != "_":
                out.append((path, name, line))
            else:
                out.append((path, "", line))
            return i
        if value == "*":
            out.append((path, None, line))
            return i + 1
        if value == "{":
            i += 1
            while i < len(toks) and toks[i][1] != "}":
                if toks[i][1] == ",":
                    i += 1
                    continue
                i = parse_use_tree(toks, i, path, out)
            return i + 1
        return i + 1
    return i


def closing(toks, i):
    """Index of the bracket that closes the one at toks[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opening, depth = toks[i][1], 0
    while i < len(toks):
        if toks[i][0] == "punct" and toks[i][1] == opening:
            depth += 1
        elif toks[i][0] == "punct" and toks[i][1] == pairs[opening]:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return i


def in_file(path, inline):
    """A `self::`/`super::` path written inside inline modules `inline`, made file-relative."""
    if not inline or path[:1] not in (["self"], ["super"]):
        return list(path)
    base, rest, up = list(inline), list(path), 0
    while rest and rest[0] in ("self", "super"):
        if rest.pop(0) == "super":
            if base:
                base.pop()
            else:
                up += 1
    return (["super"] * up if up else ["self"]) + base + rest


def skip_item(toks, i):
    """Index after the item starting at toks[i] (ends at `;` or a closing `}` at depth 0)."""
    depth = 0
    while i < len(toks):
        value = toks[i][1] if toks[i][0] == "punct" else None
        if value in ("(", "["):
            depth += 1
        elif value in (")", "]"):
            depth -= 1
        elif value == ";" and depth == 0:
            return i + 1
        elif value == "{" and depth == 0:
            return closing(toks, i) + 1
        i += 1
    return i


def scan_file(text):
    toks = list(tokenize(text))
    scan = FileScan()
    # Drop test code: every item under a #[cfg(test)] attribute, and modules named `tests`.
    kept, i = [], 0
    while i < len(toks):
        kind, value = toks[i][0], toks[i][1]
        if value == "#" and i + 1 < len(toks) and toks[i + 1][1] in ("[", "!"):
            j = i + 1 + (toks[i + 1][1] == "!")
            end = closing(toks, j)
            if toks[i + 1][1] == "[" and is_test_cfg(toks[j + 1 : end]):
                k = end + 1
                while k + 1 < len(toks) and toks[k][1] == "#" and toks[k + 1][1] == "[":
                    k = closing(toks, k + 1) + 1  # further attributes of the same item
                i = skip_item(toks, k)
                continue
            kept.extend(toks[i : end + 1])
            i = end + 1
            continue
        if kind == "ident" and value == "mod" and i + 1 < len(toks) and toks[i + 1][1] == "tests":
            i = skip_item(toks, i)
            continue
        kept.append(toks[i])
        i += 1
    toks = kept

    # Walk the tokens with a stack of blocks: inline modules, and everything else (fn bodies..).
    stack = []  # ("mod", name) or ("block", None), one per open `{`
    pending_mod = None
    i = 0
    prev = None
    while i < len(toks):
        kind, value, line = toks[i]
        inline = [name for (k, name) in stack if k == "mod"]
        top_level = not stack
        if kind == "punct" and value == "{":
            stack.append(("mod", pending_mod) if pending_mod else ("block", None))
            pending_mod = None
            prev = toks[i]
            i += 1
            continue
        if kind == "punct" and value == "}":
            if stack:
                stack.pop()
            prev = toks[i]
            i += 1
            continue
        if kind == "ident" and value == "mod" and i + 1 < len(toks) and toks[i + 1][0] == "ident":
            name = toks[i + 1][1]
            if i + 2 < len(toks) and toks[i + 2][1] == ";":
                if all(k == "mod" for (k, _) in stack):
                    scan.children.append((name, inline))
                i += 3
                continue
            if top_level:
                scan.defined.add(name)
            pending_mod = name
            i += 2
            continue
        if kind == "ident" and value == "use" and (prev is None or prev[1] != "::"):
            uses = []
            j = parse_use_tree(toks, i + 1, [], uses)
            for path, name, uline in uses:
                rel = in_file(path, inline)
                scan.paths.append((rel, uline, True))
                if name:
                    scan.aliases.setdefault(name, rel)
                if top_level:
                    if name:
                        scan.exports[name] = rel
                    elif name is None:
                        scan.globs.append(rel)
            while j < len(toks) and toks[j][1] != ";":
                j += 1
            prev = toks[j] if j < len(toks) else None
            i = j + 1
            continue
        if top_level and kind == "ident" and value in ITEM_KEYWORDS and i + 1 < len(toks):
            if toks[i + 1][0] == "ident":
                scan.defined.add(toks[i + 1][1])
        if top_level and kind == "ident" and value == "macro_rules" and i + 2 < len(toks):
            scan.defined.add(toks[i + 2][1])
        # A path in code: IDENT (:: IDENT)+, not itself the tail of a longer path.
        if (
            kind == "ident"
            and i + 2 < len(toks)
            and toks[i + 1][0] == "path_sep"
            and toks[i + 2][0] == "ident"
            and not (prev is not None and prev[0] == "path_sep")
        ):
            path = [value]
            if prev is not None and prev[1] == "$" and value == "crate":
                path = ["crate"]
            j = i + 1
            while j + 1 < len(toks) and toks[j][0] == "path_sep" and toks[j + 1][0] == "ident":
                path.append(toks[j + 1][1])
                j += 2
            path = in_file(path, inline)
            scan.paths.append((path, line, False))
            prev = toks[j - 1]
            i = j
            continue
        prev = toks[i]
        i += 1
    return scan


# ---------------------------------------------------------------------------------------------
# One crate: its module tree and the edges between modules


class Crate:
    def __init__(self, package, target, root_file):
        self.name = f"{package} ({target})"
        self.modules = {}  # tuple path -> (file, FileScan)
        self.edges = defaultdict(list)  # (from, to) -> [(file, line)]
        self._load((), root_file, mod_rs=True)
        for module in self.modules:
            self._edges_of(module)

    def _load(self, path, file, mod_rs):
        with open(file, encoding="utf-8") as f:
            scan = scan_file(f.read())
        self.modules[path] = (file, scan)
        base = os.path.dirname(file)
        if not mod_rs:
            base = os.path.join(base, os.path.splitext(os.path.basename(file))[0])
        for name, inline in scan.children:
            folder = os.path.join(base, *inline)
            for candidate, is_mod_rs in (
                (os.path.join(folder, name + ".rs"), False),
                (os.path.join(folder, name, "mod.rs"), True),
            ):
                if os.path.exists(candidate):
                    self._load(path + tuple(inline) + (name,), candidate, is_mod_rs)
                    break
            else:
                raise SystemExit(f"{file}: mod {name}: no file {folder}/{name}.rs or {name}/mod.rs")

    def file_module(self, path):
        """The file module that holds module path `path` (an inline module belongs to its file)."""
        while path not in self.modules:
            path = path[:-1]
        return path

    def absolute(self, module, segments, depth=0):
        """Segments of a path named in `module`, made absolute (from the crate root), or None."""
        if not segments or depth > 16:
            return None
        first = segments[0]
        if first == "crate":
            return list(segments[1:])
        if first in ("self", "super"):
            base = list(module)
            rest = list(segments)
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    if not base:
                        return None
                    base.pop()
                rest.pop(0)
            return base + rest
        scan = self.modules[module][1]
        if any(name == first for name, inline in scan.children if not inline):
            return list(module) + list(segments)
        if first in scan.aliases:
            target = self.absolute(module, scan.aliases[first], depth + 1)
            return None if target is None else target + list(segments[1:])
        return None  # another crate, std, or a local item

    def resolve(self, segments, depth=0):
        """The file module that defines what the absolute path `segments` names, or None."""
        if segments is None or depth > 16:
            return None
        module = ()
        for k, seg in enumerate(segments):
            child = module + (seg,)
            if child in self.modules or any(m[: len(child)] == child for m in self.modules):
                module = child
                continue
            owner = self.file_module(module)
            scan = self.modules[owner][1]
            if seg in scan.defined:
                return owner
            if seg in scan.exports:
                target = self.absolute(owner, scan.exports[seg])
                if target is None:
                    return None  # re-exported from another crate
                return self.resolve(target + list(segments[k + 1 :]), depth + 1)
            for glob in scan.globs:
                source = self.absolute(owner, glob)
                if source is not None:
                    found = self.resolve(source + [seg], depth + 1)
                    if found is not None and found != self.file_module(tuple(source)):
                        return found
            return owner
        return self.file_module(module)

    def _edges_of(self, module):
        file, scan = self.modules[module]
        for segments, line, _is_use in scan.paths:
            target = self.resolve(self.absolute(module, segments))
            sites = self.edges[(module, target)] if target not in (None, module) else None
            if sites is not None and (file, line) not in sites:
                sites.append((file, line))

    def circles(self):
        """Strongly connected components of two or more modules (Tarjan's algorithm)."""
        graph = defaultdict(set)
        for a, b in self.edges:
            graph[a].add(b)
        index, low, on_stack, stack, out = {}, {}, set(), [], []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on_stack.add(v)
            for w in sorted(graph[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))

        for v in sorted(self.modules):
            if v not in index:
                visit(v)
        return sorted(out)


def module_name(path):
    return "::".join(path) if path else "crate"


def crate_roots(package_dir):
    src = os.path.join(package_dir, "src")
    roots = []
    if os.path.exists(os.path.join(src, "lib.rs")):
        roots.append(("lib", os.path.join(src, "lib.rs")))
    if os.path.exists(os.path.join(src, "main.rs")):
        roots.append(("bin", os.path.join(src, "main.rs")))
    bin_dir = os.path.join(src, "bin")
    if os.path.isdir(bin_dir):
        for entry in sorted(os.listdir(bin_dir)):
            full = os.path.join(bin_dir, entry)
            if entry.endswith(".rs"):
                roots.append((f"bin {entry[:-3]}", full))
            elif os.path.exists(os.path.join(full, "main.rs")):
                roots.append((f"bin {entry}", os.path.join(full, "main.rs")))
    return roots


def sites_text(sites, root):
    where = ", ".join(f"{os.path.relpath(f, root)}:{line}" for f, line in sites[:3])
    return where + (f" (+{len(sites) - 3} more)" if len(sites) > 3 else "")


def main(argv):
    args = argv[1:]
    show_edges = "--edges" in args
    args = [a for a in args if a != "--edges"]
    if any(a.startswith("-") for a in args) or len(args) > 1:
        print(__doc__.strip().split("Usage: ")[1], file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    crates_dir = os.path.normpath(args[0] if args else os.path.join(here, "..", "crates"))
    root = os.path.dirname(crates_dir)
    found = []
    for package in sorted(os.listdir(crates_dir)):
        package_dir = os.path.join(crates_dir, package)
        for target, crate_root in crate_roots(package_dir):
            crate = Crate(package, target, crate_root)
            circles = crate.circles()
            found.extend((crate, c) for c in circles)
            print(
                f"{crate.name:<30} {len(crate.modules):3} modules {len(crate.edges):4} edges"
                f"  {len(circles)} circle{'s' if len(circles) != 1 else ''}"
            )
            if show_edges:
                for (a, b), sites in sorted(crate.edges.items()):
                    print(f"    {module_name(a)} -> {module_name(b)}: {sites_text(sites, root)}")
    if not found:
        print("no import circles")
        return 0
    print(f"\n{len(found)} import circle{'s' if len(found) != 1 else ''}:")
    for crate, component in found:
        print(f"\n{crate.name}: " + " <-> ".join(module_name(m) for m in component))
        members = set(component)
        for (a, b), sites in sorted(crate.edges.items()):
            if a in members and b in members:
                print(f"  {module_name(a)} -> {module_name(b)}: {sites_text(sites, root)}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
