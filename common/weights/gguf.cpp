#include "common/weights/gguf.h"


#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/util/error.h"
#include "common/util/mapped_file.h"

namespace splitspec {

namespace {

constexpr uint64_t kAlignment = 32;
// Far beyond any real file's, so a corrupt count fails fast instead of
// allocating.
constexpr uint64_t kMaxTensors = 1 << 20;
constexpr uint64_t kMaxKeys = 1 << 16;

// Reads little-endian values from the mapped bytes, refusing to run past
// their end.
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size, const std::string& path) : base_(base), size_(size), path_(path) {}
  size_t pos() const { return pos_; }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }
  void need(uint64_t n, const char* what) const {
    if (n > size_ - pos_)
      throw Error(path_ + ": truncated GGUF file: " + what + " at byte " + std::to_string(pos_) + " runs past the end (" +
                  std::to_string(size_) + " bytes)");
  }

 private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    default: return 0;
  }
}

// A float's integer part, or 0 when it has none that fits.
int64_t integral(double v) { return std::isfinite(v) && std::fabs(v) < 9.2e18 ? static_cast<int64_t>(v) : 0; }

// A numeric scalar of type t as (double, int64).
void read_number(Cursor& c, GgufType t, double* num, int64_t* i) {
  switch (t) {
    case GgufType::kU8: *i = c.read<uint8_t>("value"); break;
    case GgufType::kI8: *i = c.read<int8_t>("value"); break;
    case GgufType::kU16: *i = c.read<uint16_t>("value"); break;
    case GgufType::kI16: *i = c.read<int16_t>("value"); break;
    case GgufType::kU32: *i = c.read<uint32_t>("value"); break;
    case GgufType::kI32: *i = c.read<int32_t>("value"); break;
    case GgufType::kU64: *i = static_cast<int64_t>(c.read<uint64_t>("value")); break;
    case GgufType::kI64: *i = c.read<int64_t>("value"); break;
    case GgufType::kBool: *i = c.read<uint8_t>("value") != 0; break;
    case GgufType::kF32: *num = c.read<float>("value"); *i = integral(*num); return;
    case GgufType::kF64: *num = c.read<double>("value"); *i = integral(*num); return;
    default: break;
  }
  *num = static_cast<double>(*i);
}

void put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string& out, T v) {
  put(out, &v, sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put(out, s.data(), s.size());
}

}  // namespace

uint64_t ggml_nbytes(uint32_t type, uint64_t elements) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return elements * 4;
    case GgmlType::kF16:
    case GgmlType::kBF16: return elements * 2;
    case GgmlType::kQ8_0: return elements / 32 * 34;
    case GgmlType::kQ4_0:
    case GgmlType::kIQ4_NL: return elements / 32 * 18;
    case GgmlType::kQ4_1: return elements / 32 * 20;
    case GgmlType::kQ5_0: return elements / 32 * 22;
    case GgmlType::kQ5_1: return elements / 32 * 24;
    case GgmlType::kIQ4_XS: return elements / 256 * 136;
    case GgmlType::kQ2_K: return elements / 256 * 84;
    case GgmlType::kQ3_K: return elements / 256 * 110;
    case GgmlType::kQ4_K: return elements / 256 * 144;
    case GgmlType::kQ5_K: return elements / 256 * 176;
    case GgmlType::kQ6_K: return elements / 256 * 210;
    case GgmlType::kI64: return elements * 8;  // EAGLE-3's d2t
  }
  return 0;
}

const char* ggml_type_name(uint32_t type) {
  switch (type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 29: return "IQ1_M";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    case 40: return "NVFP4";
    case 41: return "Q1_0";
    case 42: return "Q2_0";
    case 30: return "BF16";
    default: return "an unknown type";
  }
}

