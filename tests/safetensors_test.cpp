#include "common/weights/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/util/error.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

// A raw safetensors file from a header and a data section, so each test can
// corrupt exactly one thing.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

void expect_error(const std::string& path, const std::string& needle) {
  try {
    SafetensorsFile f(path);
    FAIL() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "error must name the file: " << e.what();
  }
}

}  // namespace

TEST(Safetensors, WriteThenReadRoundTrips) {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {7, 8};
  write_safetensors(dir.str("t.safetensors"),
                    {{"a", DType::F32, {2, 3}, a.data(), a.size() * 4}, {"b", DType::I64, {2}, b.data(), 16}},
                    {{"format", "pt"}});
  SafetensorsFile f(dir.str("t.safetensors"));
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto& ta = f.tensors().at("a");
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(ta.data, a.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta.data) % 8, 0u) << "data section should be 8-byte aligned";
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, ShardedModelResolvesEveryTensor) {
  TempDir dir;
  std::vector<float> a = {1, 2}, b = {3};
  write_safetensors(dir.str("model-00001-of-00002.safetensors"), {{"a", DType::F32, {2}, a.data(), 8}});
  write_safetensors(dir.str("model-00002-of-00002.safetensors"), {{"b", DType::F32, {1}, b.data(), 4}});
  write_file(dir.path() / "model.safetensors.index.json",
             R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  SafetensorsModel m(dir.str());
  EXPECT_EQ(m.get("a", {2}).nbytes, 8u);
  EXPECT_EQ(m.get("b").shape, std::vector<int64_t>{1});
  EXPECT_THROW(m.get("c"), Error);
}

TEST(SafetensorsBadInput, TooShortForHeaderLength) {
  TempDir dir;
  write_file(dir.path() / "x", "abc");
  expect_error(dir.str("x"), "truncated");
}

TEST(SafetensorsBadInput, HeaderLengthBeyondFile) {
  TempDir dir;
  std::string f = make_file(R"({})", "");
  f[0] = '\xff';
  f[1] = '\xff';
  write_file(dir.path() / "x", f);
  expect_error(dir.str("x"), "header length");
}

TEST(SafetensorsBadInput, GarbledHeaderIsNotJson) {
  TempDir dir;
  write_file(dir.path() / "x", make_file("{\"a\": [1, 2", ""));
  expect_error(dir.str("x"), "not valid JSON");
}

TEST(SafetensorsBadInput, HeaderNotAnObject) {
  TempDir dir;
  write_file(dir.path() / "x", make_file("[1, 2]", ""));
  expect_error(dir.str("x"), "not a JSON object");
}

TEST(SafetensorsBadInput, UnknownDtypeNamesTensor) {
  TempDir dir;
  write_file(dir.path() / "x", make_file(R"({"w": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}})", "x"));
  expect_error(dir.str("x"), "'w' has unsupported dtype 'F8'");
}

TEST(SafetensorsBadInput, ShapeDisagreesWithByteLength) {
  TempDir dir;
  write_file(dir.path() / "x", make_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", std::string(8, '\0')));
  expect_error(dir.str("x"), "tensor 'w': shape [3] x F32 needs 12 bytes but data_offsets span 8");
}

TEST(SafetensorsBadInput, TruncatedDataSection) {
  TempDir dir;
  write_file(dir.path() / "x", make_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", std::string(10, '\0')));
  expect_error(dir.str("x"), "beyond the data section");
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  TempDir dir;
  write_file(dir.path() / "x",
             make_file(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
                       std::string(16, '\0')));
  expect_error(dir.str("x"), "overlap");
}

TEST(SafetensorsBadInput, OverlapWithNonAdjacentTensor) {
  TempDir dir;
  // a spans everything; b sits inside it after c.
  write_file(dir.path() / "x",
             make_file(R"({"a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},
                          "c": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]},
                          "b": {"dtype": "U8", "shape": [2], "data_offsets": [8, 10]}})",
                       std::string(16, '\0')));
  expect_error(dir.str("x"), "overlap");
}

TEST(SafetensorsBadInput, NegativeOrMalformedOffsets) {
  TempDir dir;
  write_file(dir.path() / "x", make_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", "x"));
  expect_error(dir.str("x"), "non-negative");
  write_file(dir.path() / "y", make_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [1]}})", "x"));
  expect_error(dir.str("y"), "two integers");
  write_file(dir.path() / "z", make_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 0]}})", "x"));
  expect_error(dir.str("z"), "> end");
}

TEST(SafetensorsBadInput, MissingFields) {
  TempDir dir;
  write_file(dir.path() / "x", make_file(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", "x"));
  expect_error(dir.str("x"), "'dtype'");
  write_file(dir.path() / "y", make_file(R"({"w": {"dtype": "U8", "data_offsets": [0, 1]}})", "x"));
  expect_error(dir.str("y"), "'shape'");
}

TEST(SafetensorsBadInput, IndexPointsAtShardWithoutTheTensor) {
  TempDir dir;
  std::vector<float> a = {1};
  write_safetensors(dir.str("s1.safetensors"), {{"a", DType::F32, {1}, a.data(), 4}});
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  try {
    SafetensorsModel m(dir.str());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'b' is listed in shard s1.safetensors"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsBadInput, IndexNamesMissingShard) {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map": {"a": "nope.safetensors"}})");
  try {
    SafetensorsModel m(dir.str());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.safetensors: cannot open"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsBadInput, IndexShardNameEscapesDirectory) {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map": {"a": "../etc/passwd"}})");
  EXPECT_THROW(SafetensorsModel m(dir.str()), Error);
}

TEST(SafetensorsBadInput, EmptyDirectory) {
  TempDir dir;
  try {
    SafetensorsModel m(dir.str());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no model.safetensors"), std::string::npos);
  }
}

}  // namespace splitspec::test
