#pragma once
// Memory-mapped reader for the safetensors format, single file or sharded
// (model.safetensors.index.json). Free of LibTorch so that it stays cheap to
// compile and can be reused by the disk-streaming target.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace splitspec {

class MappedFile;

enum class DType { F32, F16, BF16, I64, I32, U8 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);

struct TensorInfo {
  std::string name;
  std::string file;  // path of the file holding it, for error messages
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;  // points into the mapping
  size_t nbytes;
  uint64_t file_offset;  // absolute byte offset in `file`
  // A quantized weight type stored as U8 rows ("q8_0", "q4_0"): the file's
  // __metadata__ entry "splitspec.wtype.<name>". Empty otherwise.
  std::string wtype;
  int64_t numel() const;
};

// The metadata key that marks tensor `name` as stored in a quantized type.
std::string wtype_metadata_key(const std::string& name);

// One mapped .safetensors file. The header is validated completely on open.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Drops the tensor's pages from the resident set (MappedFile::release).
  void release(const TensorInfo& t) const;

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory: model.safetensors, or the shards listed in
// model.safetensors.index.json.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir);

  bool has(const std::string& name) const;
  // Throws splitspec::Error naming the tensor and the files searched.
  const TensorInfo& get(const std::string& name) const;
  // get() plus a shape check, with an error naming file, tensor and both shapes.
  const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;
  const std::string& description() const { return description_; }
  // Drops tensor `name`'s pages from the resident set, once copied elsewhere.
  void release(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
  std::string description_;
};

// Writes tensors as one safetensors file (little-endian, 8-byte aligned
// offsets), atomically via a temporary file and rename.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace splitspec
