#include "common/drafting/fallback_threshold.h"

#include <algorithm>
#include <cmath>

#include "common/util/error.h"

namespace splitspec {

namespace {
constexpr double kMinAlpha = 1e-6;
constexpr double kMaxAlpha = 1.0;
}  // namespace

FallbackThreshold::FallbackThreshold(double initial_alpha) : alpha_(initial_alpha) {
  if (!(initial_alpha > 0.0 && initial_alpha <= 1.0))
    throw Error("fallback threshold alpha must be in (0, 1], got " + std::to_string(initial_alpha));
}

void FallbackThreshold::update(const BranchOutcome& o) {
  if (o.n_all <= 0) return;  // nothing was drafted: no evidence either way
  if (o.n_correct >= o.n_all) {
    alpha_ *= 0.5;
  } else {
    const double share = static_cast<double>(o.n_all - o.n_correct) / static_cast<double>(o.n_all);
    const double tc = std::clamp(o.wrong_confidence, 1e-12, 1.0);
    alpha_ /= std::pow(tc, share);
  }
  alpha_ = std::clamp(alpha_, kMinAlpha, kMaxAlpha);
}

}  // namespace splitspec
