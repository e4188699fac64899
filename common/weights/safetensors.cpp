#include "common/weights/safetensors.h"


#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/util/error.h"
#include "common/util/mapped_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace splitspec {

namespace {

// A header larger than this is certainly corrupt; real ones are kilobytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

DType parse_dtype(const std::string& s, const std::string& file, const std::string& tensor) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "I64") return DType::I64;
  if (s == "I32") return DType::I32;
  if (s == "U8") return DType::U8;
  throw Error(file + ": tensor '" + tensor + "' has unsupported dtype '" + s +
              "' (supported: F32, F16, BF16, I64, I32, U8)");
}

}  // namespace

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
  }
  return "?";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string wtype_metadata_key(const std::string& name) { return "splitspec.wtype." + name; }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), file_(std::make_unique<MappedFile>(path)) {
  const size_t map_size_ = file_->size();
  if (map_size_ < 8)
    throw Error(path + ": truncated safetensors file (" + std::to_string(map_size_) +
                " bytes, need at least the 8-byte header length)");
  {
    const uint8_t* base = file_->data();
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
    if (header_len > kMaxHeaderBytes || header_len > map_size_ - 8) {
      throw Error(path + ": corrupt safetensors header length " + std::to_string(header_len) +
                  " (file is " + std::to_string(map_size_) + " bytes)");
    }
    json header;
    try {
      header = json::parse(base + 8, base + 8 + header_len);
    } catch (const json::exception& e) {
      throw Error(path + ": safetensors header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) throw Error(path + ": safetensors header is not a JSON object");

    const uint8_t* data = base + 8 + header_len;
    const uint64_t data_size = map_size_ - 8 - header_len;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::vector<std::string> range_names;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        if (!it->is_object()) throw Error(path + ": __metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!m->is_string()) throw Error(path + ": __metadata__ value '" + m.key() + "' is not a string");
          metadata_[m.key()] = m->get<std::string>();
        }
        continue;
      }
      const json& e = *it;
      auto bad = [&](const std::string& why) {
        return Error(path + ": tensor '" + name + "': " + why);
      };
      if (!e.is_object()) throw bad("entry is not an object");
      if (!e.contains("dtype") || !e["dtype"].is_string()) throw bad("missing or non-string 'dtype'");
      if (!e.contains("shape") || !e["shape"].is_array()) throw bad("missing or non-array 'shape'");
      if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
        throw bad("'data_offsets' must be an array of two integers");
      TensorInfo t;
      t.name = name;
      t.file = path;
      t.dtype = parse_dtype(e["dtype"].get<std::string>(), path, name);
      uint64_t numel = 1;
      for (const auto& d : e["shape"]) {
        if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
          throw bad("shape entries must be non-negative integers");
        const uint64_t dim = d.get<uint64_t>();
        if (dim != 0 && numel > (UINT64_MAX / dim)) throw bad("shape overflows");
        numel *= dim;
        t.shape.push_back(static_cast<int64_t>(dim));
      }
      for (const auto& o : e["data_offsets"])
        if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
          throw bad("data_offsets must be non-negative integers");
      const uint64_t begin = e["data_offsets"][0].get<uint64_t>();
      const uint64_t end = e["data_offsets"][1].get<uint64_t>();
      if (begin > end) throw bad("data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
      if (end > data_size)
        throw bad("data_offsets end " + std::to_string(end) + " beyond the data section (" +
                  std::to_string(data_size) + " bytes): file truncated?");
      const uint64_t expect = numel * dtype_size(t.dtype);
      if (expect / dtype_size(t.dtype) != numel || expect != end - begin)
        throw bad("shape " + shape_str(t.shape) + " x " + dtype_name(t.dtype) + " needs " +
                  std::to_string(expect) + " bytes but data_offsets span " + std::to_string(end - begin));
      t.data = data + begin;
      t.nbytes = end - begin;
      t.file_offset = 8 + header_len + begin;
      ranges.emplace_back(begin, end);
      range_names.push_back(name);
      tensors_.emplace(name, std::move(t));
    }
    for (auto& [name, t] : tensors_) {
      auto q = metadata_.find(wtype_metadata_key(name));
      if (q != metadata_.end()) t.wtype = q->second;
    }
    std::vector<size_t> order(ranges.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
    // Track the furthest end seen so far so that a long tensor overlapping a
    // later, non-adjacent one is caught too. Empty tensors overlap nothing.
    uint64_t max_end = 0;
    size_t max_end_owner = 0;
    for (size_t i : order) {
      const auto& cur = ranges[i];
      if (cur.second == cur.first) continue;
      if (cur.first < max_end)
        throw Error(path + ": tensors '" + range_names[max_end_owner] + "' and '" + range_names[i] +
                    "' overlap in the data section");
      max_end = cur.second;
      max_end_owner = i;
    }
  }
}

SafetensorsFile::~SafetensorsFile() = default;

SafetensorsModel::SafetensorsModel(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    description_ = single.string();
  } else if (fs::exists(index)) {
    json j;
    {
      std::ifstream in(index);
      try {
        j = json::parse(in);
      } catch (const json::exception& e) {
        throw Error(index.string() + ": not valid JSON: " + e.what());
      }
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index.string() + ": missing object 'weight_map'");
    std::map<std::string, size_t> shard_of_file;
    std::map<std::string, std::string> expected;  // tensor -> shard file name
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) throw Error(index.string() + ": weight_map['" + it.key() + "'] is not a string");
      const std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
        throw Error(index.string() + ": shard name '" + shard + "' must be a plain file name");
      expected[it.key()] = shard;
      if (!shard_of_file.count(shard)) {
        shard_of_file[shard] = files_.size();
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard).string()));
      }
    }
    for (const auto& [tensor, shard] : expected) {
      const auto& f = *files_[shard_of_file[shard]];
      if (!f.tensors().count(tensor))
        throw Error(index.string() + ": tensor '" + tensor + "' is listed in shard " + shard +
                    " but that file does not contain it");
    }
    description_ = index.string();
  } else {
    throw Error(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const auto& f : files_) {
    for (const auto& [name, info] : f->tensors()) {
      if (!index_.emplace(name, &info).second)
        throw Error(description_ + ": tensor '" + name + "' appears in more than one shard");
    }
  }
}

bool SafetensorsModel::has(const std::string& name) const { return index_.count(name) != 0; }

const TensorInfo& SafetensorsModel::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(description_ + ": missing tensor '" + name + "'");
  return *it->second;
}

const TensorInfo& SafetensorsModel::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& t = get(name);
  if (t.shape != shape)
    throw Error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " +
                shape_str(shape));
  return t;
}

void SafetensorsFile::release(const TensorInfo& t) const { file_->release(t.data, t.nbytes); }

void SafetensorsModel::release(const std::string& name) const {
  const TensorInfo& t = get(name);
  for (const auto& f : files_)
    if (f->path() == t.file) f->release(t);
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : index_) out.push_back(n);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel * dtype_size(t.dtype) != t.nbytes)
      throw Error(path + ": tensor '" + t.name + "' byte size does not match its shape");
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string hs = header.dump();
  hs.append((8 - (8 + hs.size()) % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp + ": cannot open for writing");
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(hs.size() >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes));
    out.flush();
    if (!out) throw Error(tmp + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path + ": rename failed: " + ec.message());
}

}  // namespace splitspec
