#include "common/convert/gguf_convert.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/model/family.h"
#include "common/model/model.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"
#include "common/util/error.h"
#include "common/weights/gguf.h"
#include "common/model/gguf_model.h"
#include "common/model/weight_set.h"
#include "proto/sentencepiece_model.pb.h"

namespace fs = std::filesystem;

namespace splitspec {

namespace {

constexpr const char* kSpmKey = kSpmModelKey;

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
  if (const std::string chat = config_chat_template(tok_path.parent_path().string()); !chat.empty())
    g.add_string("tokenizer.chat_template", chat);
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
  // Counts that differ between layers as llama.cpp's arrays (get_key_or_arr).
  auto counts = [&](const std::string& key, const std::function<int64_t(int64_t)>& of) {
    std::vector<int32_t> v;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) v.push_back(static_cast<int32_t>(of(l)));
    if (std::count(v.begin(), v.end(), v.front()) == static_cast<std::ptrdiff_t>(v.size()))
      g.add_u32(key, static_cast<uint32_t>(v.front()));
    else
      g.add_i32s(key, v);
  };
  counts(a + "feed_forward_length", [&](int64_t l) { return c.layer_intermediate_size(l); });
  g.add_u32(a + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  counts(a + "attention.head_count_kv", [&](int64_t l) { return c.layer_kv_heads(l); });
  g.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(c.rotary_dims()));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    g.add_u32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    g.add_u32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  if (c.sliding_window > 0) g.add_u32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  g.add_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  g.add_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  const Family& family = family_of(c);
  if (family.write_gguf) family.write_gguf(c, g, name);
  if (!c.rope_long_factors.empty()) {
    g.add_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(c.rope_original_context));
    g.add_f32(a + "rope.scaling.attn_factor", static_cast<float>(c.rope_attention_factor));
  }
  g.add_u32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  tokenizer(g);

  std::vector<WeightBytes> keep;  // alive until written
  auto as = [&](const MatrixRef& m, const TensorSlot& slot) { return type ? tensor_type(*type, slot) : m.type; };
  auto bytes_of = [&](const std::string& hf, const MatrixRef& m, WType to) {
    WeightBytes b = plain_bytes(m, to, name + ": " + hf);
    const bool q = hf.find("self_attn.q_proj.weight") != std::string::npos, k = hf.find("self_attn.k_proj.weight") != std::string::npos;
    if (family.gguf_rope_interleaved && (q || k))
      b = permute_rope_rows(b.data(), m.rows, c.head_dim, row_bytes(to, m.cols), true);
    return b;
  };
  auto matrix = [&](const std::string& hf, const MatrixRef& m, WType to) {
    keep.push_back(bytes_of(hf, m, to));
    g.add_tensor(gguf_tensor_name(hf, c), {m.cols, m.rows}, ggml_of(to), keep.back().data(), keep.back().size());
  };
  // Fused matrices (Family::fusions): the parts' rows one after another, at one type.
  auto fused = [&](const std::string& fused_name, const std::vector<std::pair<std::string, const MatrixRef*>>& parts,
                   const TensorSlot& slot) {
    const WType to = as(*parts[0].second, slot);
    WeightBytes all;
    int64_t rows = 0;
    for (const auto& [hf, m] : parts) {
      const WeightBytes b = bytes_of(hf, *m, to);
      all.insert(all.end(), b.begin(), b.end());
      rows += m->rows;
    }
    keep.push_back(std::move(all));
    g.add_tensor(gguf_tensor_name(fused_name, c), {parts[0].second->cols, rows}, ggml_of(to), keep.back().data(),
                 keep.back().size());
  };
  auto vec = [&](const std::string& hf, const float* v, int64_t n) {
    g.add_tensor(gguf_tensor_name(hf, c), gguf_vector_ne(hf, n, c), GgmlType::kF32, v, static_cast<uint64_t>(n) * 4);
  };
  auto factors = [&](const char* tensor, const std::vector<float>& f) {
    if (!f.empty()) g.add_tensor(tensor, {static_cast<int64_t>(f.size())}, GgmlType::kF32, f.data(), f.size() * 4);
  };
  // Linear scaling is llama.cpp's rope.scaling.factor in some families
  // (on Gemma 3's global layers); Llama 3's divisors its rope_freqs.
  if (family.gguf_linear_rope_scaling && !c.rope_freq_factors.empty()) {
    g.add_string(a + "rope.scaling.type", "linear");
    g.add_f32(a + "rope.scaling.factor", c.rope_freq_factors[0]);
  } else {
    factors("rope_freqs.weight", c.rope_freq_factors);
  }
  factors("rope_factors_long.weight", c.rope_long_factors);
  factors("rope_factors_short.weight", c.rope_short_factors);
  matrix(kEmbedName, w.embed, as(w.embed, embed_slot(c)));
  if (const PerLayerInputs& pl = w.per_layer; pl.embed.data) {
    const int64_t L = c.num_hidden_layers;
    matrix(kPerLayerEmbedName, pl.embed, as(pl.embed, {TensorSlot::kEmbed, 0, L, pl.embed.cols}));
    matrix(kPerLayerProjName, pl.proj, as(pl.proj, {TensorSlot::kOther, 0, L, pl.proj.cols}));
    vec(kPerLayerNormName, pl.norm.data(), static_cast<int64_t>(pl.norm.size()));
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    vec(layer_norm_name(l, false), w.input_norm(l), c.hidden_size);
    for (int v = 0; v < kLayerVectors; ++v) {
      const auto lv = static_cast<LayerVector>(v);
      if (const float* x = w.vector(l, lv)) vec(layer_vector_name(l, lv), x, layer_vector_size(lv, c, l));
    }
    const auto& L = w.layers[l];
    auto part = [&](LayerMatrix m) { return std::make_pair(layer_matrix_name(l, m), &L[static_cast<int>(m)]); };
    auto slot = [&](LayerMatrix m) { return layer_slot(c, l, m); };
    auto single = [&](LayerMatrix m) { matrix(layer_matrix_name(l, m), L[static_cast<int>(m)], as(L[static_cast<int>(m)], slot(m))); };
    std::set<std::string> written;
    for (LayerMatrix m : layer_matrices(c, l)) {
      const int i = static_cast<int>(m);
      const auto f = fused_part(l, m, c);
      if (!f) {
        single(m);
      } else if (written.insert(f->name).second) {
        std::map<int64_t, std::pair<std::string, const MatrixRef*>> by_row;
        for (int j = i; j < kLayerMatrices; ++j)
          if (const auto g = fused_part(l, static_cast<LayerMatrix>(j), c); g && g->name == f->name)
            by_row[g->row0] = part(static_cast<LayerMatrix>(j));
        std::vector<std::pair<std::string, const MatrixRef*>> parts;
        for (const auto& [row0, p] : by_row) parts.push_back(p);
        fused(f->name, parts, slot(m));
      }
    }
    vec(layer_norm_name(l, true), w.post_norm(l), c.hidden_size);
  }
  vec(kFinalNormName, w.final_norm(), c.hidden_size);
  // llama.cpp uses token_embd for the output when output.weight is absent.
  if (!c.tie_word_embeddings) matrix(kHeadName, w.lm_head, as(w.lm_head, head_slot(c)));
  g.write(out);
}

