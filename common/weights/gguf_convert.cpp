#include "common/weights/gguf_convert.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/model/model.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"
#include "common/weights/gguf_model.h"
#include "common/weights/weight_set.h"
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
    case WType::Q4_K: return GgmlType::kQ4_K;
    case WType::Q5_K: return GgmlType::kQ5_K;
    case WType::Q6_K: return GgmlType::kQ6_K;
    case WType::Q2_K: return GgmlType::kQ2_K;
    case WType::Q3_K: return GgmlType::kQ3_K;
    case WType::Q4_1: return GgmlType::kQ4_1;
    case WType::Q5_0: return GgmlType::kQ5_0;
    case WType::Q5_1: return GgmlType::kQ5_1;
    case WType::IQ4_NL: return GgmlType::kIQ4_NL;
    case WType::IQ4_XS: return GgmlType::kIQ4_XS;
  }
  return GgmlType::kF32;
}

uint32_t file_type(WType t) {  // llama.cpp's general.file_type
  switch (t) {
    case WType::F32: return 0;
    case WType::F16: return 1;
    case WType::Q4_0: return 2;
    case WType::Q8_0: return 7;
    case WType::BF16: return 32;
    // llama.cpp's names the mixes; a model of one K-quant type is the mix
    // its layers' type starts.
    case WType::Q4_K: return 15;  // Q4_K_M
    case WType::Q5_K: return 17;  // Q5_K_M
    case WType::Q6_K: return 18;
    case WType::Q2_K: return 10;
    case WType::Q3_K: return 12;  // Q3_K_M
    case WType::Q4_1: return 3;
    case WType::Q5_0: return 8;
    case WType::Q5_1: return 9;
    case WType::IQ4_NL: return 25;
    case WType::IQ4_XS: return 30;
  }
  return 0;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// tokenizer.* keys for the SentencePiece model of one of our directories.
void add_spm_tokenizer(const fs::path& tok_path, int64_t vocab, GgufWriter& g) {
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
  if (spm.pieces_size() != vocab)
    throw Error(tok_path.string() + ": " + std::to_string(spm.pieces_size()) + " pieces for a vocabulary of " +
                std::to_string(vocab));
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
}

}  // namespace

void copy_gguf_tokenizer(const GgufFile& from, GgufWriter& g) {
  bool any = false;
  for (const auto& [key, value] : from.metadata())
    if (key.compare(0, 10, "tokenizer.") == 0 || key == kSpmKey) {
      g.add_value(key, value);
      any = true;
    }
  if (!any) throw Error(from.path() + ": holds no tokenizer (no tokenizer.* metadata)");
}

