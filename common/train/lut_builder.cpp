#include "common/train/lut_builder.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/corpus.h"
#include "common/train/model_weights.h"
#include "common/util/error.h"
#include "common/util/stopwatch.h"
#include "common/train/output_dir.h"

namespace splitspec {

LutBuildReport build_lut(const LutBuildJob& job) {
  const auto t0 = SteadyClock::now();
  if (job.tokens < 2) throw Error("train lut: --tokens must be at least 2");
  if (job.out.empty()) throw Error("train lut: --out is required");
  prepare_output_file(job.out);
  const std::shared_ptr<Model> target = Model::load(job.target_dir);
  const ModelConfig& c = target->config();
  const Tokenizer tok(job.target_dir);
  const std::vector<int32_t> text = tokenize_corpus(job.corpus, tok, c.bos_token_id, job.tokens);
  LutTables tables(c.vocab_size, job.tables);
  c10::InferenceMode guard;
  LutBuildReport r;
  // Windows of the target's context; each position's key is read from the
  // window itself, so a key never reaches into the previous window.
  const int64_t window = c.max_position_embeddings;
  std::vector<int32_t> ids;
  std::vector<float> probs;
  for (int64_t start = 0; start + 1 < static_cast<int64_t>(text.size()); start += window) {
    const int64_t n = std::min<int64_t>(window, static_cast<int64_t>(text.size()) - start);
    ForwardRequest f;
    f.tokens.assign(text.begin() + start, text.begin() + start + n);
    KVCache cache = target->new_cache();
    const at::Tensor logits = to_tensor(target->forward(f, cache).logits);  // [n, vocab]
    const auto top = at::softmax(logits, -1).topk(job.tables.k, -1);
    const at::Tensor values = std::get<0>(top).contiguous(), indices = std::get<1>(top).to(at::kInt).contiguous();
    const float* pv = values.data_ptr<float>();
    const int32_t* pi = indices.data_ptr<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      ids.assign(pi + i * job.tables.k, pi + (i + 1) * job.tables.k);
      probs.assign(pv + i * job.tables.k, pv + (i + 1) * job.tables.k);
      // Row i predicts the token after position i: its context ends there.
      tables.update(f.tokens.data() + i + 1, i + 1, ids, probs);
      r.positions += 1;
    }
  }
  tables.save(job.out, tok.fingerprint());
  r.rows_used = tables.rows_used();
  r.bytes = tables.memory_bytes();
  r.wall_seconds = ms_since(t0) / 1000.0;
  return r;
}

}  // namespace splitspec