GgufFile::GgufFile(const std::string& path) : path_(path), file_(std::make_unique<MappedFile>(path)) {
  const size_t size = file_->size();
  if (size < 24)
    throw Error(path + ": not a GGUF file (" + std::to_string(size) + " bytes, shorter than a GGUF header)");
  {
    const uint8_t* base = file_->data();
    Cursor c(base, size, path_);
    if (std::memcmp(base, "GGUF", 4) != 0) throw Error(path + ": not a GGUF file (its first bytes are not 'GGUF')");
    c.read<uint32_t>("magic");
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3)
      throw Error(path + ": GGUF version " + std::to_string(version_) + " is not supported (2 and 3 are)");
    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    if (n_tensors > kMaxTensors || n_kv > kMaxKeys)
      throw Error(path + ": corrupt GGUF header (" + std::to_string(n_tensors) + " tensors, " + std::to_string(n_kv) +
                  " metadata entries)");
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = c.string("metadata key");
      if (key.empty() || kv_.count(key)) throw Error(path + ": metadata key '" + key + "' is empty or repeated");
      GgufValue v;
      v.type = static_cast<GgufType>(c.read<uint32_t>("value type"));
      if (v.type == GgufType::kString) {
        v.str = c.string("string value");
      } else if (v.type == GgufType::kArray) {
        v.elem = static_cast<GgufType>(c.read<uint32_t>("array type"));
        const uint64_t n = c.read<uint64_t>("array length");
        if (v.elem == GgufType::kString) {
          // Each string takes at least its 8-byte length.
          if (n > size / 8)
            throw Error(path + ": metadata '" + key + "' claims " + std::to_string(n) +
                        " strings, more than the file holds: truncated or corrupt");
          v.strs.reserve(n);
          for (uint64_t k = 0; k < n; ++k) v.strs.push_back(c.string("array string"));
        } else {
          const uint64_t es = scalar_size(v.elem);
          if (es == 0) throw Error(path + ": metadata '" + key + "' is an array of an unsupported type");
          if (n > size / es)
            throw Error(path + ": metadata '" + key + "' claims " + std::to_string(n) +
                        " values, more than the file holds: truncated or corrupt");
          c.need(n * es, "array");
          if (v.elem == GgufType::kU8 || v.elem == GgufType::kI8) {
            v.bytes.assign(reinterpret_cast<const char*>(base + c.pos()), n);
            for (uint64_t k = 0; k < n; ++k) c.read<uint8_t>("array");
          } else {
            v.nums.resize(n);
            for (uint64_t k = 0; k < n; ++k) {
              int64_t ignored = 0;
              read_number(c, v.elem, &v.nums[k], &ignored);
            }
          }
        }
      } else if (scalar_size(v.type) != 0) {
        read_number(c, v.type, &v.num, &v.i64);
      } else {
        throw Error(path + ": metadata '" + key + "' has unknown value type " + std::to_string(static_cast<uint32_t>(v.type)));
      }
      kv_.emplace(key, std::move(v));
    }
    uint64_t alignment = kAlignment;
    if (auto a = kv_.find("general.alignment"); a != kv_.end()) {
      alignment = static_cast<uint64_t>(a->second.i64);
      if (alignment == 0 || alignment > (1u << 20) || (alignment & (alignment - 1)) != 0)
        throw Error(path + ": general.alignment " + std::to_string(alignment) + " is not a power of two up to 1 MiB");
    }
    std::set<std::string> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensor t;
      t.name = c.string("tensor name");
      if (t.name.empty() || !names.insert(t.name).second)
        throw Error(path + ": tensor name '" + t.name + "' is empty or repeated");
      const uint32_t dims = c.read<uint32_t>("dimension count");
      if (dims == 0 || dims > 4) throw Error(path + ": tensor '" + t.name + "' has " + std::to_string(dims) + " dimensions");
      uint64_t elements = 1;
      for (uint32_t d = 0; d < dims; ++d) {
        const uint64_t n = c.read<uint64_t>("dimension");
        if (n == 0 || n > (uint64_t{1} << 40) || elements > (uint64_t{1} << 40) / n)
          throw Error(path + ": tensor '" + t.name + "' has an impossible shape");
        elements *= n;
        t.ne.push_back(static_cast<int64_t>(n));
      }
      t.type = c.read<uint32_t>("tensor type");
      t.offset = c.read<uint64_t>("tensor offset");
      t.nbytes = ggml_nbytes(t.type, elements);
      const bool blocks = t.type == static_cast<uint32_t>(GgmlType::kQ4_0) || t.type == static_cast<uint32_t>(GgmlType::kQ8_0);
      if (blocks && t.ne[0] % 32 != 0)
        throw Error(path + ": tensor '" + t.name + "' of type " + ggml_type_name(t.type) + " has rows of " +
                    std::to_string(t.ne[0]) + ", not a multiple of 32");
      tensors_.push_back(std::move(t));
    }
    const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
    for (GgufTensor& t : tensors_) {
      if (t.nbytes == 0) continue;  // an unknown type: named when a converter asks for it
      if (t.offset % alignment != 0 || data_start > size || t.offset > size - data_start ||
          t.nbytes > size - data_start - t.offset)
        throw Error(path + ": tensor '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes at offset " +
                    std::to_string(t.offset) + ") lies outside the file: truncated?");
      t.file_offset = data_start + t.offset;
      t.data = base + t.file_offset;
    }
  }
}

