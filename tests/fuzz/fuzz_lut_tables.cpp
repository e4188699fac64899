// libFuzzer target: DIAA look-up tables (common/drafting/lut_tables.cpp), the
// JSON sidecar and the safetensors file together. Bad files must give
// splitspec::Error, never a crash, a sanitizer report or another exception;
// tables that load must answer lookups, updates and observations within
// their stated bounds (at most K unique candidates, ids in the vocabulary,
// probabilities in [0, 1]) and, saved and loaded again, answer the same.
//
// Input: one byte choosing what the caller expects, then the sidecar
// (lut.json) up to the first NUL byte, then the .safetensors file (absent
// when there is no NUL).
//   byte % 3 == 0: the demo target's vocabulary (8000) and tokenizer
//                  fingerprint (models/demo-target/lut.* is a seed);
//   byte % 3 == 1: a vocabulary of 16 and no fingerprint to check;
//   byte % 3 == 2: a vocabulary of 16 and the fingerprint "fuzz".
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/drafting/lut_tables.h"
#include "common/util/error.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void check(bool ok, const char* what) { splitspec::fuzz::check(ok, "fuzz_lut_tables", what); }
using splitspec::fuzz::write_file;

// Every lookup over every suffix of `ctx`.
std::vector<std::vector<splitspec::LutCandidate>> all_lookups(const splitspec::LutTables& t,
                                                             const std::vector<int32_t>& ctx) {
  std::vector<std::vector<splitspec::LutCandidate>> out;
  std::vector<splitspec::LutCandidate> c;
  for (size_t end = 1; end <= ctx.size(); ++end) {
    t.lookup(ctx.data() + end, static_cast<int64_t>(end), c);
    check(c.size() <= static_cast<size_t>(t.options().k), "more than K candidates");
    for (size_t i = 0; i < c.size(); ++i) {
      check(c[i].token >= 0 && c[i].token < t.vocab_size(), "candidate outside the vocabulary");
      check(c[i].prob >= 0.0f && c[i].prob <= 1.0f, "candidate probability outside [0, 1]");
      for (size_t j = 0; j < i; ++j) check(c[j].token != c[i].token, "repeated candidate");
    }
    out.push_back(c);
  }
  return out;
}

bool same(const std::vector<std::vector<splitspec::LutCandidate>>& a,
          const std::vector<std::vector<splitspec::LutCandidate>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    for (size_t j = 0; j < a[i].size(); ++j)
      if (a[i][j].token != b[i][j].token || a[i][j].prob != b[i][j].prob) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string stem = "/tmp/splitspec-fuzz-lut-" + std::to_string(getpid());
  const std::string path = stem + ".safetensors", side = stem + ".json";
  const int mode = data[0] % 3;
  const int64_t vocab = mode == 0 ? 8000 : 16;
  const std::string fingerprint = mode == 0 ? "0ab88a53bb9a0462" : mode == 2 ? "fuzz" : "";
  const splitspec::fuzz::SidecarInput in = splitspec::fuzz::split_sidecar(data + 1, size - 1);
  if (!write_file(side, in.json, in.json_len)) return 0;
  std::remove(path.c_str());
  if (in.tensors && !write_file(path, in.tensors, in.tensors_len)) return 0;

  try {
    splitspec::LutTables t = splitspec::LutTables::load(path, vocab, fingerprint);
    check(t.vocab_size() == vocab, "loaded tables of another vocabulary");
    // A context from the input's last bytes, and lookups along it.
    std::vector<int32_t> ctx;
    for (size_t i = size > 24 ? size - 24 : 0; i < size; ++i) ctx.push_back(static_cast<int32_t>(data[i] % vocab));
    const auto before = all_lookups(t, ctx);
    if (vocab == 16) {
      // The small tables: saved and loaded again, they answer the same.
      const std::string again = stem + "-again.safetensors";
      t.save(again, fingerprint);
      splitspec::LutTables u = splitspec::LutTables::load(again, vocab, fingerprint);
      check(same(before, all_lookups(u, ctx)), "tables answer differently after save and load");
      std::remove(again.c_str());
      std::remove((stem + "-again.json").c_str());
    }
    // Learning keeps the bounds.
    for (size_t end = 1; end <= ctx.size(); ++end) {
      const int32_t next = ctx[end % ctx.size()];
      t.update(ctx.data() + end, static_cast<int64_t>(end), {next, static_cast<int32_t>((next + 1) % vocab)},
               {0.75f, 0.25f});
      t.observe(ctx.data() + end, static_cast<int64_t>(end), static_cast<int32_t>((next + 3) % vocab));
    }
    all_lookups(t, ctx);
    (void)t.rows_used();
  } catch (const splitspec::Error&) {
  }
  return 0;
}
