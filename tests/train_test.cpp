// The training toolkit: tokenizer training, LM training that learns and is
// deterministic, checkpoints that resume exactly, output the loader reads,
// and clear errors for bad input.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/train/trainable_llama.h"
#include "common/train/trainer.h"
#include "common/util/error.h"
#include "common/convert/gguf_convert.h"
#include "common/train/model_weights.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace splitspec::test {

namespace {

// A small synthetic corpus with learnable structure: sentences from a tiny
// grammar, documents separated by blank lines.
std::string synthetic_text(int documents, uint32_t seed) {
  const char* subjects[] = {"the cat", "a dog", "the old man", "my sister", "the bird"};
  const char* verbs[] = {"sat on", "ran to", "looked at", "walked past", "sang near"};
  const char* objects[] = {"the mat.", "the park.", "a tree.", "the river.", "the house."};
  std::mt19937 g(seed);
  std::string out;
  for (int d = 0; d < documents; ++d) {
    for (int s = 0; s < 6; ++s) {
      out += std::string(subjects[g() % 5]) + " " + verbs[g() % 5] + " " + objects[g() % 5];
      out += s % 2 ? "\n" : " ";
    }
    out += "\n";
  }
  return out;
}

struct Fixture {
  TempDir dir;
  std::string corpus, valid, tokenizer;
  Fixture() {
    corpus = dir.str("train.txt");
    valid = dir.str("valid.txt");
    write_file(corpus, synthetic_text(300, 1));
    write_file(valid, synthetic_text(20, 2));
    TokenizerTrainOptions o;
    o.corpus = corpus;
    o.out_dir = dir.str("tok");
    o.vocab_size = 300;
    train_tokenizer(o);
    tokenizer = dir.str("tok");
  }
  TrainJob job(const std::string& out, int64_t steps) const {
    TrainJob j;
    j.config.model = tiny_config(300, 2, true);
    j.config.train.seq_len = 32;
    j.config.train.batch_size = 8;
    j.config.train.steps = steps;
    j.config.train.warmup_steps = 2;
    j.config.train.lr = 1e-2;
    j.config.train.min_lr = 1e-3;
    j.config.train.eval_every = 0;
    j.config.train.checkpoint_every = 2;
    j.config.train.dtype = WType::F32;
    j.corpus = corpus;
    j.valid = valid;
    j.tokenizer = tokenizer;
    j.out_dir = dir.str(out);
    j.progress = false;
    return j;
  }
};

using test::error_of;

}  // namespace

