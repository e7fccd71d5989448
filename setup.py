"""Builds the `shardpoint._shardpoint` extension and the `shardpoint` CLI with
the project's CMake (see pyproject.toml for the package metadata).

Environment:
  SHARDPOINT_CMAKE_BUILD_DIR  CMake build directory to use (kept between
                              builds; default: a fresh one under build/ of setuptools)
  SHARDPOINT_CMAKE_ARGS       extra arguments for the CMake configure step
  SHARDPOINT_NO_CCACHE=1      do not use ccache even when it is installed
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: the number of CPUs)
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(os.environ.get("SHARDPOINT_CMAKE_BUILD_DIR") or
                         Path(self.build_temp) / "cmake").resolve()
        args = [
            "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            # Only the module and the CLI: no tests, benchmarks, demo, fuzzers.
            "-DSHARDPOINT_TESTS=OFF", "-DSHARDPOINT_BENCH=OFF", "-DSHARDPOINT_EXAMPLES=OFF",
            "-DSHARDPOINT_FUZZ=OFF", "-DSHARDPOINT_INSTALL=OFF",
            "-DSHARDPOINT_PYTHON=ON", "-DSHARDPOINT_CLI=ON",
        ]
        if shutil.which("ccache") and os.environ.get("SHARDPOINT_NO_CCACHE") != "1":
            args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        args += shlex.split(os.environ.get("SHARDPOINT_CMAKE_ARGS", ""))
        subprocess.run(["cmake", *args], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs,
                        "--target", "_shardpoint", "shardpoint_cli"], check=True)

        module = Path(self.get_ext_fullpath(ext.name))
        module.parent.mkdir(parents=True, exist_ok=True)
        built = sorted((build_dir / "python" / "shardpoint").glob("_shardpoint*.so"))
        if len(built) != 1:
            sys.exit(f"expected one _shardpoint*.so in {build_dir}/python/shardpoint, "
                     f"found {built}")
        shutil.copyfile(built[0], module)
        # The CLI travels inside the package; the `shardpoint` entry point runs it.
        cli = module.parent / "_bin" / "shardpoint"
        cli.parent.mkdir(exist_ok=True)
        shutil.copy2(build_dir / "shardpoint", cli)


setup(ext_modules=[Extension("shardpoint._shardpoint", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
