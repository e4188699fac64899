#!/usr/bin/env python3
"""The project's folders as layers that only look down: every #include of
ours in common/, client/, server/, bench/ and proto/ names a file of its own
folder or of a lower layer. Fails listing each include that runs back up (or
sideways, between folders of one rank) or names none of our folders, then
checks itself on a copy with such includes planted.

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
ROOTS = ("common", "client", "server", "bench", "proto")
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc")
# Ours by their root, quoted or bracketed; a relative include ("model.h")
# would hide its folder, so it is reported too.
INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')
OURS = re.compile(r"^(?:common|client|server|bench|proto|tests)/")


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
    """The includes that run against the layers, and how many files were read."""
    found = []
    files_read = 0
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
                files_read += 1
                with open(os.path.join(source_dir, path), errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = os.path.normpath(m.group(1))
                        if not OURS.match(target):
                            # A system or library header, unless it names a file beside this one.
                            if line.split("include", 1)[1].strip().startswith('"') and os.path.exists(
                                    os.path.join(source_dir, os.path.dirname(path), target)):
                                found.append(f"{path}:{number}: includes {m.group(1)} by a relative path; "
                                             "name it from the repository root")
                            continue
                        there = folder(target)
                        if there is None:
                            found.append(f"{path}:{number}: includes {m.group(1)}, in no layer")
                            continue
                        if there == here:
                            continue
                        if RANKS[there] >= RANKS[here]:
                            way = "up" if RANKS[there] > RANKS[here] else "sideways"
                            found.append(f"{path}:{number}: includes {m.group(1)}, {way} from {here} to {there}")
    return found, files_read


# Includes that must each be caught, planted in a copy: (file, include, what
# the report must say).
PLANTED = [
    ("common/kernels/planted.h", "common/model/model.h", "up from common/kernels to common/model"),
    ("server/planted.cpp", "client/cli/commands.h", "up from server to client/cli"),
    ("client/planted.cpp", "server/server.h", "sideways from client to server"),
    ("common/backend/cuda/planted.cu", "common/train/trainer.h", "up from common/backend to common/train"),
    ("common/drafting/planted.inc", "common/early_exit/early_exit.h", "sideways from common/drafting to common/early_exit"),
    ("proto/planted.h", "client/client.h", "up from proto to client"),
    ("bench/commands/planted.cpp", "bench/kquant_hot_cold.cpp", "up from bench/commands to bench"),
    ("common/util/planted.h", "tests/test_util.h", "in no layer"),
]


def check_the_check(source_dir):
    """Every planted include is caught; returns what was not."""
    with tempfile.TemporaryDirectory() as tmp:
        for root in ROOTS:
            shutil.copytree(os.path.join(source_dir, root), os.path.join(tmp, root))
        for path, include, _ in PLANTED:
            with open(os.path.join(tmp, path), "w") as f:
                f.write(f'#pragma once\n#include <{include}>\n' if path.startswith("proto") else
                        f'#pragma once\n#include "{include}"\n')
        planted, _ = violations(tmp)
    return [p for p in PLANTED if not any(v.startswith(f"{p[0]}:2: includes {p[1]}") and p[2] in v for v in planted)]


def main():
    source_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    found, files_read = violations(source_dir)
    for v in found:
        print(v)
    if found:
        print(f"layers_test: {len(found)} include(s) run against the layers")
        return 1
    if files_read < 200:
        print(f"layers_test: only {files_read} files read under {source_dir}: not this repository's tree?")
        return 1
    missed = check_the_check(source_dir)
    if missed:
        print("layers_test: planted includes not caught:", missed)
        return 1
    print(f"layers_test: {files_read} files, every include looks down; {len(PLANTED)} planted ones are caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
