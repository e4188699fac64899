#include "common/engine/gguf_convert.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/engine/gguf.h"
#include "common/engine/model_config.h"
#include "common/engine/tokenizer.h"
#include "common/engine/weight_set.h"
#include "common/util/error.h"
#include "proto/sentencepiece_model.pb.h"

namespace fs = std::filesystem;

namespace splitspec {

namespace {

constexpr const char* kSpmKey = "splitspec.tokenizer.sentencepiece_model";

GgmlType ggml_of(WType t) {
  switch (t) {
    case WType::F32: return GgmlType::kF32;
    case WType::F16: return GgmlType::kF16;
    case WType::BF16: return GgmlType::kBF16;
    case WType::Q8_0: return GgmlType::kQ8_0;
    case WType::Q4_0: return GgmlType::kQ4_0;
  }
  return GgmlType::kF32;
}

std::optional<WType> wtype_of(uint32_t ggml) {
  switch (static_cast<GgmlType>(ggml)) {
    case GgmlType::kF32: return WType::F32;
    case GgmlType::kF16: return WType::F16;
    case GgmlType::kBF16: return WType::BF16;
    case GgmlType::kQ8_0: return WType::Q8_0;
    case GgmlType::kQ4_0: return WType::Q4_0;
  }
  return std::nullopt;
}

uint32_t file_type(WType t) {  // llama.cpp's general.file_type
  switch (t) {
    case WType::F32: return 0;
    case WType::F16: return 1;
    case WType::Q4_0: return 2;
    case WType::Q8_0: return 7;
    case WType::BF16: return 32;
  }
  return 0;
}

// llama.cpp's llama architecture rotates adjacent pairs where Hugging Face's
// rotates halves: within each head, GGUF row 2i + j is HF row j * hd/2 + i.
std::vector<uint8_t> permute_rows(const std::vector<uint8_t>& rows, int64_t heads, int64_t head_dim, int64_t rb,
                                  bool to_gguf) {
  std::vector<uint8_t> out(rows.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t gguf = h * head_dim + 2 * i + j, hf = h * head_dim + j * head_dim / 2 + i;
        const int64_t from = to_gguf ? hf : gguf, to = to_gguf ? gguf : hf;
        std::memcpy(out.data() + to * rb, rows.data() + from * rb, static_cast<size_t>(rb));
      }
  return out;
}

std::string gguf_name(const std::string& hf) {
  if (hf == kEmbedName) return "token_embd.weight";
  if (hf == kHeadName) return "output.weight";
  if (hf == kFinalNormName) return "output_norm.weight";
  static const std::pair<const char*, const char*> kParts[] = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},   {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size()), part = hf.substr(dot + 1);
  for (const auto& [from, to] : kParts)
    if (part == from) return "blk." + layer + "." + to;
  throw Error("gguf: no GGUF name for '" + hf + "'");
}

// Query rows permute by attention heads, key rows by key-value heads.
int64_t permute_heads(const std::string& hf, const ModelConfig& c) {
  if (hf.find("self_attn.q_proj") != std::string::npos) return c.num_attention_heads;
  if (hf.find("self_attn.k_proj") != std::string::npos) return c.num_key_value_heads;
  return 0;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void export_gguf(const std::string& dir, const std::string& out, std::optional<WType> type) {
  const ModelConfig c = load_model_config(dir);
  if (c.head_dim % 2 != 0) throw Error(dir + ": head_dim must be even for RoPE");
  const WeightSet w = load_weight_set(dir, c, type);
  const fs::path tok_path = fs::path(dir) / "tokenizer.model";
  const std::string spm_bytes = read_file(tok_path);
  spm::ModelProto spm;
  if (!spm.ParseFromString(spm_bytes)) throw Error(tok_path.string() + ": not a SentencePiece model");
  if (spm.trainer_spec().model_type() != spm::TrainerSpec::BPE)
    throw Error(tok_path.string() + ": llama.cpp's llama tokenizer reproduces SentencePiece BPE models only");
  // llama.cpp applies no normalisation but the whitespace escape: a model
  // that normalises (NFKC, collapsing spaces) would tokenize differently there.
  const auto& ns = spm.normalizer_spec();
  if ((ns.has_name() && ns.name() != "identity") || !ns.precompiled_charsmap().empty() || ns.remove_extra_whitespaces() ||
      !ns.escape_whitespaces())
    throw Error(tok_path.string() + ": its normalizer ('" + ns.name() +
                "', or removing extra whitespace) is one llama.cpp does not apply; only identity normalisation exports");
  if (spm.pieces_size() != c.vocab_size)
    throw Error(tok_path.string() + ": " + std::to_string(spm.pieces_size()) + " pieces for a vocabulary of " +
                std::to_string(c.vocab_size));

  GgufWriter g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.name", fs::path(dir).filename().string());
  g.add_u32("general.file_type", file_type(w.type()));
  g.add_u32("general.quantization_version", 2);
  g.add_u32("llama.context_length", static_cast<uint32_t>(c.max_position_embeddings));
  g.add_u32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
  g.add_u32("llama.block_count", static_cast<uint32_t>(c.num_hidden_layers));
  g.add_u32("llama.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  g.add_u32("llama.attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  g.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  g.add_u32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    g.add_u32("llama.attention.key_length", static_cast<uint32_t>(c.head_dim));
    g.add_u32("llama.attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  g.add_f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  g.add_f32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  g.add_u32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));

  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& p : spm.pieces()) {
    tokens.push_back(p.piece());
    scores.push_back(p.score());
    types.push_back(static_cast<int32_t>(p.type()));
  }
  g.add_string("tokenizer.ggml.model", "llama");
  g.add_string("tokenizer.ggml.pre", "default");
  g.add_strings("tokenizer.ggml.tokens", tokens);
  g.add_f32s("tokenizer.ggml.scores", scores);
  g.add_i32s("tokenizer.ggml.token_type", types);
  const auto& ts = spm.trainer_spec();
  g.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(ts.bos_id()));
  g.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(ts.eos_id()));
  g.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(ts.unk_id()));
  if (ts.pad_id() >= 0) g.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(ts.pad_id()));
  g.add_bool("tokenizer.ggml.add_bos_token", true);
  g.add_bool("tokenizer.ggml.add_eos_token", false);
  g.add_bool("tokenizer.ggml.add_space_prefix", spm.normalizer_spec().add_dummy_prefix());
  g.add_bytes(kSpmKey, spm_bytes);

  std::vector<std::vector<uint8_t>> keep;  // alive until written
  auto matrix = [&](const std::string& hf, const MatrixRef& m, WType to) {
    keep.push_back(plain_bytes(m, to, dir + ": " + hf));
    if (const int64_t heads = permute_heads(hf, c))
      keep.back() = permute_rows(keep.back(), heads, c.head_dim, row_bytes(to, m.cols), true);
    g.add_tensor(gguf_name(hf), {m.cols, m.rows}, ggml_of(to), keep.back().data(), keep.back().size());
  };
  auto norm = [&](const std::string& hf, const float* v) {
    g.add_tensor(gguf_name(hf), {c.hidden_size}, GgmlType::kF32, v, static_cast<uint64_t>(c.hidden_size) * 4);
  };
  auto as = [&](const MatrixRef& m, bool head) { return type ? (head ? head_type(*type) : *type) : m.type; };
  matrix(kEmbedName, w.embed, as(w.embed, c.tie_word_embeddings));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    norm(layer_norm_name(l, false), w.input_norm(l));
    for (int m = 0; m < kLayerMatrices; ++m)
      matrix(layer_matrix_name(l, static_cast<LayerMatrix>(m)), w.layers[l][m], as(w.layers[l][m], false));
    norm(layer_norm_name(l, true), w.post_norm(l));
  }
  norm(kFinalNormName, w.final_norm());
  // llama.cpp uses token_embd for the output when output.weight is absent.
  if (!c.tie_word_embeddings) matrix(kHeadName, w.lm_head, as(w.lm_head, true));
  g.write(out);
}

