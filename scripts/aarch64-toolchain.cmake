# Cross-compiling for 64-bit ARM (a Jetson-class robot) with Debian's
# g++-aarch64-linux-gnu. The kernels alone need nothing more
# (scripts/test_arm_kernels.sh); the client also needs Debian's arm64 -dev
# packages, unpacked into a sysroot by scripts/aarch64_sysroot.sh and named
# by SPLITSPEC_AARCH64_SYSROOT (scripts/build_aarch64_client.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Appended to: -DCMAKE_FIND_ROOT_PATH=DIR adds a root, e.g. unpacked arm64
# packages of ours (tests/package/aarch64_test.sh).
list(APPEND CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
# Host programs (protoc, grpc_cpp_plugin); everything linked or included
# comes from the cross roots, never from the host's amd64 packages.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# try_compile projects read this file again and need the sysroot too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES SPLITSPEC_AARCH64_SYSROOT)

if(SPLITSPEC_AARCH64_SYSROOT)
  set(sysroot "${SPLITSPEC_AARCH64_SYSROOT}")
  list(APPEND CMAKE_FIND_ROOT_PATH "${sysroot}")
  # Not --sysroot: the cross compiler's own C and C++ runtime stay where
  # Debian put them; the sysroot only adds the libraries on top.
  include_directories(SYSTEM "${sysroot}/usr/include/aarch64-linux-gnu" "${sysroot}/usr/include")
  set(libdirs "${sysroot}/usr/lib/aarch64-linux-gnu" "${sysroot}/lib/aarch64-linux-gnu")
  foreach(dir ${libdirs})
    string(APPEND CMAKE_EXE_LINKER_FLAGS_INIT " -L${dir} -Wl,-rpath-link,${dir}")
    string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -L${dir} -Wl,-rpath-link,${dir}")
    string(APPEND CMAKE_MODULE_LINKER_FLAGS_INIT " -L${dir} -Wl,-rpath-link,${dir}")
  endforeach()
  # pkg-config's answers (-I/usr/include, -L/usr/lib/...) re-rooted.
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "${sysroot}")
  set(ENV{PKG_CONFIG_LIBDIR} "${sysroot}/usr/lib/aarch64-linux-gnu/pkgconfig:${sysroot}/usr/share/pkgconfig")
  # The Python module for Debian's arm64 python3.11: FindPython cannot run
  # the target's interpreter, so it is told where the headers are and what
  # the module's suffix is (client/python/CMakeLists.txt).
  set(Python3_INCLUDE_DIR "${sysroot}/usr/include/python3.11" CACHE PATH "")
  set(Python3_LIBRARY "${sysroot}/usr/lib/aarch64-linux-gnu/libpython3.11.so" CACHE FILEPATH "")
  set(SPLITSPEC_PYTHON_SOABI "cpython-311-aarch64-linux-gnu" CACHE STRING "")
endif()
