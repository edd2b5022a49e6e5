#!/usr/bin/env python3
"""Fails when a relative link in the Markdown docs names a missing file or heading.

Checks README.md, SECURITY.md, BENCHMARKS.md and docs/**/*.md; anchors follow
GitHub's heading slugs. Run from the repository root: python3 scripts/check-doc-links.py
"""
import pathlib, re, sys

LINK = re.compile(r'\]\(([^)\s]+)\)')
FENCE = re.compile(r'^(```|~~~)')

def slugs(path, cache={}):
    if path not in cache:
        seen, out, fenced = {}, set(), False
        for line in path.read_text().splitlines():
            if FENCE.match(line):
                fenced = not fenced
            if fenced or not line.startswith('#'):
                continue
            s = re.sub(r'[^\w\- ]', '', line.lstrip('#').strip().lower()).replace(' ', '-')
            n = seen.get(s, 0); seen[s] = n + 1
            out.add(s if n == 0 else f'{s}-{n}')
        cache[path] = out
    return cache[path]

bad = 0
files = [pathlib.Path(p) for p in ('README.md', 'SECURITY.md', 'BENCHMARKS.md')]
for md in files + sorted(pathlib.Path('docs').rglob('*.md')):
    text = re.sub(r'```.*?```', '', md.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r'[a-z]+:', target):
            continue
        file, _, anchor = target.partition('#')
        dest = (md.parent / file).resolve() if file else md.resolve()
        if not dest.exists():
            print(f'{md}: {target}: no such file'); bad += 1
        elif anchor and dest.suffix == '.md' and anchor not in slugs(dest):
            print(f'{md}: {target}: no such heading'); bad += 1
sys.exit(1 if bad else 0)
