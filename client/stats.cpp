// Stats' sum and derivation (client_stats.h): one rule per field, from the part's
// field list.
#include <algorithm>
#include <type_traits>

#include "client/client_stats.h"
#include "client/stats_sum.h"
#include "common/util/percentile.h"

namespace splitspec {
namespace {

// A drafter counter that is a level rather than a count: a size.
bool is_level(const std::string& name) {
  return name.size() > 6 && name.compare(name.size() - 6, 6, "_bytes") == 0;
}

template <class M>
void merge(M& into, const M& from, Merge how) {
  if (how == Merge::kDerived) return;
  if constexpr (std::is_arithmetic_v<M>) {
    if (how == Merge::kSum) into += from;
    else if (how == Merge::kMax) into = std::max(into, from);
    else if (how == Merge::kLast) into = from;
  } else if constexpr (std::is_same_v<M, std::vector<double>>) {
    into.insert(into.end(), from.begin(), from.end());  // kAppend
  } else if constexpr (std::is_same_v<M, std::vector<int64_t>>) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
  } else {
    for (const auto& [name, value] : from) into[name] = is_level(name) ? value : into[name] + value;
  }
}

template <class Part>
void merge_part(Part& into, const Part& from) {
  Part::fields([&](const char*, auto member, Merge how) { merge(into.*member, from.*member, how); });
}

double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }
template <class A, class B>
double ratio(A num, B den) {
  return ratio(static_cast<double>(num), static_cast<double>(den));
}

}  // namespace

Stats& Stats::operator+=(const Stats& other) {
  parts(*this, [&other](const char*, auto& part) {
    using Part = std::decay_t<decltype(part)>;
    merge_part<Part>(part, static_cast<const Part&>(other));
  });
  derive();
  return *this;
}

void add_part(TargetStats& into, const TargetStats& from) { merge_part(into, from); }
void add_part(LinkStats& into, const LinkStats& from) { merge_part(into, from); }

void Stats::derive() {
  ms_per_token = ratio(wall_ms, new_tokens);
  decode_tokens_per_s = ratio(decode_tokens * 1000.0, decode_ms);
  token_ms_p50 = percentile(token_ms, 50);
  token_ms_p90 = percentile(token_ms, 90);
  token_ms_p99 = percentile(token_ms, 99);
  token_ms_max = percentile(token_ms, 100);

  tau = ratio(new_tokens, rounds);
  acceptance_rate = ratio(accepted_tokens, drafted_tokens);
  accepted_per_round = ratio(accepted_tokens, rounds);
  tree_nodes = ratio(drafted_tokens, rounds);
  acceptance_per_position.assign(proposed_per_position.size(), 0.0);
  for (size_t d = 0; d < proposed_per_position.size(); ++d)
    acceptance_per_position[d] =
        ratio(d < accepted_per_position.size() ? accepted_per_position[d] : 0, proposed_per_position[d]);

  network_rtt_ms = ratio(verify_wait_ms - server_ms, static_cast<double>(rounds));

  cache_miss_rate = predraft_lookups ? 1.0 - ratio(predraft_hits, predraft_lookups) : 0.0;
  avg_exit_layer = ratio(exit_layer_sum, predraft_hits);
  hit_send_ms = ratio(hit_send_total_ms, hit_sends);
  miss_send_ms = ratio(miss_send_total_ms, miss_sends);
}

}  // namespace splitspec