void write_gguf(const ModelConfig& c, const WeightSet& w, const std::string& name,
                const std::function<void(GgufWriter&)>& tokenizer, const std::string& out, std::optional<WType> type) {
  if (c.head_dim % 2 != 0) throw Error(name + ": head_dim must be even for RoPE");
  const std::string a = c.architecture + ".";
  GgufWriter g;
  g.add_string("general.architecture", c.architecture);
  g.add_string("general.name", name);
  g.add_u32("general.file_type", file_type(type.value_or(w.type())));
  g.add_u32("general.quantization_version", 2);
  g.add_u32(a + "context_length", static_cast<uint32_t>(c.declared_context > 0 ? c.declared_context : c.max_position_embeddings));
  g.add_u32(a + "embedding_length", static_cast<uint32_t>(c.hidden_size));
  g.add_u32(a + "block_count", static_cast<uint32_t>(c.num_hidden_layers));
  g.add_u32(a + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  g.add_u32(a + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  g.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  g.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(c.rotary_dims()));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    g.add_u32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    g.add_u32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  if (c.sliding_window > 0) g.add_u32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  g.add_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  g.add_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  if (c.architecture == "gemma3") {
    // llama.cpp takes every 6th layer global without this key; the query
    // scale it computes itself (gguf_model.cpp).
    if (c.sliding_window_pattern > 0)
      g.add_u32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(c.sliding_window_pattern));
    g.add_f32(a + "rope.freq_base_swa", static_cast<float>(c.rope_local_theta));
    if (c.query_pre_attn_scalar > 0 && c.query_pre_attn_scalar != static_cast<double>(c.head_dim) &&
        !(c.num_hidden_layers == 62 && c.query_pre_attn_scalar == static_cast<double>(c.hidden_size / c.num_attention_heads)))
      throw Error(name + ": query_pre_attn_scalar " + std::to_string(c.query_pre_attn_scalar) +
                  " is not the head size, which llama.cpp's gemma3 assumes");
  }
  if (!c.rope_long_factors.empty()) {
    g.add_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(c.rope_original_context));
    g.add_f32(a + "rope.scaling.attn_factor", static_cast<float>(c.rope_attention_factor));
  }
  g.add_u32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  tokenizer(g);

  std::vector<std::vector<uint8_t>> keep;  // alive until written
  auto as = [&](const MatrixRef& m, const TensorSlot& slot) { return type ? tensor_type(*type, slot) : m.type; };
  auto bytes_of = [&](const std::string& hf, const MatrixRef& m, WType to) {
    std::vector<uint8_t> b = plain_bytes(m, to, name + ": " + hf);
    const bool q = hf.find("self_attn.q_proj.weight") != std::string::npos, k = hf.find("self_attn.k_proj.weight") != std::string::npos;
    if (c.architecture == "llama" && (q || k))
      b = permute_rope_rows(b.data(), m.rows, c.head_dim, row_bytes(to, m.cols), true);
    return b;
  };
  auto matrix = [&](const std::string& hf, const MatrixRef& m, WType to) {
    keep.push_back(bytes_of(hf, m, to));
    g.add_tensor(gguf_tensor_name(hf, c), {m.cols, m.rows}, ggml_of(to), keep.back().data(), keep.back().size());
  };
  // Phi-3's fused matrices: the parts' rows one after another, at one type.
  auto fused = [&](const std::string& fused_name, const std::vector<std::pair<std::string, const MatrixRef*>>& parts,
                   const TensorSlot& slot) {
    const WType to = as(*parts[0].second, slot);
    std::vector<uint8_t> all;
    int64_t rows = 0;
    for (const auto& [hf, m] : parts) {
      const std::vector<uint8_t> b = bytes_of(hf, *m, to);
      all.insert(all.end(), b.begin(), b.end());
      rows += m->rows;
    }
    keep.push_back(std::move(all));
    g.add_tensor(gguf_tensor_name(fused_name, c), {parts[0].second->cols, rows}, ggml_of(to), keep.back().data(),
                 keep.back().size());
  };
  auto vec = [&](const std::string& hf, const float* v, int64_t n) {
    g.add_tensor(gguf_tensor_name(hf, c), {n}, GgmlType::kF32, v, static_cast<uint64_t>(n) * 4);
  };
  auto factors = [&](const char* tensor, const std::vector<float>& f) {
    if (!f.empty()) g.add_tensor(tensor, {static_cast<int64_t>(f.size())}, GgmlType::kF32, f.data(), f.size() * 4);
  };
  // Gemma 3's linear scaling is llama.cpp's rope.scaling.factor, on its
  // global layers; Llama 3's divisors its rope_freqs.
  if (c.architecture == "gemma3" && !c.rope_freq_factors.empty()) {
    g.add_string(a + "rope.scaling.type", "linear");
    g.add_f32(a + "rope.scaling.factor", c.rope_freq_factors[0]);
  } else {
    factors("rope_freqs.weight", c.rope_freq_factors);
  }
  factors("rope_factors_long.weight", c.rope_long_factors);
  factors("rope_factors_short.weight", c.rope_short_factors);
  matrix(kEmbedName, w.embed, as(w.embed, embed_slot(c)));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    vec(layer_norm_name(l, false), w.input_norm(l), c.hidden_size);
    for (int v = 0; v < kLayerVectors; ++v) {
      const auto lv = static_cast<LayerVector>(v);
      if (const float* x = w.vector(l, lv)) vec(layer_vector_name(l, lv), x, layer_vector_size(lv, c));
    }
    const auto& L = w.layers[l];
    auto part = [&](LayerMatrix m) { return std::make_pair(layer_matrix_name(l, m), &L[static_cast<int>(m)]); };
    auto slot = [&](LayerMatrix m) { return layer_slot(c, l, m); };
    auto single = [&](LayerMatrix m) { matrix(layer_matrix_name(l, m), L[static_cast<int>(m)], as(L[static_cast<int>(m)], slot(m))); };
    if (c.architecture == "phi3") {
      fused(fused_part(l, LayerMatrix::kQ, c)->name, {part(LayerMatrix::kQ), part(LayerMatrix::kK), part(LayerMatrix::kV)},
            slot(LayerMatrix::kV));
      single(LayerMatrix::kO);
      fused(fused_part(l, LayerMatrix::kGate, c)->name, {part(LayerMatrix::kGate), part(LayerMatrix::kUp)},
            slot(LayerMatrix::kGate));
      single(LayerMatrix::kDown);
    } else {
      for (int m = 0; m < kLayerMatrices; ++m) single(static_cast<LayerMatrix>(m));
    }
    vec(layer_norm_name(l, true), w.post_norm(l), c.hidden_size);
  }
  vec(kFinalNormName, w.final_norm(), c.hidden_size);
  // llama.cpp uses token_embd for the output when output.weight is absent.
  if (!c.tie_word_embeddings) matrix(kHeadName, w.lm_head, as(w.lm_head, head_slot(c)));
  g.write(out);
}