namespace {

uint32_t meta_u32(const GgufFile& f, const std::string& key, std::optional<uint32_t> fallback = std::nullopt) {
  if (!f.has(key)) {
    if (fallback) return *fallback;
    f.get(key);  // throws, naming the key
  }
  const GgufValue& v = f.get(key);
  if (v.type == GgufType::kString || v.type == GgufType::kArray || v.i64 < 0 || v.i64 > UINT32_MAX ||
      v.num != static_cast<double>(v.i64))
    throw Error(f.path() + ": GGUF metadata '" + key + "' is not a count");
  return static_cast<uint32_t>(v.i64);
}

double meta_f(const GgufFile& f, const std::string& key, double fallback) {
  if (!f.has(key)) return fallback;
  const GgufValue& v = f.get(key);
  if (v.type == GgufType::kString || v.type == GgufType::kArray || !std::isfinite(v.num))
    throw Error(f.path() + ": GGUF metadata '" + key + "' is not a number");
  return v.num;
}

// tokenizer.model for the GGUF's vocabulary: ours as it was written, or one
// built from tokenizer.ggml.* that SentencePiece encodes as llama.cpp's
// llama tokenizer does (BPE merges by score, identity normalisation,
// whitespace as U+2581, a leading space unless add_space_prefix is false).
std::string spm_model(const GgufFile& f, int64_t vocab) {
  if (f.has(kSpmKey)) return f.get(kSpmKey).bytes;
  const std::string model = f.get("tokenizer.ggml.model").str;
  if (model != "llama")
    throw Error(f.path() + ": tokenizer '" + model + "' is not supported (SentencePiece-style 'llama' vocabularies are)");
  const GgufValue& tokens = f.get("tokenizer.ggml.tokens");
  if (tokens.elem != GgufType::kString || static_cast<int64_t>(tokens.strs.size()) != vocab)
    throw Error(f.path() + ": tokenizer.ggml.tokens has " + std::to_string(tokens.strs.size()) + " tokens for a vocabulary of " +
                std::to_string(vocab));
  const GgufValue* scores = f.has("tokenizer.ggml.scores") ? &f.get("tokenizer.ggml.scores") : nullptr;
  const GgufValue* types = f.has("tokenizer.ggml.token_type") ? &f.get("tokenizer.ggml.token_type") : nullptr;
  if ((scores && scores->nums.size() != tokens.strs.size()) || (types && types->nums.size() != tokens.strs.size()))
    throw Error(f.path() + ": tokenizer scores or token types do not match the token count");
  spm::ModelProto p;
  bool bytes = false;
  for (size_t i = 0; i < tokens.strs.size(); ++i) {
    auto* piece = p.add_pieces();
    piece->set_piece(tokens.strs[i]);
    piece->set_score(scores ? static_cast<float>(scores->nums[i]) : 0.0f);
    const double tv = types ? types->nums[i] : 1.0;
    const int t = tv >= 1 && tv <= 6 ? static_cast<int>(tv) : 1;
    piece->set_type(static_cast<spm::ModelProto::SentencePiece::Type>(t));
    bytes |= t == 6;
  }
  auto* ts = p.mutable_trainer_spec();
  ts->set_model_type(spm::TrainerSpec::BPE);
  ts->set_vocab_size(static_cast<int32_t>(vocab));
  ts->set_byte_fallback(bytes);
  auto id = [&](const char* key, int32_t fallback) {
    return f.has(key) ? static_cast<int32_t>(meta_u32(f, key)) : fallback;
  };
  ts->set_unk_id(id("tokenizer.ggml.unknown_token_id", 0));
  ts->set_bos_id(id("tokenizer.ggml.bos_token_id", 1));
  ts->set_eos_id(id("tokenizer.ggml.eos_token_id", 2));
  ts->set_pad_id(id("tokenizer.ggml.padding_token_id", -1));
  // SentencePiece finds the special ids by their pieces' text.
  auto piece = [&](int32_t pid) { return pid >= 0 && pid < vocab ? tokens.strs[static_cast<size_t>(pid)] : std::string(); };
  if (!piece(ts->unk_id()).empty()) ts->set_unk_piece(piece(ts->unk_id()));
  if (!piece(ts->bos_id()).empty()) ts->set_bos_piece(piece(ts->bos_id()));
  if (!piece(ts->eos_id()).empty()) ts->set_eos_piece(piece(ts->eos_id()));
  auto* ns = p.mutable_normalizer_spec();
  ns->set_name("identity");
  ns->set_add_dummy_prefix(!f.has("tokenizer.ggml.add_space_prefix") || f.get("tokenizer.ggml.add_space_prefix").i64 != 0);
  ns->set_remove_extra_whitespaces(false);
  ns->set_escape_whitespaces(true);
  return p.SerializeAsString();
}

}  // namespace

