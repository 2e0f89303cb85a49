#!/usr/bin/env python3
"""Fails when the top-level modules of a crate depend on each other in a
cycle (a uses b, b uses a, directly or through others).

Per crate under crates/*/src: every file belongs to the top-level module
that holds it (src/foo.rs and src/foo/** are `foo`); a reference
`crate::foo`, or `super::foo` that climbs to the crate root, is an edge to
`foo`; names the crate root re-exports (`pub use foo::Bar;`) count as `foo`.
Inline `#[cfg(test)]` blocks count too: a test is code that must build.
Prints each cycle found; exit 1 if any but the ones KNOWN lists (issue 18
item 3, left to break: each is named, so that a new cycle, or a known one
growing, fails). Usage: scripts/check-module-cycles.py [REPO]"""
import pathlib
import re
import sys

USE_RE = re.compile(r"\bcrate::(\{[^;]*?\}|\w+)", re.S)
SUPER_RE = re.compile(r"\b((?:super::)+)(\{[^;]*?\}|\w+)", re.S)
PUB_USE_RE = re.compile(r"^\s*pub use (?:self::|crate::)?(\w+)::(\{[^;]*\}|[\w:]+)\s*;", re.M | re.S)


# Cycles not broken yet (issue 18 item 3): crate -> the modules in it.
KNOWN: set = set()


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def top_names(group):
    """`{a, b::c, d::{e}}` -> [a, b, d]; `a` -> [a]."""
    if not group.startswith("{"):
        return [group]
    inner = group[1:-1]
    depth, cur, out = 0, "", []
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [re.split(r"::|\s", n.strip())[0] for n in out if n.strip()]


def crate_graph(src):
    roots = [p for p in (src / "lib.rs", src / "main.rs") if p.exists()]
    modules = set()
    for p in src.iterdir():
        if p.suffix == ".rs" and p.stem not in ("lib", "main"):
            modules.add(p.stem)
        elif p.is_dir():
            modules.add(p.name)
    reexport = {}
    for r in roots:
        for m in PUB_USE_RE.finditer(strip_comments(r.read_text())):
            if m.group(1) in modules:
                for n in top_names(m.group(2)):
                    n = n.split("::")[-1]
                    reexport.setdefault(n, m.group(1))
    edges = {m: set() for m in modules}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).parts
        if rel[0] in ("lib.rs", "main.rs"):
            continue
        mod = rel[0][:-3] if rel[0].endswith(".rs") else rel[0]
        # Directory depth of the file's own module: src/a.rs and
        # src/a/mod.rs are a (depth 1), src/a/b.rs is a::b (depth 2).
        depth = len(rel) - (1 if rel[-1] == "mod.rs" else 0)
        text = strip_comments(f.read_text())
        targets = []
        for m in USE_RE.finditer(text):
            targets += top_names(m.group(1))
        for m in SUPER_RE.finditer(text):
            if m.group(1).count("super::") >= depth:
                targets += top_names(m.group(2))
        for t in targets:
            t = reexport.get(t, t)
            if t in modules and t != mod:
                edges[mod].add(t)
    return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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


def main():
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    bad = 0
    for src in sorted(repo.glob("crates/*/src")):
        edges = crate_graph(src)
        for comp in cycles(edges):
            if (src.parent.name, tuple(comp)) in KNOWN:
                print(f"{src.parent.name}: known cycle {' <-> '.join(comp)} (issue 18, to break)")
                continue
            bad += 1
            inner = {m: sorted(edges[m] & set(comp)) for m in comp}
            print(f"{src.parent.name}: module cycle {' <-> '.join(comp)}: "
                  + "; ".join(f"{m} uses {', '.join(d)}" for m, d in inner.items()))
    if bad:
        print(f"{bad} module cycle(s)")
        return 1
    print("no new module cycle inside a crate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
