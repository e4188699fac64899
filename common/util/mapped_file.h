#pragma once
// A regular file mapped read-only (MAP_PRIVATE), unmapped when destroyed:
// the model readers' view of their files.
#include <cstddef>
#include <cstdint>
#include <string>

namespace splitspec {

class MappedFile {
 public:
  // Throws splitspec::Error naming `path` if it cannot be opened, is not a
  // regular file, or cannot be mapped. An empty file maps to no bytes.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  size_t size() const { return size_; }
  // Drops the whole pages within [p, p + bytes) (inside this mapping) from
  // the resident set; read again, they come back from the file. For bytes
  // already copied elsewhere, so that a copy does not cost twice the memory.
  void release(const void* p, size_t bytes) const;

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace splitspec
