#pragma once
// ReDrafter's draft head: one recurrent layer and a few residual SiLU blocks
// on the target's final hidden state h, held for the round:
//   s_1 = silu(W e(x_1) + b_s)        x_1: the target's own last token
//   s_t = silu(W e(x_t) + U s_{t-1} + b_s)
//   z_t = blocks(P [h, s_t] + b_p)    block: z + silu(B z + c)
//   logits_t = V_up (V_down z_t)      the next token's
// Where it differs from Apple's reference, and why:
// - the head owns a narrow token embedding (embed_dim) instead of reading the
//   target's: an edge client holds no target weights, and 8000 x 128 halves
//   the bytes of the demo target's 8000 x 256;
// - the vocabulary projection is low-rank (rank; 0: full): it is most of the
//   head's bytes and of its compute per drafted token;
// - weights are IEEE half and stay so in memory: the head only proposes, so
//   its precision never touches exactness, and half halves what each step
//   reads.
// Stored beside the target: recurrent_drafter.safetensors plus
// recurrent_drafter.json (sizes, the target's hidden size, vocabulary and
// tokenizer fingerprint, how it was trained).
#include <cstdint>
#include <string>
#include <vector>

namespace splitspec {

struct RecurrentHeadConfig {
  int64_t hidden_size = 0;  // the target's
  int64_t vocab_size = 0;   // the target's
  int64_t embed_dim = 128;  // token embedding and recurrent state
  int64_t exit_dim = 256;   // residual blocks
  int64_t num_blocks = 2;
  int64_t rank = 128;  // of the vocabulary projection; 0: full
  std::string tokenizer_fingerprint;  // the target's; empty: unchecked
  // Throws splitspec::Error naming the first bad size.
  void validate() const;
};

// One parameter: its name in the file and its shape.
struct HeadParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};
// Every parameter of a head of this config, in file order.
std::vector<HeadParam> recurrent_head_params(const RecurrentHeadConfig& c);

constexpr const char* kRecurrentHeadFile = "recurrent_drafter.safetensors";

class RecurrentHead {
 public:
  // `path`: a directory holding recurrent_drafter.safetensors and .json, or
  // the .safetensors file itself. Throws splitspec::Error for missing or
  // malformed files.
  static RecurrentHead load(const std::string& path);
  // Parameters as fp32 values in recurrent_head_params() order (training,
  // tests); stored as half.
  static RecurrentHead from_floats(const RecurrentHeadConfig& c, const std::vector<std::vector<float>>& params);
  // Small random weights, for tests.
  static RecurrentHead random(const RecurrentHeadConfig& c, uint64_t seed);
  // Writes DIR/recurrent_drafter.safetensors and .json; `training`, a JSON
  // object, is recorded as is.
  void save(const std::string& dir, const std::string& training_json = "{}") const;

  // Throws unless the head was trained for a target of this hidden size,
  // vocabulary and tokenizer (an empty fingerprint on either side is not
  // checked).
  void check_target(int64_t hidden_size, int64_t vocab_size, const std::string& tokenizer_fingerprint) const;

  const RecurrentHeadConfig& config() const { return c_; }
  const std::string& source() const { return source_; }
  size_t weight_bytes() const;

  // Working memory of one caller: a head is shared by a drafter and its
  // forks on other threads, so it keeps none of its own.
  struct Scratch {
    std::vector<float> a, b;
  };
  // states[n, embed_dim] <- the recurrent update with each row's next input
  // token; `first`: the states are fresh (no U s term).
  void advance(float* states, const int32_t* tokens, int64_t n, bool first, Scratch& scratch) const;
  // logits[n, vocab] of the token after each of n states, all under one
  // hidden state h[hidden_size].
  void logits(const float* h, const float* states, int64_t n, float* out, Scratch& scratch) const;

 private:
  RecurrentHeadConfig c_;
  std::string source_;
  std::vector<std::vector<uint16_t>> w_;  // recurrent_head_params() order, half
  std::vector<std::vector<float>> bias_;  // the same order; vectors only, widened
};

}  // namespace splitspec