void import_gguf(const std::string& path, const std::string& out_dir, std::optional<WType> type) {
  const GgufFile f(path);
  const std::string arch = f.get("general.architecture").str;
  if (arch != "llama") throw Error(path + ": architecture '" + arch + "' is not supported (llama is)");
  if (f.has("llama.rope.scaling.type") && f.get("llama.rope.scaling.type").str != "none")
    throw Error(path + ": RoPE scaling '" + f.get("llama.rope.scaling.type").str + "' is not supported");
  const GgufTensor* embed = f.tensor("token_embd.weight");
  if (!embed || embed->ne.size() != 2) throw Error(path + ": tensor 'token_embd.weight' is missing or not a matrix");

  ModelConfig c;
  c.hidden_size = meta_u32(f, "llama.embedding_length");
  c.intermediate_size = meta_u32(f, "llama.feed_forward_length");
  c.num_hidden_layers = meta_u32(f, "llama.block_count");
  c.num_attention_heads = meta_u32(f, "llama.attention.head_count");
  c.num_key_value_heads = meta_u32(f, "llama.attention.head_count_kv", static_cast<uint32_t>(c.num_attention_heads));
  if (c.num_attention_heads <= 0) throw Error(path + ": llama.attention.head_count must be positive");
  c.head_dim = meta_u32(f, "llama.attention.key_length", static_cast<uint32_t>(c.hidden_size / c.num_attention_heads));
  if (meta_u32(f, "llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim)) != c.head_dim)
    throw Error(path + ": partial rotary embeddings (llama.rope.dimension_count below the head size) are not supported");
  c.vocab_size = embed->ne[1];
  c.rms_norm_eps = meta_f(f, "llama.attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = meta_f(f, "llama.rope.freq_base", 10000.0);
  c.max_position_embeddings = meta_u32(f, "llama.context_length");
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  c.bos_token_id = f.has("tokenizer.ggml.bos_token_id") ? meta_u32(f, "tokenizer.ggml.bos_token_id") : 1;
  c.eos_token_id = f.has("tokenizer.ggml.eos_token_id") ? meta_u32(f, "tokenizer.ggml.eos_token_id") : 2;
  c.validate(path);

  std::vector<std::vector<uint8_t>> keep;  // un-permuted rows
  auto source = [&](const std::string& hf, const std::vector<int64_t>& shape) -> MatrixRef {
    const std::string name = gguf_name(hf);
    const GgufTensor* t = f.tensor(name);
    if (!t) throw Error(path + ": tensor '" + name + "' is missing");
    const std::vector<int64_t> want = shape.size() == 2 ? std::vector<int64_t>{shape[1], shape[0]} : shape;
    if (t->ne != want)
      throw Error(path + ": tensor '" + name + "' has shape " + shape_str(t->ne) + " (ggml order), expected " +
                  shape_str(want));
    const auto wt = wtype_of(t->type);
    if (!wt)
      throw Error(path + ": tensor '" + name + "' is " + ggml_type_name(t->type) +
                  ", which SplitSpec does not read; requantize it to q8_0 or q4_0 with llama.cpp first (llama-quantize "
                  "--pure keeps the output tensor at the same type)");
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    MatrixRef m{*wt, t->data, rows, shape.back()};
    if (const int64_t heads = permute_heads(hf, c)) {
      const auto* p = static_cast<const uint8_t*>(t->data);
      keep.push_back(permute_rows(std::vector<uint8_t>(p, p + t->nbytes), heads, c.head_dim, row_bytes(*wt, m.cols), false));
      m.data = keep.back().data();
    }
    return m;
  };
  const WeightSet w = build_weight_set(c, source, type, true, path);
  const std::string spm = spm_model(f, c.vocab_size);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create directory: " + ec.message());
  {
    std::ofstream tok(fs::path(out_dir) / "tokenizer.model", std::ios::binary | std::ios::trunc);
    tok.write(spm.data(), static_cast<std::streamsize>(spm.size()));
    if (!tok) throw Error(out_dir + ": cannot write tokenizer.model");
  }
  save_weight_set(w, c, out_dir, type);
  const Tokenizer check(out_dir);  // refuses a vocabulary SentencePiece cannot load
  if (check.vocab_size() != c.vocab_size)
    throw Error(path + ": the vocabulary has " + std::to_string(check.vocab_size()) + " tokens, the model " +
                std::to_string(c.vocab_size));
}

}  // namespace splitspec
