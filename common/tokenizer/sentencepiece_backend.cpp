// Built only into the isolated sentencepiece module; see sentencepiece_backend.h.
#include "common/tokenizer/sentencepiece_backend.h"

#include <sentencepiece_processor.h>

namespace splitspec {
namespace {

class Backend final : public SentencePieceBackend {
 public:
  std::string load(const std::string& path) override {
    auto s = sp_.Load(path);
    return s.ok() ? "" : s.ToString();
  }
  std::string encode(const std::string& text, std::vector<int>* ids) const override {
    auto s = sp_.Encode(text, ids);
    return s.ok() ? "" : s.ToString();
  }
  std::string decode(const std::vector<int>& ids, std::string* text) const override {
    auto s = sp_.Decode(ids, text);
    return s.ok() ? "" : s.ToString();
  }
  int piece_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  std::string serialized_model() const override { return sp_.serialized_model_proto(); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace
}  // namespace splitspec

extern "C" __attribute__((visibility("default"))) splitspec::SentencePieceBackend* splitspec_create_sentencepiece_backend() {
  return new splitspec::Backend();
}
