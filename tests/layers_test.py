#!/usr/bin/env python3
"""The project's folders as layers that only look down: every #include of
ours in common/, client/, server/ and bench/ names a file of its own folder
or of a lower layer. Fails listing each include that runs back up (or
sideways, between folders of one rank), then checks itself on a copy with
one upward include planted.

  tests/layers_test.py SOURCE_DIR
"""
import os
import re
import shutil
import sys
import tempfile

# Lowest first. A folder may include its own files and those of any folder
# of a lower rank; folders of one rank are siblings and include neither
# other. The tokenizer reads only file formats, so it sits under the model,
# which asks it for end-of-generation ids; converters combine the model and
# the tokenizer, so they sit above both, and training writes through them.
RANKS = {
    "common/util": 0,
    "common/kernels": 1,
    "common/weights": 2,
    "common/tokenizer": 3,
    "common/model": 4,
    "common/backend": 5,
    "common/decoding": 6,
    "common/early_exit": 7,
    "common/drafting": 7,
    "common/convert": 8,
    "common/train": 9,
    # SentencePiece's model format, which a converter writes; the rest of
    # proto/ is the wire API.
    "proto/sentencepiece_model.pb.h": 2,
    "proto": 10,
    "client": 11,
    "server": 11,
    "client/cli": 12,
    "client/python": 12,
    "client/package": 12,
    "client/examples": 12,
    "bench/commands": 13,
    "bench": 14,
}
ROOTS = ("common", "client", "server", "bench")
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:common|client|server|bench|proto)/[^"]+)"')


def folder(path):
    """The layer of a repository path: the longest RANKS key it lies under."""
    if path in RANKS:
        return path
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        key = "/".join(parts[:n])
        if key in RANKS:
            return key
    return None


def violations(source_dir):
    found = []
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(source_dir, root)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), source_dir)
                here = folder(path)
                if here is None:
                    found.append(f"{path}: in no layer (add its folder to RANKS in tests/layers_test.py)")
                    continue
                with open(os.path.join(source_dir, path), errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        there = folder(m.group(1))
                        if there is None or there == here:
                            continue
                        if RANKS[there] >= RANKS[here]:
                            way = "up" if RANKS[there] > RANKS[here] else "sideways"
                            found.append(f"{path}:{number}: includes {m.group(1)}, {way} from {here} to {there}")
    return found


def main():
    source_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    found = violations(source_dir)
    for v in found:
        print(v)
    if found:
        print(f"layers_test: {len(found)} include(s) run against the layers")
        return 1
    # The check itself: a kernel file that includes the model must fail it.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(source_dir, "common"), os.path.join(tmp, "common"))
        with open(os.path.join(tmp, "common/kernels/planted.h"), "w") as f:
            f.write('#pragma once\n#include "common/model/model.h"\n')
        planted = violations(tmp)
        if not any(v.startswith("common/kernels/planted.h:2: includes common/model/model.h, up") for v in planted):
            print("layers_test: a planted upward include was not caught:", planted)
            return 1
    print("layers_test: every include looks down; a planted upward one is caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
