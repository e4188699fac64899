#pragma once
// Framing between the tokenizer and splitspec-spm-serve, the helper process
// that runs SentencePiece where the module cannot be loaded (sanitizer
// builds; see sentencepiece_backend.h). Header-only so that the helper links
// nothing of ours but this and the backend. Frames are a u32 length and that
// many bytes; fields are little-endian u32/i32 and length-prefixed strings.
// Both ends run from the same build, so the format carries no version.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace splitspec::spm_wire {

enum Op : char { kLoad = 'L', kEncode = 'E', kDecode = 'D' };

// Far above any prompt or model; a length beyond it means a broken stream.
constexpr uint32_t kMaxFrame = 1u << 30;

inline void put_u32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_str(std::string* out, const std::string& s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}
inline void put_ids(std::string* out, const std::vector<int>& ids) {
  put_u32(out, static_cast<uint32_t>(ids.size()));
  for (int id : ids) put_u32(out, static_cast<uint32_t>(id));
}

// Reads fields off a received frame; each getter fails, rather than reads
// past the end, on a truncated frame.
class Reader {
 public:
  explicit Reader(const std::string& frame) : Reader(frame.data(), frame.size()) {}
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  bool u32(uint32_t* v) {
    if (end_ - p_ < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += 4;
    return true;
  }
  bool i32(int* v) {
    uint32_t u;
    if (!u32(&u)) return false;
    *v = static_cast<int>(u);
    return true;
  }
  bool str(std::string* s) {
    uint32_t n;
    if (!u32(&n) || static_cast<size_t>(end_ - p_) < n) return false;
    s->assign(p_, n);
    p_ += n;
    return true;
  }
  bool ids(std::vector<int>* v) {
    uint32_t n;
    if (!u32(&n) || static_cast<size_t>(end_ - p_) / 4 < n) return false;
    v->resize(n);
    for (auto& id : *v) i32(&id);
    return true;
  }
  bool at_end() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

// MSG_NOSIGNAL: a peer that is gone is an error to report, not a SIGPIPE.
inline bool send_frame(int fd, const std::string& payload) {
  std::string buf;
  buf.reserve(payload.size() + 4);
  put_u32(&buf, static_cast<uint32_t>(payload.size()));
  buf += payload;
  for (size_t off = 0; off < buf.size();) {
    const ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// False at end of stream, on an error, or on a frame longer than kMaxFrame.
inline bool recv_frame(int fd, std::string* payload) {
  char len[4];
  if (!recv_all(fd, len, 4)) return false;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(len[i])) << (8 * i);
  if (n > kMaxFrame) return false;
  payload->resize(n);
  return recv_all(fd, payload->data(), n);
}

}  // namespace splitspec::spm_wire
