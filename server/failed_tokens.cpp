#include "server/failed_tokens.h"

#include <algorithm>

namespace splitspec {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

}  // namespace

std::chrono::milliseconds FailedTokens::wait(const std::string& peer, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = peers_.find(peer);
  if (it == peers_.end() || it->second.until <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(it->second.until - now);
}

std::chrono::milliseconds FailedTokens::failed(const std::string& peer, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Forgotten peers go, so that a scan from many addresses does not grow the map without end.
  if (peers_.size() > 4096)
    for (auto it = peers_.begin(); it != peers_.end();) it = now - it->second.last > kForget ? peers_.erase(it) : std::next(it);
  Peer& p = peers_[peer];
  if (now - p.last > kForget) p.failures = 0;
  p.last = now;
  p.failures += 1;
  if (p.failures <= kFree) return std::chrono::milliseconds(0);
  const int doublings = std::min(p.failures - kFree - 1, 16);
  const auto delay = std::min(kMaxDelay, kFirstDelay * (int64_t{1} << doublings));
  p.until = now + delay;
  return delay;
}

std::string FailedTokens::key(const std::string& peer, const std::string& forwarded_for,
                              const std::vector<std::string>& trusted) {
  auto is_trusted = [&](const std::string& a) { return std::find(trusted.begin(), trusted.end(), a) != trusted.end(); };
  if (!is_trusted(peer) || forwarded_for.empty()) return peer;
  std::string rest = forwarded_for;
  while (!rest.empty()) {
    const size_t comma = rest.rfind(',');
    const std::string hop = trim(comma == std::string::npos ? rest : rest.substr(comma + 1));
    rest = comma == std::string::npos ? "" : rest.substr(0, comma);
    if (!hop.empty() && !is_trusted(hop)) return hop;
  }
  return peer;
}

}  // namespace splitspec
