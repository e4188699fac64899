"""The splitspec Python module as a pip package (docs/client-package.md).

The extension is built by the project's own CMake, client only (no LibTorch,
no server), against the Python that runs pip; the wheel holds the module,
libsplitspec.so and the sentencepiece module it loads (the module finds the
library beside itself through its $ORIGIN run path), and splitspec.pyi, the
type stubs generated from the built module (make_stubs.py).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(splitspec VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        temp = Path(self.build_temp).resolve()
        # SPLITSPEC_CMAKE_BUILD_DIR: an existing client-only build to reuse
        # (the test suite's), else a fresh one here.
        build = Path(os.environ.get("SPLITSPEC_CMAKE_BUILD_DIR") or temp / "cmake").resolve()
        prefix = temp / "prefix"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), *generator,
                               "-DCMAKE_BUILD_TYPE=Release", "-DSPLITSPEC_CLIENT_ONLY=ON",
                               "-DPython3_EXECUTABLE=" + sys.executable,
                               "-DCMAKE_INSTALL_PREFIX=" + str(prefix),
                               # The module and the library in one directory: the wheel's root.
                               "-DCMAKE_INSTALL_LIBDIR=lib", "-DSPLITSPEC_PYTHON_INSTALL_DIR=lib"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "splitspec_python", "--parallel", jobs])
        for component in ("client", "python"):
            subprocess.check_call(["cmake", "--install", str(build), "--component", component],
                                  stdout=subprocess.DEVNULL)
        module = Path(self.get_ext_fullpath(ext.name))
        dest = module.parent
        dest.mkdir(parents=True, exist_ok=True)
        lib = prefix / "lib"
        built = next(lib.glob("splitspec.*.so"))
        shutil.copyfile(built, module)
        # libsplitspec.so.MAJOR.MINOR is the soname the module asks for; the
        # sentencepiece module is dlopen()ed by name from beside the library.
        for f in [*lib.glob("libsplitspec.so.*"), lib / "libsplitspec_sentencepiece.so"]:
            if re.search(r"(\.so\.\d+\.\d+|_sentencepiece\.so)$", f.name):
                shutil.copyfile(f.resolve(), dest / f.name)
        subprocess.check_call([sys.executable, str(HERE / "make_stubs.py"), str(dest), str(dest / "splitspec.pyi")])


setup(
    name="splitspec",
    version=version(),
    description="Exact speculative decoding split between an edge device and a server: the client",
    license="see the repository",
    python_requires=">=3.8",
    ext_modules=[Extension("splitspec", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
