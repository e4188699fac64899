#pragma once
// Milliseconds on the steady clock: the unit of every step timer and stat.
#include <chrono>

namespace splitspec {

using SteadyClock = std::chrono::steady_clock;

inline double ms_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}
inline double ms_since(SteadyClock::time_point from) { return ms_between(from, SteadyClock::now()); }

}  // namespace splitspec