namespace {

// tokenizer.* keys for the vocabulary of the model at `path` as it keeps
// it: a GGUF file's (or a directory's tokenizer.gguf) metadata as it is, a
// tokenizer.model with its chat template, or tokenizer.json.
void add_vocabulary(const std::string& path, int64_t vocab_size, GgufWriter& g) {
  const std::string vocab_file = fs::is_regular_file(path)                      ? path
                                 : fs::exists(fs::path(path) / kVocabFileName) ? (fs::path(path) / kVocabFileName).string()
                                                                                : "";
  if (!vocab_file.empty()) {
    const GgufFile f(vocab_file);
    if (!f.has("tokenizer.ggml.model")) throw Error(vocab_file + ": carries no vocabulary (tokenizer.ggml.*)");
    copy_gguf_tokenizer(f, g);
    return;
  }
  const fs::path spm = fs::path(path) / "tokenizer.model";
  if (fs::exists(spm)) {
    add_spm_tokenizer(spm, vocab_size, g);
    return;
  }
  if (!fs::exists(fs::path(path) / "tokenizer.json"))
    throw Error(path + ": no tokenizer (tokenizer.gguf, tokenizer.model or tokenizer.json)");
  Vocab::from_hf_dir(path).add_to_gguf(g);
}

}  // namespace

void export_gguf(const std::string& path, const std::string& out, std::optional<WType> type) {
  const auto m = Model::load(path);
  write_gguf(m->config(), m->weight_set(), m->name(),
             [&](GgufWriter& g) { add_vocabulary(path, m->config().vocab_size, g); }, out, type);
}

