#pragma once
// Force-included (-include) into common/kernels/linear.cpp by the fuzz build
// only (tests/fuzz/fuzz_targets.cmake): clang-14 does not know
// __builtin_cpu_supports("f16c") (GCC does, and clang 15). Every feature
// linear.cpp asks about is answered here, f16c by CPUID leaf 1 (ECX bit 29).
#include <cpuid.h>
#include <cstring>

static inline bool splitspec_fuzz_cpu_supports(const char* f) {
  if (!std::strcmp(f, "f16c")) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }
  if (!std::strcmp(f, "avx2")) return __builtin_cpu_supports("avx2");
  if (!std::strcmp(f, "fma")) return __builtin_cpu_supports("fma");
  if (!std::strcmp(f, "avx512f")) return __builtin_cpu_supports("avx512f");
  if (!std::strcmp(f, "avx512bw")) return __builtin_cpu_supports("avx512bw");
  if (!std::strcmp(f, "avx512dq")) return __builtin_cpu_supports("avx512dq");
  if (!std::strcmp(f, "avx512vl")) return __builtin_cpu_supports("avx512vl");
  if (!std::strcmp(f, "avx512vnni")) return __builtin_cpu_supports("avx512vnni");
  return false;
}
#define __builtin_cpu_supports(f) splitspec_fuzz_cpu_supports(f)