void export_gguf(const std::string& path, const std::string& out, std::optional<WType> type) {
  const auto m = Model::load(path);
  if (fs::is_regular_file(path)) {
    const GgufFile f(path);
    write_gguf(m->config(), m->weight_set(), m->name(), [&](GgufWriter& g) { copy_gguf_tokenizer(f, g); }, out, type);
    return;
  }
  const fs::path spm = fs::path(path) / "tokenizer.model";
  if (fs::exists(spm)) {
    write_gguf(m->config(), m->weight_set(), m->name(),
               [&](GgufWriter& g) { add_spm_tokenizer(spm, m->config().vocab_size, g); }, out, type);
    return;
  }
  if (!fs::exists(fs::path(path) / "tokenizer.json"))
    throw Error(path + ": no tokenizer (tokenizer.model or tokenizer.json) to write into the GGUF file");
  const Vocab vocab = Vocab::from_hf_dir(path);
  write_gguf(m->config(), m->weight_set(), m->name(), [&](GgufWriter& g) { vocab.add_to_gguf(g); }, out, type);
}

namespace {

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
  const int64_t unk = f.has("tokenizer.ggml.unknown_token_id") ? gguf_u32(f, "tokenizer.ggml.unknown_token_id") : 0;
  spm::ModelProto p;
  bool bytes = false;
  for (size_t i = 0; i < tokens.strs.size(); ++i) {
    auto* piece = p.add_pieces();
    piece->set_piece(tokens.strs[i]);
    piece->set_score(scores ? static_cast<float>(scores->nums[i]) : 0.0f);
    const double tv = types ? types->nums[i] : 1.0;
    int t = tv >= 1 && tv <= 6 ? static_cast<int>(tv) : 1;
    // SentencePiece wants exactly one unknown piece, the unk id's; Phi-3's
    // vocabulary marks others too.
    if (static_cast<int64_t>(i) == unk) t = 2;
    else if (t == 2) t = 5;
    piece->set_type(static_cast<spm::ModelProto::SentencePiece::Type>(t));
    bytes |= t == 6;
  }
  auto* ts = p.mutable_trainer_spec();
  ts->set_model_type(spm::TrainerSpec::BPE);
  ts->set_vocab_size(static_cast<int32_t>(vocab));
  ts->set_byte_fallback(bytes);
  auto id = [&](const char* key, int32_t fallback) {
    return f.has(key) ? static_cast<int32_t>(gguf_u32(f, key)) : fallback;
  };
  ts->set_unk_id(static_cast<int32_t>(unk));
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
  const ModelConfig c = gguf_model_config(f);
  std::map<std::string, std::vector<uint8_t>> keep;
  const WeightSet w = build_weight_set(c, gguf_weight_source(f, c, keep), type, true, path);
  if (f.get("tokenizer.ggml.model").str != "llama") {
    // Byte-level BPE: Hugging Face's tokenizer.json and tokenizer_config.json.
    Vocab::from_gguf(f).write_hf(out_dir);
    save_weight_set(w, c, out_dir, type);
    return;
  }
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