TEST(TrainTokenizer, TrainsABpeModelWithByteFallback) {
  Fixture f;
  Tokenizer tok(f.tokenizer);
  EXPECT_LE(tok.vocab_size(), 300);
  EXPECT_GT(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  const std::string text = "the cat sat near the river.";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  // Characters never seen in training survive through byte pieces.
  const std::string unseen = "Zürich 42";
  EXPECT_EQ(tok.decode(tok.encode(unseen)), unseen);
}

TEST(TrainLm, LossFallsDeterministically) {
  Fixture f;
  const TrainReport a = run_training(f.job("a", 16));
  const TrainReport b = run_training(f.job("b", 16));
  ASSERT_EQ(a.losses.size(), 16u);
  EXPECT_EQ(a.losses, b.losses) << "same seed, same losses";
  double first = 0, last = 0;
  for (int i = 0; i < 3; ++i) first += a.losses[i], last += a.losses[13 + i];
  EXPECT_LT(last, 0.7 * first) << "loss " << first / 3 << " -> " << last / 3;
  EXPECT_TRUE(a.finished);
  EXPECT_GT(a.valid_ppl, 1.0);
  EXPECT_LT(a.valid_ppl, 300.0) << "better than uniform over the vocabulary";
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.model", "training_log.json"})
    EXPECT_TRUE(fs::exists(f.dir.path() / "a" / file)) << file;
}

TEST(TrainLm, SavedModelLoadsWithIdenticalLogits) {
  TempDir dir;
  const TrainableLlama trainable(tiny_config(300, 2, true), 5);
  save_model(trainable.config(), trainable.weights(), dir.str(), WType::F32);
  auto loaded = Model::load(dir.str());
  auto in_memory = model_from_weights(trainable.config(), trainable.weights(), "in-memory");
  KVCache c1 = loaded->new_cache(), c2 = in_memory->new_cache();
  ForwardRequest r;
  r.tokens = {1, 40, 41, 42, 100, 7};
  const at::Tensor from_file = to_tensor(loaded->forward(r, c1).logits);
  EXPECT_TRUE(at::equal(from_file, to_tensor(in_memory->forward(r, c2).logits)));
  // The training forward computes the same function as inference.
  const at::Tensor train_logits = trainable.forward(at::tensor(std::vector<int64_t>{1, 40, 41, 42, 100, 7}).unsqueeze(0));
  EXPECT_TRUE(at::allclose(train_logits[0].detach(), from_file, 1e-4, 1e-4));
}

TEST(TrainLm, ResumeAfterInterruptionContinuesTheSameSchedule) {
  Fixture f;
  const TrainReport whole = run_training(f.job("whole", 10));
  TrainJob first = f.job("split", 10);
  first.stop_after = 5;  // as if killed after step 5; the last checkpoint is step 4
  const TrainReport part = run_training(first);
  EXPECT_FALSE(part.finished);
  EXPECT_FALSE(fs::exists(f.dir.path() / "split" / "model.safetensors"));
  TrainJob again = f.job("split", 10);
  EXPECT_NE(error_of([&] { run_training(again); }).find("pass --resume"), std::string::npos);
  again.resume = true;
  const TrainReport rest = run_training(again);
  ASSERT_TRUE(rest.finished);
  // Steps 5..10 repeated from the step-4 checkpoint match the uninterrupted run.
  ASSERT_EQ(rest.losses.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(rest.losses[i], whole.losses[4 + i]) << "step " << 5 + i;
  const std::string a = read_file(f.dir.path() / "whole" / "model.safetensors");
  const std::string b = read_file(f.dir.path() / "split" / "model.safetensors");
  EXPECT_TRUE(a == b) << "resumed weights differ from the uninterrupted run";
}

TEST(TrainDraft, DistillationLowersKlToTheTeacher) {
  Fixture f;
  run_training(f.job("teacher", 12));
  TrainJob d = f.job("draft", 12);
  d.teacher = f.dir.str("teacher");
  d.tokenizer.clear();  // taken from the teacher
  d.config.model = tiny_config(300, 1, true);
  const TrainReport r = run_training(d);
  ASSERT_TRUE(r.finished);
  EXPECT_LT(r.losses.back(), 0.7 * r.losses.front());
  Tokenizer t(f.dir.str("teacher")), dt(f.dir.str("draft"));
  EXPECT_EQ(t.fingerprint(), dt.fingerprint()) << "the draft ships the teacher's tokenizer";
}

// The teacher as a user downloads it: a GGUF file, and a family the
// training module does not build (Qwen2's biases, Qwen3's query/key norms),
// both run on the inference engine. The draft ships the teacher's
// vocabulary, so it pairs with the teacher in either form.
TEST(TrainDraft, TeachersOfAnyFamilyAsGgufOrDirectory) {
  Fixture f;
  run_training(f.job("llama", 8));
  export_gguf(f.dir.str("llama"), f.dir.str("llama.gguf"), std::nullopt);
  for (const std::string arch : {"qwen2", "qwen3"}) {
    ModelConfig c = tiny_config(300, 2, true);
    c.architecture = arch;
    c.attention_bias = arch == "qwen2";
    c.qk_norm = arch == "qwen3";
    Model::random(c, 5, WType::F32, 0.3f)->save(f.dir.str(arch));
    fs::copy_file(f.tokenizer + "/tokenizer.model", f.dir.str(arch + "/tokenizer.model"));
  }
  for (const std::string& teacher : {f.dir.str("llama.gguf"), f.dir.str("qwen2"), f.dir.str("qwen3")}) {
    TrainJob d = f.job("draft-" + fs::path(teacher).stem().string(), 10);
    d.teacher = teacher;
    d.tokenizer.clear();
    d.config.model = tiny_config(300, 1, true);
    const TrainReport r = run_training(d);
    ASSERT_TRUE(r.finished) << teacher;
    EXPECT_LT(r.losses.back(), 0.8 * r.losses.front()) << teacher;
    EXPECT_EQ(Tokenizer(d.out_dir).fingerprint(), Tokenizer(teacher).fingerprint()) << teacher;
  }
  // The default draft: the teacher's vocabulary and special ids, tied.
  const TrainConfig def = default_draft_config(load_model_config(f.dir.str("llama.gguf")));
  EXPECT_EQ(def.model.vocab_size, 300);
  EXPECT_TRUE(def.model.tie_word_embeddings);
  EXPECT_EQ(def.model.bos_token_id, tiny_config(300, 2, true).bos_token_id);
}

TEST(TrainLm, InitContinuesFromAModelsWeights) {
  Fixture f;
  const TrainReport a = run_training(f.job("a", 16));
  TrainJob j = f.job("b", 2);
  j.init = f.dir.str("a");
  const TrainReport b = run_training(j);
  ASSERT_TRUE(b.finished);
  // Same first batch as a's first step, but from a's trained weights.
  EXPECT_LT(b.losses.front(), 0.8 * a.losses.front()) << a.losses.front() << " -> " << b.losses.front();
  EXPECT_LT(b.valid_ppl, 1.2 * a.valid_ppl);
}

TEST(TrainBadInput, ClearErrors) {
  Fixture f;
  auto job = f.job("x", 2);
  auto with = [&](const std::function<void(TrainJob&)>& edit) {
    TrainJob j = job;
    edit(j);
    return error_of([&] { run_training(j); });
  };
  EXPECT_NE(with([](TrainJob& j) { j.corpus = "/no/such/corpus.txt"; }).find("corpus file not found"), std::string::npos);
  write_file(f.dir.path() / "empty.txt", "");
  EXPECT_NE(with([&](TrainJob& j) { j.corpus = f.dir.str("empty.txt"); }).find("corpus is empty"), std::string::npos);
  write_file(f.dir.path() / "blank.txt", "\n\n   \n");
  EXPECT_NE(with([&](TrainJob& j) { j.corpus = f.dir.str("blank.txt"); }).find("corpus is empty"), std::string::npos);
  EXPECT_NE(with([](TrainJob& j) { j.config.model.vocab_size = 100; }).find("smaller than the tokenizer"), std::string::npos);
  write_file(f.dir.path() / "afile", "x");
  EXPECT_NE(with([&](TrainJob& j) { j.out_dir = f.dir.str("afile") + "/sub"; }).find("cannot create the output directory"),
            std::string::npos);
  EXPECT_NE(with([](TrainJob& j) { j.teacher = "/no/teacher"; }).find("model directory does not exist"), std::string::npos);
  // A family the module does not train is refused before any work, not
  // trained as LLaMA and saved as that family.
  EXPECT_NE(with([](TrainJob& j) {
              j.config.model.architecture = "qwen2";
              j.config.model.attention_bias = true;
            }).find("trains LLaMA models (\"architectures\": [\"LlamaForCausalLM\"]), not the qwen2 architecture"),
            std::string::npos);
  EXPECT_NE(with([](TrainJob& j) { j.config.model.qk_norm = true; }).find("not query/key norms"), std::string::npos);
  run_training(f.job("other", 1));
  EXPECT_NE(with([&](TrainJob& j) {
              j.init = f.dir.str("other");
              j.config.model.intermediate_size *= 2;
            }).find("config differs"),
            std::string::npos);
  EXPECT_NE(with([](TrainJob& j) { j.init = "/no/init"; }).find("model directory does not exist"), std::string::npos);
  EXPECT_NE(with([](TrainJob& j) { j.config.train.seq_len = 100000; }).find("fewer than one training window"), std::string::npos);

  // Configs that do not fit.
  auto config_error = [&](const std::string& text) {
    write_file(f.dir.path() / "c.json", text);
    return error_of([&] { load_train_config(f.dir.str("c.json")); });
  };
  const std::string model = model_config_to_json(tiny_config(300));
  EXPECT_NE(config_error("{\"model\": " + model + ", \"train\": {\"seq_len\": 1000}}").find("exceeds model.max_position_embeddings"),
            std::string::npos);
  EXPECT_NE(config_error("{\"model\": " + model + ", \"train\": {\"stepz\": 10}}").find("unknown setting train.stepz"),
            std::string::npos);
  EXPECT_NE(config_error("{\"model\": " + model + ", \"train\": {\"lr\": -1}}").find("lr"), std::string::npos);
  EXPECT_NE(config_error("{\"train\": {}}").find("expected {\"model\""), std::string::npos);
  EXPECT_NE(config_error("{\"model\": {\"hidden_size\": 32}, \"train\": {}}").find("missing required field"), std::string::npos);

  // Tokenizer training.
  TokenizerTrainOptions o;
  o.out_dir = f.dir.str("t2");
  o.corpus = "/no/such.txt";
  EXPECT_NE(error_of([&] { train_tokenizer(o); }).find("corpus file not found"), std::string::npos);
  o.corpus = f.dir.str("empty.txt");
  EXPECT_NE(error_of([&] { train_tokenizer(o); }).find("corpus is empty"), std::string::npos);
  o.corpus = f.corpus;
  o.vocab_size = 100;
  EXPECT_NE(error_of([&] { train_tokenizer(o); }).find("at least 260"), std::string::npos);
  o.vocab_size = 300;
  o.out_dir = f.dir.str("afile") + "/sub";
  EXPECT_NE(error_of([&] { train_tokenizer(o); }).find("cannot create output directory"), std::string::npos);
}

}  // namespace splitspec::test
