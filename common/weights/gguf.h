#pragma once
// The GGUF container (llama.cpp's model file), version 2 and 3, read and
// written: typed metadata, tensor descriptions and aligned tensor data. Our
// own reader and writer; gguf_convert.h maps LLaMA models to and from it.
// Free of LibTorch.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace splitspec {

class MappedFile;

// GGUF's metadata value types.
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// ggml's tensor types that SplitSpec reads and writes.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11, kQ4_K = 12,
  kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20, kIQ4_XS = 23, kI64 = 27, kBF16 = 30
};

// One metadata value: a scalar (in `num`/`str`) or an array of them.
struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType elem = GgufType::kU32;  // of an array
  double num = 0;                  // every numeric scalar and bool, exactly (64-bit integers above 2^53 excepted)
  int64_t i64 = 0;                 // integer scalars, exactly
  std::string str;
  std::vector<double> nums;        // numeric arrays
  std::vector<std::string> strs;   // string arrays
  std::string bytes;               // u8/i8 arrays, as they are
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the innermost (a row's length)
  uint32_t type = 0;        // ggml type number (any: the reader does not judge)
  uint64_t offset = 0;      // from the data section's start
  uint64_t nbytes = 0;      // 0 for a type this reader does not know
  const uint8_t* data = nullptr;
  uint64_t file_offset = 0;  // of data, from the file's start
};

// A mapped GGUF file, checked on open: magic, version, counts, string and
// array lengths, names, dimensions and every known tensor's bytes inside the
// file. Throws splitspec::Error naming the file and what is wrong.
class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  // The value of `key`; throws naming the file and key if it is missing.
  const GgufValue& get(const std::string& key) const;
  // A tensor by name, or null.
  const GgufTensor* tensor(const std::string& name) const;
  // Frees the parsed metadata (a vocabulary's pieces and merges are tens of
  // megabytes) once it has been read, for a file kept open for its tensors.
  void forget_metadata() { std::map<std::string, GgufValue>().swap(kv_); }
  // Drops the tensor's pages from this process's memory (the file keeps
  // them; a later read maps them in again): for tensors a model copied.
  void release(const GgufTensor& t) const;

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
};

// Writes a GGUF v3 file (alignment 32) atomically: metadata in the order
// added, tensors in the order added, each padded to the alignment.
class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  void add_bytes(const std::string& key, const std::string& v);
  // A value read from another file, as it was (copying its tokenizer).
  void add_value(const std::string& key, const GgufValue& v);
  // `data` (nbytes) must stay valid until write().
  void add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type, const void* data,
                  uint64_t nbytes);
  void write(const std::string& path) const;

 private:
  // Starts a pair: the key and its value's type.
  void key(const std::string& key, GgufType type);
  // Starts an array pair of `count` elements of type `elem`.
  void array(const std::string& key, GgufType elem, uint64_t count);

  std::string kv_;  // encoded pairs
  uint64_t kv_count_ = 0;
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    const void* data;
    uint64_t nbytes;
  };
  std::vector<Tensor> tensors_;
};

// Bytes of a tensor of ggml type `type` with `elements` values, or 0 when
// the type is not one of GgmlType's.
uint64_t ggml_nbytes(uint32_t type, uint64_t elements);
const char* ggml_type_name(uint32_t type);

// Whether `path` names a GGUF file (by its magic, not its name).
bool is_gguf_file(const std::string& path);

}  // namespace splitspec
