#!/usr/bin/env python3
"""The file-level import graph of the crate (src/) and of its kernels crate (kernels/src/).

Every `use` and every `crate::` / `super::` path in a file's code is an edge to the file that
defines what it names (a `pub use` re-export is followed to its origin; `mod` declarations and
`pub use` lines themselves are not edges). Then:

- every import cycle between files is reported;
- every edge from a lower layer to a higher one (ARCHITECTURE.md's
  spec -> backend -> conv_routing -> cpu | cube -> autodiff -> functional -> nn), and every
  edge between the sibling layers cpu and cube, is reported;
- every file over the line limit is reported.

Exits 1 when anything is reported. Usage, from the repository root:

    python3 scripts/import_graph.py [--max-lines 700] [--dot graph.dot]
"""
import argparse
import os
import re
import sys

LAYERS = {"spec": 0, "backend": 1, "conv_routing": 2, "cpu": 3, "cube": 3, "autodiff": 4,
          "functional": 5, "nn": 6, "lib": 7}
SIBLINGS = {frozenset(("cpu", "cube"))}


def module_files(root):
    """Module path (tuple) -> file, for every .rs file under `root` (`lib.rs` is the root)."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            files[tuple(parts)] = path
    return files


def strip_comments(text):
    """The code of a file without comments. An inline `mod x { .. }` (unit tests) is cut out
    and appended with its `super::` read as `self::`: it imports for the file it sits in."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = "\n".join(line.split("//")[0] for line in text.splitlines())
    inline = []
    while (found := re.search(r"\bmod\s+\w+\s*\{", text)) is not None:
        depth, end = 0, len(text)
        for i in range(found.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                end = i + 1
                break
        inline.append(text[found.end():end - 1].replace("super::", "self::"))
        text = text[:found.start()] + text[end:]
    return "\n".join([text] + inline)


def use_trees(text):
    """The `use` statements of `text` (without `pub use`), flattened to paths."""
    paths = []
    for public, tree in re.findall(r"(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        if public:
            continue
        paths.extend(expand(normalise(tree)))
    return paths


def normalise(tree):
    """A use tree without whitespace, `a as b` kept apart as `a@as@b`."""
    return re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@as@", tree))


def expand(tree):
    """`a::{b, c::{d}}` -> [a::b, a::c::d]."""
    brace = tree.find("{")
    if brace < 0:
        return [tree.split("@as@")[0]]
    prefix, inner = tree[:brace], tree[brace + 1:tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in parts:
        if part:
            out.extend(expand(prefix + part))
    return out


def resolve(path, here, files, reexports):
    """The file `path` (as written in module `here`) names, or None outside the crate."""
    segments = [s for s in path.split("::") if s]
    if not segments:
        return None
    if segments[0] == "crate":
        base, segments = (), segments[1:]
    elif segments[0] in ("super", "self"):
        base = here
        while segments and segments[0] in ("super", "self"):
            if segments[0] == "super":
                base = base[:-1]
            segments = segments[1:]
    elif here + (segments[0],) in files:
        # A path from one of this module's own submodules (`pub use conv::*`).
        base = here
    else:
        return None
    # The longest module prefix that is a file; the rest names items in it.
    module = base
    for segment in segments:
        if module + (segment,) in files:
            module = module + (segment,)
        else:
            return origin_of(module, segment, files, reexports) or files.get(module)
    return files.get(module)


GLOBS = {}
DEFINITION = r"\b(?:fn|struct|enum|trait|type|const|static|mod)\s+{}\b|macro_rules!\s*{}\b"


def origin_of(module, name, files, reexports, depth=0):
    """The file that defines `name`, as module `module` exports it: a named re-export, a
    definition in the module's own file, or (through `pub use x::*`) one of the globbed
    modules; None when none of those says."""
    origin = reexports.get((module, name))
    if origin is not None:
        return origin
    path = files.get(module)
    if path and re.search(DEFINITION.format(re.escape(name), re.escape(name)),
                          strip_comments(open(path).read())):
        return path
    if depth > 8:
        return None
    globbed = GLOBS.get(module, [])
    for target in globbed:
        found = origin_of(target, name, files, reexports, depth + 1)
        if found:
            return found
    # Made by a macro somewhere under the globs: the re-exporting module's own file.
    return files.get(module) if globbed else None


def reexport_table(files):
    """(module, name) -> the file a `pub use` in that module takes `name` from; the modules
    each module re-exports whole (`pub use x::*`) go to `GLOBS`."""
    table = {}
    for module, path in files.items():
        text = strip_comments(open(path).read())
        for tree in re.findall(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for item in expand(normalise(tree)):
                if item.endswith("::*"):
                    target = resolve(item[:-3], module, files, {})
                    for key, value in files.items():
                        if value == target:
                            GLOBS.setdefault(module, []).append(key)
    for module, path in files.items():
        text = strip_comments(open(path).read())
        for tree in re.findall(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for renamed in re.findall(r"[^,{}]+@as@[A-Za-z_0-9]+", normalise(tree)):
                item, name = renamed.split("@as@")
                origin = resolve(item, module, files, {})
                if origin is not None and origin != path:
                    table[(module, name)] = origin
            for item in expand(normalise(tree)):
                name = item.split("::")[-1]
                if name in ("*", "self"):
                    continue
                origin = resolve(item, module, files, {})
                if origin is not None and origin != path:
                    table[(module, name)] = origin
    return table


def graph(root):
    files = module_files(root)
    reexports = reexport_table(files)
    edges = {}
    for module, path in files.items():
        text = strip_comments(open(path).read())
        targets = set()
        for item in use_trees(text):
            targets.add(resolve(item, module, files, reexports))
        for item in re.findall(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
            targets.add(resolve(item, module, files, reexports))
        # A file's own re-export table is not an edge to itself.
        edges[path] = sorted(t for t in targets if t and t != path)
    return files, edges


def cycles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def layer(path, root):
    first = os.path.relpath(path, root).split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-lines", type=int, default=700)
    ap.add_argument("--dot", help="write the graph of src/ in Graphviz format")
    a = ap.parse_args()
    problems = []
    for root in ("src", "kernels/src"):
        files, edges = graph(root)
        for component in cycles(edges):
            problems.append("cycle: " + " <-> ".join(component))
        if root == "src":
            for source, targets in edges.items():
                for target in targets:
                    low, high = layer(source, root), layer(target, root)
                    if LAYERS.get(high, 0) > LAYERS.get(low, 0) and low != "lib":
                        problems.append(f"upward: {source} -> {target}")
                    if frozenset((low, high)) in SIBLINGS:
                        problems.append(f"sideways: {source} -> {target}")
            if a.dot:
                with open(a.dot, "w") as f:
                    f.write("digraph imports {\n")
                    for source, targets in sorted(edges.items()):
                        for target in targets:
                            f.write(f'  "{source}" -> "{target}";\n')
                    f.write("}\n")
        for path in files.values():
            lines = sum(1 for _ in open(path))
            if lines > a.max_lines:
                problems.append(f"long: {path} has {lines} lines (limit {a.max_lines})")
        count = sum(len(t) for t in edges.values())
        print(f"{root}: {len(files)} files, {count} import edges", file=sys.stderr)
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
