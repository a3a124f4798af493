#!/usr/bin/env python3
"""Unpack the xz-compressed model weights kept in git (the demo model and the
test fixtures) next to their .xz, where the tools and tests read them.

Run by `meson setup` (and by hand after a `git pull` that changed a .xz):
    python3 scripts/unpack_data.py SOURCE_ROOT
The weights are stored compressed so that the tracked tree stays small enough to
travel to the device machine; the unpacked files are git-ignored. A file is
(re)written when it is missing or older than its .xz, through a temporary name
and a rename, so parallel configures never see half a file.
"""
import lzma
import os
import sys

DIRS = ("models", "tests/data/fixtures")


def unpack(xz_path):
    target = xz_path[:-3]
    try:
        if os.stat(target).st_mtime >= os.stat(xz_path).st_mtime:
            return False
    except FileNotFoundError:
        pass
    tmp = "%s.tmp.%d" % (target, os.getpid())
    try:
        with lzma.open(xz_path, "rb") as src, open(tmp, "wb") as dst:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
        os.replace(tmp, target)
    except (OSError, lzma.LZMAError) as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        sys.exit("unpack_data: %s: %s" % (xz_path, err))
    return True


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    count = 0
    for top in DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(".safetensors.xz"):
                    count += unpack(os.path.join(dirpath, name))
    if count:
        print("unpack_data: unpacked %d weight file(s)" % count)


if __name__ == "__main__":
    main()
