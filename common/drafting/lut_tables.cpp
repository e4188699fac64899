#include "common/drafting/lut_tables.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/kernels/weight_type.h"
#include "common/util/error.h"
#include "common/util/json_integer.h"
#include "common/weights/safetensors.h"

namespace splitspec {

namespace {

constexpr float kObservedProb = 0.5f;


uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string tables_sidecar(const std::string& path) {
  return std::filesystem::path(path).replace_extension(".json").string();
}

}  // namespace

void LutOptions::validate() const {
  if (k < 1 || k > 64) throw Error("lut: k must be in [1, 64], got " + std::to_string(k));
  if (order < 1 || order > 8) throw Error("lut: order must be in [1, 8], got " + std::to_string(order));
  if (order > 1 && (slots < 1 || slots > (1 << 24)))
    throw Error("lut: slots must be in [1, 16777216], got " + std::to_string(slots));
}

LutTables::LutTables(int64_t vocab_size, const LutOptions& options) : vocab_(vocab_size), options_(options) {
  options_.validate();
  if (vocab_ < 1) throw Error("lut: vocabulary size must be positive");
  const size_t slots = options_.order > 1 ? static_cast<size_t>(options_.slots) : 0;
  const size_t places = (static_cast<size_t>(vocab_) + slots) * static_cast<size_t>(options_.k);
  ids_.assign(places, -1);
  probs_.assign(places, 0);
  keys_.assign(slots, 0);
}

uint64_t LutTables::key_of(const int32_t* end, int32_t n) const {
  uint64_t h = mix(static_cast<uint64_t>(n));
  for (int32_t i = 1; i <= n; ++i) h = mix(h ^ static_cast<uint32_t>(end[-i]));
  return h | 1;  // 0 marks a free slot
}

int64_t LutTables::find_row(const int32_t* end, int32_t n) const {
  if (n == 1) return end[-1];
  const uint64_t key = key_of(end, n);
  const size_t slot = static_cast<size_t>(key % keys_.size());
  return keys_[slot] == key ? vocab_ + static_cast<int64_t>(slot) : -1;
}

int64_t LutTables::claim_row(const int32_t* end, int32_t n) {
  const int64_t found = find_row(end, n);
  if (found >= 0) return found;
  const uint64_t key = key_of(end, n);
  const size_t slot = static_cast<size_t>(key % keys_.size());
  keys_[slot] = key;
  const int64_t row = vocab_ + static_cast<int64_t>(slot);
  const size_t k = static_cast<size_t>(options_.k);
  std::fill_n(&ids_[row * k], k, -1);
  std::fill_n(&probs_[row * k], k, uint16_t{0});
  return row;
}

void LutTables::merge(int64_t row, int32_t token, float prob) {
  const int32_t k = options_.k;
  int32_t* ids = &ids_[row * k];
  uint16_t* probs = &probs_[row * k];
  int32_t at = -1;
  for (int32_t i = 0; i < k && at < 0; ++i)
    if (ids[i] == token || ids[i] < 0) at = i;
  if (at < 0) {
    // Full and without it: it replaces the least probable if it beats it.
    if (prob <= half_to_float(probs[k - 1])) return;
    at = k - 1;
  }
  ids[at] = token;
  probs[at] = float_to_half(prob);
  // Rows stay sorted, most probable first, free places last.
  while (at > 0 && (ids[at - 1] < 0 || half_to_float(probs[at - 1]) < half_to_float(probs[at]))) {
    std::swap(ids[at - 1], ids[at]);
    std::swap(probs[at - 1], probs[at]);
    --at;
  }
  while (at + 1 < k && ids[at + 1] >= 0 && half_to_float(probs[at + 1]) > half_to_float(probs[at])) {
    std::swap(ids[at + 1], ids[at]);
    std::swap(probs[at + 1], probs[at]);
    ++at;
  }
}

void LutTables::lookup(const int32_t* end, int64_t length, std::vector<LutCandidate>& out) const {
  out.clear();
  const int32_t k = options_.k;
  for (int32_t n = static_cast<int32_t>(std::min<int64_t>(options_.order, length)); n >= 1; --n) {
    const int64_t row = find_row(end, n);
    if (row < 0) continue;
    const int32_t* ids = &ids_[row * k];
    const uint16_t* probs = &probs_[row * k];
    for (int32_t i = 0; i < k && ids[i] >= 0; ++i) {
      const int32_t t = ids[i];
      if (std::none_of(out.begin(), out.end(), [t](const LutCandidate& c) { return c.token == t; }))
        out.push_back({t, half_to_float(probs[i])});
      if (static_cast<int32_t>(out.size()) == k) return;
    }
  }
}

void LutTables::update(const int32_t* end, int64_t length, const std::vector<int32_t>& ids,
                       const std::vector<float>& probs) {
  if (ids.size() != probs.size()) throw Error("lut: top-K ids and probabilities differ in count");
  const size_t take = std::min(ids.size(), static_cast<size_t>(options_.k));
  for (int32_t n = 1; n <= std::min<int64_t>(options_.order, length); ++n) {
    const int64_t row = claim_row(end, n);
    for (size_t i = 0; i < take; ++i)
      if (ids[i] >= 0 && ids[i] < vocab_ && std::isfinite(probs[i])) merge(row, ids[i], probs[i]);
  }
}

void LutTables::observe(const int32_t* end, int64_t length, int32_t token) {
  if (token < 0 || token >= vocab_) return;
  const int32_t k = options_.k;
  for (int32_t n = 1; n <= std::min<int64_t>(options_.order, length); ++n) {
    const int64_t row = claim_row(end, n);
    int32_t* ids = &ids_[row * k];
    uint16_t* probs = &probs_[row * k];
    int32_t used = 0;
    bool present = false;
    for (; used < k && ids[used] >= 0; ++used) present = present || ids[used] == token;
    if (present) continue;
    const int32_t at = used < k ? used : k - 1;
    probs[at] = used == 0 ? float_to_half(kObservedProb) : probs[used - 1];
    ids[at] = token;
  }
}

size_t LutTables::memory_bytes() const {
  return ids_.size() * sizeof(int32_t) + probs_.size() * sizeof(uint16_t) + keys_.size() * sizeof(uint64_t);
}

int64_t LutTables::rows_used() const {
  const size_t k = static_cast<size_t>(options_.k);
  int64_t n = 0;
  for (size_t i = 0; i < static_cast<size_t>(vocab_) * k; i += k) n += ids_[i] >= 0;
  for (uint64_t key : keys_) n += key != 0;
  return n;
}

void LutTables::save(const std::string& path, const std::string& tokenizer_fingerprint) const {
  const int64_t k = options_.k, slots = static_cast<int64_t>(keys_.size());
  const size_t unigram = static_cast<size_t>(vocab_ * k), hashed = static_cast<size_t>(slots * k);
  std::vector<TensorToWrite> t = {
      {"unigram.ids", DType::I32, {vocab_, k}, ids_.data(), unigram * sizeof(int32_t)},
      {"unigram.probs", DType::F16, {vocab_, k}, probs_.data(), unigram * sizeof(uint16_t)},
  };
  if (slots > 0) {
    t.push_back({"slots.keys", DType::I64, {slots}, keys_.data(), keys_.size() * sizeof(uint64_t)});
    t.push_back({"slots.ids", DType::I32, {slots, k}, ids_.data() + unigram, hashed * sizeof(int32_t)});
    t.push_back({"slots.probs", DType::F16, {slots, k}, probs_.data() + unigram, hashed * sizeof(uint16_t)});
  }
  write_safetensors(path, t);
  nlohmann::json j = {{"format", "splitspec-lut"}, {"version", 1},      {"vocab_size", vocab_},
                      {"k", options_.k},          {"order", options_.order}, {"slots", options_.slots},
                      {"tokenizer_fingerprint", tokenizer_fingerprint}};
  const std::string side = tables_sidecar(path), tmp = side + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) throw Error(tmp + ": cannot write");
  }
  std::filesystem::rename(tmp, side);
}

