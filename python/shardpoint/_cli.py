"""The `shardpoint` command of an installed package: runs the CLI binary
built with the package (shardpoint/_bin/shardpoint)."""

import os
import sys


def binary():
    """The path of the bundled `shardpoint` executable."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "shardpoint")


def main():
    path = binary()
    if not os.access(path, os.X_OK):
        sys.exit(f"shardpoint: the CLI binary is missing from the package ({path}); "
                 "reinstall with `pip install --no-build-isolation .`")
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