std::string write_vocabulary_gguf(const std::string& model_path, const std::string& out) {
  const ModelConfig c = load_model_config(model_path);
  GgufWriter g;
  g.add_string("general.name", fs::path(model_path).filename().string());
  add_vocabulary(model_path, c.vocab_size, g);
  g.write(out);
  return Tokenizer(out).fingerprint();
}

void import_gguf(const std::string& path, const std::string& out_dir, std::optional<WType> type) {
  const GgufFile f(path);
  const ModelConfig c = gguf_model_config(f);
  std::map<std::string, WeightBytes> keep;
  const WeightSet w = build_weight_set(c, gguf_weight_source(f, c, keep), type, true, path);
  write_vocabulary_files(f, c.vocab_size, out_dir);
  save_weight_set(w, c, out_dir, type);
  const Tokenizer check(out_dir);
  if (check.vocab_size() != c.vocab_size)
    throw Error(path + ": the vocabulary has " + std::to_string(check.vocab_size()) + " tokens, the model " +
                std::to_string(c.vocab_size));
  if (check.fingerprint() != Vocab::from_gguf(f).fingerprint())
    throw Error(path + ": the vocabulary written to " + out_dir + " is not the file's (fingerprint " + check.fingerprint() +
                ", not " + Vocab::from_gguf(f).fingerprint() + ")");
}

void copy_vocabulary(const std::string& from, int64_t vocab_size, const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create directory: " + ec.message());
  if (fs::is_regular_file(from) && is_gguf_file(from)) {
    write_vocabulary_files(GgufFile(from), vocab_size, out_dir);
  } else if (fs::is_regular_file(from)) {
    fs::copy_file(from, fs::path(out_dir) / "tokenizer.model", fs::copy_options::overwrite_existing);
  } else {
    // One form per directory, as the source keeps it.
    for (const char* name : {kVocabFileName, "tokenizer.model", "tokenizer.json", "tokenizer_config.json"})
      fs::remove(fs::path(out_dir) / name, ec);
    for (const char* name : {kVocabFileName, "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                             "special_tokens_map.json", "generation_config.json"})
      if (fs::exists(fs::path(from) / name))
        fs::copy_file(fs::path(from) / name, fs::path(out_dir) / name, fs::copy_options::overwrite_existing);
  }
  const std::string want = Tokenizer(from).fingerprint(), got = Tokenizer(out_dir).fingerprint();
  if (got != want)
    throw Error(out_dir + ": the vocabulary copied from " + from + " has fingerprint " + got + ", not " + want);
}

void write_vocabulary_files(const GgufFile& f, int64_t vocab_size, const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create directory: " + ec.message());
  const fs::path dir(out_dir);
  auto write = [&](const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error(p.string() + ": write failed");
  };
  // One form per directory: a stale file of another form would be read first.
  for (const char* name : {kVocabFileName, "tokenizer.model", "tokenizer.json", "tokenizer_config.json"})
    fs::remove(dir / name, ec);
  const Vocab vocab = Vocab::from_gguf(f);
  if (f.has(kSpmKey)) {
    // Written from one of our directories: its tokenizer.model back, byte
    // for byte, and its chat template beside it.
    write(dir / "tokenizer.model", f.get(kSpmKey).bytes);
    if (!vocab.chat_template().empty())
      write(dir / "tokenizer_config.json", nlohmann::json{{"chat_template", vocab.chat_template()}}.dump(2) + "\n");
    return;
  }
  if (vocab.kind() == Vocab::Kind::kBpe) {
    // Hugging Face's tokenizer.json and tokenizer_config.json where they can
    // hold the vocabulary as it is (they read back to the same fingerprint).
    try {
      vocab.write_hf(out_dir);
      if (Vocab::from_hf_dir(out_dir, vocab_size).fingerprint() == vocab.fingerprint()) return;
    } catch (const Error&) {
    }
    fs::remove(dir / "tokenizer.json", ec);
    fs::remove(dir / "tokenizer_config.json", ec);
  }
  // Otherwise llama.cpp's own form: the tokenizer.* metadata as a
  // vocabulary-only GGUF file (a SentencePiece-style vocabulary's control
  // tokens and chat template, which tokenizer.model cannot carry).
  GgufWriter g;
  if (f.has("general.name")) g.add_string("general.name", f.get("general.name").str);
  copy_gguf_tokenizer(f, g);
  g.write((dir / kVocabFileName).string());
}

}  // namespace splitspec
