#!/usr/bin/env python3
"""Production lines of a Rust src tree: no test files (tests/ folders, tests.rs, tests_*.rs, *_tests.rs) or #[cfg(test)] items, no comments, no blank lines.

Usage: python3 scripts/prodlines.py src
"""
import os, re, sys
def count_file(text):
    n = 0; skip_depth = None; pending_cfg = False; depth = 0; in_block = False
    for raw in text.splitlines():
        line = raw.strip()
        if in_block:
            if '*/' in line: in_block = False
            continue
        if line.startswith('/*'):
            if '*/' not in line: in_block = True
            continue
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        opens = code.count('{'); closes = code.count('}')
        if skip_depth is not None:
            depth += opens - closes
            if depth <= skip_depth: skip_depth = None
            continue
        if line.startswith('#[cfg(test)]'):
            pending_cfg = True; continue
        if pending_cfg:
            if line.startswith('#[') or not line or line.startswith('//'): continue
            pending_cfg = False
            if opens > closes:
                skip_depth = depth; depth += opens - closes; continue
            if line.endswith(';'): continue
        if not line or line.startswith('//'): 
            continue
        depth += opens - closes
        n += 1
    return n
root = sys.argv[1]; total = 0
for d, _, fs in os.walk(root):
    parts = d.split(os.sep)
    if 'tests' in parts: continue
    for f in fs:
        if not f.endswith('.rs') or f == 'tests.rs' or f.startswith('tests_') or f.endswith('_tests.rs'): continue
        total += count_file(open(os.path.join(d, f), encoding='utf-8').read())
print(total)