GgufFile::~GgufFile() = default;

const GgufValue& GgufFile::get(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) throw Error(path_ + ": GGUF metadata '" + key + "' is missing");
  return it->second;
}

void GgufFile::release(const GgufTensor& t) const { file_->release(t.data, t.nbytes); }

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void GgufWriter::key(const std::string& key, GgufType type) {
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
  ++kv_count_;
}

void GgufWriter::array(const std::string& key, GgufType elem, uint64_t count) {
  this->key(key, GgufType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(elem));
  put<uint64_t>(kv_, count);
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  this->key(key, GgufType::kString);
  put_string(kv_, v);
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  this->key(key, GgufType::kU32);
  put(kv_, v);
}

void GgufWriter::add_f32(const std::string& key, float v) {
  this->key(key, GgufType::kF32);
  put(kv_, v);
}

void GgufWriter::add_bool(const std::string& key, bool v) {
  this->key(key, GgufType::kBool);
  put<uint8_t>(kv_, v ? 1 : 0);
}

void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& v) {
  array(key, GgufType::kString, v.size());
  for (const auto& s : v) put_string(kv_, s);
}

void GgufWriter::add_f32s(const std::string& key, const std::vector<float>& v) {
  array(key, GgufType::kF32, v.size());
  put(kv_, v.data(), v.size() * sizeof(float));
}

void GgufWriter::add_i32s(const std::string& key, const std::vector<int32_t>& v) {
  array(key, GgufType::kI32, v.size());
  put(kv_, v.data(), v.size() * sizeof(int32_t));
}

void GgufWriter::add_bytes(const std::string& key, const std::string& v) {
  array(key, GgufType::kU8, v.size());
  put(kv_, v.data(), v.size());
}

void GgufWriter::add_value(const std::string& k, const GgufValue& v) {
  auto scalar = [&](GgufType t, double num, int64_t i64) {
    switch (t) {
      case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: { const uint8_t x = static_cast<uint8_t>(i64); put(kv_, &x, 1); break; }
      case GgufType::kU16: case GgufType::kI16: { const uint16_t x = static_cast<uint16_t>(i64); put(kv_, &x, 2); break; }
      case GgufType::kU32: case GgufType::kI32: { const uint32_t x = static_cast<uint32_t>(i64); put(kv_, &x, 4); break; }
      case GgufType::kU64: case GgufType::kI64: { const uint64_t x = static_cast<uint64_t>(i64); put(kv_, &x, 8); break; }
      case GgufType::kF32: { const float x = static_cast<float>(num); put(kv_, &x, 4); break; }
      case GgufType::kF64: put(kv_, &num, 8); break;
      default: throw Error("gguf: cannot copy metadata '" + k + "'");
    }
  };
  if (v.type == GgufType::kString) return add_string(k, v.str);
  if (v.type != GgufType::kArray) {
    key(k, v.type);
    return scalar(v.type, v.num, v.i64);
  }
  if (v.elem == GgufType::kString) return add_strings(k, v.strs);
  if (v.elem == GgufType::kU8 || v.elem == GgufType::kI8) {
    array(k, v.elem, v.bytes.size());
    put(kv_, v.bytes.data(), v.bytes.size());
    return;
  }
  array(k, v.elem, v.nums.size());
  for (double x : v.nums) scalar(v.elem, x, static_cast<int64_t>(x));
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type, const void* data,
                            uint64_t nbytes) {
  uint64_t elements = 1;
  for (int64_t n : ne) elements *= static_cast<uint64_t>(n);
  if (ggml_nbytes(static_cast<uint32_t>(type), elements) != nbytes)
    throw Error("gguf: tensor '" + name + "' has " + std::to_string(nbytes) + " bytes, not what its shape and type need");
  tensors_.push_back({name, ne, type, data, nbytes});
}

void GgufWriter::write(const std::string& path) const {
  std::string head;
  put(head, "GGUF", 4);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head += kv_;
  uint64_t offset = 0;
  auto padded = [](uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; };
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<uint64_t>(head, static_cast<uint64_t>(n));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset += padded(t.nbytes);
  }
  head.append(padded(head.size()) - head.size(), '\0');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp + ": cannot open for writing");
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    const std::string zeros(kAlignment, '\0');
    for (const Tensor& t : tensors_) {
      out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes));
      out.write(zeros.data(), static_cast<std::streamsize>(padded(t.nbytes) - t.nbytes));
    }
    out.flush();
    if (!out) throw Error(tmp + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": rename failed: " + ec.message());
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace splitspec
