// splitspec-spm-serve: the tokenizer's SentencePiece, in a process of its own,
// for builds that cannot load the isolated module (ASan and UBSan refuse
// dlopen with RTLD_DEEPBIND) or when SPLITSPEC_TOKENIZER_BACKEND=process.
// It links libsentencepiece directly: nothing here loads LibTorch's protobuf.
// One client, on the socket it is given as stdin and stdout; it serves frames
// (sentencepiece_wire.h) until the client closes it.
#include <sys/socket.h>

#include <iostream>
#include <memory>
#include <string>

#include "common/tokenizer/sentencepiece_backend.h"
#include "common/tokenizer/sentencepiece_wire.h"

extern "C" splitspec::SentencePieceBackend* splitspec_create_sentencepiece_backend();

namespace w = splitspec::spm_wire;

namespace {

// The reply to one request; false when the request is malformed.
bool serve(splitspec::SentencePieceBackend& sp, const std::string& request, std::string* reply) {
  if (request.empty()) return false;
  w::Reader args(request.data() + 1, request.size() - 1);
  switch (request[0]) {
    case w::kLoad: {
      std::string path;
      if (!args.str(&path) || !args.at_end()) return false;
      const std::string err = sp.load(path);
      w::put_str(reply, err);
      if (err.empty()) {
        w::put_u32(reply, static_cast<uint32_t>(sp.piece_size()));
        w::put_u32(reply, static_cast<uint32_t>(sp.bos_id()));
        w::put_u32(reply, static_cast<uint32_t>(sp.eos_id()));
        w::put_str(reply, sp.serialized_model());
      }
      return true;
    }
    case w::kEncode: {
      std::string text;
      if (!args.str(&text) || !args.at_end()) return false;
      std::vector<int> ids;
      const std::string err = sp.encode(text, &ids);
      w::put_str(reply, err);
      w::put_ids(reply, ids);
      return true;
    }
    case w::kDecode: {
      std::vector<int> ids;
      if (!args.ids(&ids) || !args.at_end()) return false;
      std::string text;
      const std::string err = sp.decode(ids, &text);
      w::put_str(reply, err);
      w::put_str(reply, text);
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char**) {
  int type = 0;
  socklen_t len = sizeof type;
  if (argc > 1 || getsockopt(0, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
    std::cerr << "splitspec-spm-serve: the tokenizer starts this helper itself, with a socket as its stdin;"
                 " it takes no arguments\n";
    return 2;
  }
  std::unique_ptr<splitspec::SentencePieceBackend> sp(splitspec_create_sentencepiece_backend());
  std::string request;
  while (w::recv_frame(0, &request)) {
    std::string reply;
    if (!serve(*sp, request, &reply)) {
      std::cerr << "splitspec-spm-serve: malformed request, closing\n";
      return 1;
    }
    if (!w::send_frame(1, reply)) return 1;
  }
  return 0;
}
