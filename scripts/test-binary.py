#!/usr/bin/env python3
"""Prints the path of each named crate's integration-test binary
(`<crate>/tests/it/main.rs`) from `cargo test --no-run --message-format=json`
on stdin, one per line in the order asked; fails naming any not built.

    cargo test --workspace --no-run --message-format=json | scripts/test-binary.py gpu tests
"""
import json
import os
import sys

want = sys.argv[1:]
found = {}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except json.JSONDecodeError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    src = m["target"]["src_path"]
    parts = src.split(os.sep)
    # .../<crate>/tests/it/main.rs
    if parts[-3:] == ["tests", "it", "main.rs"] and parts[-4] in want:
        found[parts[-4]] = m["executable"]
missing = [c for c in want if c not in found]
if missing:
    sys.exit(f"integration-test binaries not built: {missing}")
for c in want:
    print(found[c])
