# The libFuzzer targets that link the project's libraries (gRPC, protobuf). scripts/fuzz.sh configures the whole project with clang-14 and
# -fsanitize=address,undefined,fuzzer-no-link into its own build directory
# and passes this file as CMAKE_PROJECT_INCLUDE: it runs right after
# project(), and defers adding the targets to the end of the top-level
# CMakeLists.txt, when splitspec_common and splitspec_server exist. The
# project's own CMake files stay as they are.
if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "scripts/fuzz.sh needs CMake 3.19 or newer (cmake_language DEFER); this is ${CMAKE_VERSION}")
endif()
cmake_language(DEFER CALL _splitspec_add_fuzz_targets)

function(_splitspec_add_fuzz_targets)
  # clang-14 lacks two things the sources use with GCC 12 (clang 15 has
  # both). _Float16 on x86-64, which weight_type.cpp converts halves with:
  # __fp16 converts the same way, with correct rounding, through
  # compiler-rt's builtins, linked below. __builtin_cpu_supports("f16c") in
  # linear.cpp: clang14_compat.h answers it from CPUID.
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/common/kernels/weight_type.cpp
    DIRECTORY ${PROJECT_SOURCE_DIR}/common APPEND PROPERTY COMPILE_DEFINITIONS "_Float16=__fp16")
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/common/kernels/linear.cpp
    DIRECTORY ${PROJECT_SOURCE_DIR}/common APPEND PROPERTY COMPILE_OPTIONS
    -include ${PROJECT_SOURCE_DIR}/tests/fuzz/clang14_compat.h)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} --rtlib=compiler-rt --print-libgcc-file-name
    OUTPUT_VARIABLE builtins OUTPUT_STRIP_TRAILING_WHITESPACE)
  # After libsplitspec_kernels.a on every link line that has it.
  target_link_libraries(splitspec_kernels PUBLIC ${builtins})
  # CMAKE_CURRENT_LIST_DIR is the top-level directory in a deferred call.
  set(dir ${PROJECT_SOURCE_DIR}/tests/fuzz)
  add_executable(fuzz_early_exits ${dir}/fuzz_early_exits.cpp)
  target_link_libraries(fuzz_early_exits PRIVATE splitspec_common)
  add_executable(fuzz_session_requests ${dir}/fuzz_session_requests.cpp)
  target_link_libraries(fuzz_session_requests PRIVATE splitspec_server splitspec_wire gRPC::grpc++)
  add_executable(fuzz_http_requests ${dir}/fuzz_http_requests.cpp)
  target_link_libraries(fuzz_http_requests PRIVATE splitspec_server)
  foreach(t fuzz_early_exits fuzz_session_requests fuzz_http_requests)
    target_compile_definitions(${t} PRIVATE SPLITSPEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
    # libFuzzer's main: only the fuzz programs link it (the libraries are
    # built with fuzzer-no-link, for coverage).
    target_link_options(${t} PRIVATE -fsanitize=fuzzer)
  endforeach()
endfunction()
