#include "common/kernels/weight_type.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/util/error.h"

namespace splitspec {

const char* wtype_name(WType t) {
  switch (t) {
    case WType::F32: return "f32";
    case WType::F16: return "f16";
    case WType::BF16: return "bf16";
    case WType::Q8_0: return "q8_0";
    case WType::Q4_0: return "q4_0";
    case WType::Q4_K: return "q4_k";
    case WType::Q5_K: return "q5_k";
    case WType::Q6_K: return "q6_k";
    case WType::Q2_K: return "q2_k";
    case WType::Q3_K: return "q3_k";
    case WType::Q4_1: return "q4_1";
    case WType::Q5_0: return "q5_0";
    case WType::Q5_1: return "q5_1";
    case WType::IQ4_NL: return "iq4_nl";
    case WType::IQ4_XS: return "iq4_xs";
  }
  return "?";
}

std::optional<WType> parse_wtype(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (int i = 0; i < kWTypes; ++i)
    if (s == wtype_name(static_cast<WType>(i))) return static_cast<WType>(i);
  return std::nullopt;
}

WType parse_weight_type(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  // llama.cpp's names of its mixes: a model of type q4_k or q5_k is one.
  if (s == "q4_k_m") return WType::Q4_K;
  if (s == "q5_k_m") return WType::Q5_K;
  if (s == "q3_k_m") return WType::Q3_K;
  const auto t = parse_wtype(s);
  if (t && is_writable(*t)) return *t;
  const std::string use =
      ": use f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, or llama.cpp's mixes q4_k_m, q5_k_m, q3_k_m, "
      "q2_k and q6_k";
  if (t) throw Error("weight type '" + name + "' is read from GGUF files but not written" + use);
  throw Error("unknown weight type '" + name + "'" + use);
}

// The compiler's half type converts with correct rounding, in hardware
// where the target has it (GCC 12 knows _Float16 in C++ on x86-64 only).
#if defined(__aarch64__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

float half_to_float(uint16_t h) {
  Half v;
  std::memcpy(&v, &h, sizeof v);
  return static_cast<float>(v);
}

uint16_t float_to_half(float f) {
  const Half v = static_cast<Half>(f);
  uint16_t h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace splitspec