LutTables LutTables::load(const std::string& path, int64_t vocab_size, const std::string& tokenizer_fingerprint) {
  const std::string side = tables_sidecar(path);
  std::ifstream f(side);
  if (!f) throw Error(side + ": look-up tables need this file next to " + path);
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw Error(side + ": not valid JSON (" + e.what() + ")");
  }
  LutOptions o;
  int64_t vocab = 0;
  std::string fingerprint;
  try {
    if (j.at("format").get<std::string>() != "splitspec-lut") throw Error("format is not splitspec-lut");
    vocab = json_integer<int64_t>(j.at("vocab_size"), "vocab_size");
    o.k = json_integer<int32_t>(j.at("k"), "k");
    o.order = json_integer<int32_t>(j.at("order"), "order");
    o.slots = json_integer<int32_t>(j.at("slots"), "slots");
    fingerprint = j.value("tokenizer_fingerprint", std::string());
  } catch (const std::exception& e) {
    throw Error(side + ": " + e.what());
  }
  if (vocab != vocab_size)
    throw Error(path + ": tables built for a vocabulary of " + std::to_string(vocab) + ", but the target has " +
                std::to_string(vocab_size) + "; build them for this target (splitspec train lut)");
  if (!fingerprint.empty() && !tokenizer_fingerprint.empty() && fingerprint != tokenizer_fingerprint)
    throw Error(path + ": tables built with tokenizer " + fingerprint + ", but this one is " + tokenizer_fingerprint +
                "; build them for this target (splitspec train lut)");
  try {
    o.validate();
  } catch (const Error& e) {
    throw Error(side + ": " + e.what());
  }
  // The tensors are checked against the sidecar before the tables are
  // allocated: a 100-byte sidecar must not cost gigabytes (found by fuzzing).
  SafetensorsFile st(path);
  const int64_t k = o.k, slots = o.order > 1 ? o.slots : 0;
  auto tensor = [&](const std::string& name, DType dtype, const std::vector<int64_t>& shape) -> const TensorInfo& {
    auto it = st.tensors().find(name);
    if (it == st.tensors().end()) throw Error(path + ": tensor '" + name + "' is missing");
    const TensorInfo& ti = it->second;
    if (ti.dtype != dtype || ti.shape != shape)
      throw Error(path + ": tensor '" + name + "' is " + dtype_name(ti.dtype) + " " + shape_str(ti.shape) +
                  ", expected " + dtype_name(dtype) + " " + shape_str(shape));
    return ti;
  };
  const TensorInfo& unigram_ids = tensor("unigram.ids", DType::I32, {vocab, k});
  const TensorInfo& unigram_probs = tensor("unigram.probs", DType::F16, {vocab, k});
  const TensorInfo* slot_keys = slots > 0 ? &tensor("slots.keys", DType::I64, {slots}) : nullptr;
  const TensorInfo* slot_ids = slots > 0 ? &tensor("slots.ids", DType::I32, {slots, k}) : nullptr;
  const TensorInfo* slot_probs = slots > 0 ? &tensor("slots.probs", DType::F16, {slots, k}) : nullptr;
  LutTables t(vocab, o);
  const size_t unigram = static_cast<size_t>(vocab * k);
  std::memcpy(t.ids_.data(), unigram_ids.data, unigram_ids.nbytes);
  std::memcpy(t.probs_.data(), unigram_probs.data, unigram_probs.nbytes);
  if (slots > 0) {
    std::memcpy(t.keys_.data(), slot_keys->data, slot_keys->nbytes);
    std::memcpy(t.ids_.data() + unigram, slot_ids->data, slot_ids->nbytes);
    std::memcpy(t.probs_.data() + unigram, slot_probs->data, slot_probs->nbytes);
  }
  // Every id a valid token or a free place, every probability finite in
  // [0, 1]: lookups then need no checks.
  for (size_t i = 0; i < t.ids_.size(); ++i) {
    const float p = half_to_float(t.probs_[i]);
    if (t.ids_[i] < -1 || t.ids_[i] >= vocab || !(p >= 0.0f && p <= 1.0f)) {
      const bool hashed_row = i >= unigram;
      throw Error(path + ": " + (hashed_row ? "hashed" : "unigram") + " row " +
                  std::to_string((hashed_row ? i - unigram : i) / static_cast<size_t>(k)) +
                  " holds an id outside the vocabulary or a probability outside [0, 1]");
    }
  }
  return t;
}

}  // namespace splitspec
