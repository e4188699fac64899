// A model's weights digest (weight_set.h).
#include <gtest/gtest.h>

#include <cmath>

#include "common/kernels/quant.h"
#include "common/model/model.h"
#include "common/model/weight_set.h"
#include "tests/test_util.h"

namespace splitspec::test {

// The weights digest (a target's identity for fallbacks and resumes) names
// the bytes the forward computes with: a save and load keeps it, another
// weight type changes it, and a packed matrix digests as its plain bytes, so
// an x86 server (which packs K-quants) and an aarch64 client (which does
// not) agree.
TEST(WeightsDigest, NamesTheBytesNotTheirLayout) {
  TempDir dir;
  auto m = Model::random(tiny_config(64, 2), 5);
  m->save(dir.str("f32"));
  m->save(dir.str("q8"), WType::Q8_0);
  EXPECT_EQ(Model::load(dir.str("f32"))->weights_digest(), m->weights_digest());
  EXPECT_NE(Model::load(dir.str("q8"))->weights_digest(), m->weights_digest());
  EXPECT_EQ(m->weights_digest().size(), 16u);

  for (WType type : {WType::Q4_K, WType::Q6_K, WType::Q8_0, WType::Q4_0}) {
    if (!stored_packed(type)) continue;  // K-quants pack on x86 only
    const int64_t rows = 19, cols = 512;  // two whole groups of eight rows and a tail
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i));
    std::vector<uint8_t> plain(static_cast<size_t>(rows * row_bytes(type, cols)));
    quantize_rows(type, w.data(), rows, cols, plain.data());
    std::vector<uint8_t> packed = plain, scratch;
    pack_rows(type, packed.data(), rows, cols, scratch);
    WeightSet a, b;
    a.embed = {type, plain.data(), rows, cols, false};
    b.embed = {type, packed.data(), rows, cols, true};
    a.lm_head = a.embed;
    b.lm_head = b.embed;
    EXPECT_EQ(a.digest(), b.digest()) << wtype_name(type);
    plain[7] ^= 1;
    EXPECT_NE(a.digest(), b.digest()) << wtype_name(type);
  }
}

}  // namespace splitspec::test
