// Exactness of verification. Greedy: the output is the target's argmax
// sequence. Stochastic: the emitted tokens follow the target's distribution p,
// checked with Pearson's chi-square goodness-of-fit test.
//
// Significance: every goodness-of-fit check in this file uses
// alpha = 1e-4 per check; there are 128 checks, so by Bonferroni the chance
// that a correct verifier fails anywhere is below 1.3%. Seeds are fixed,
// so results are reproducible. kSamples draws per case give the test power:
// DeliberatelyBrokenVerifierIsCaught shows a subtly wrong verifier failing.
#include "common/decoding/verify.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "common/model/model.h"
#include "common/util/error.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace splitspec::test {

namespace {

constexpr double kAlpha = 1e-4;
constexpr int kCases = 16;
constexpr int kSamples = 20000;
constexpr int kVocab = 8;

using Verifier = std::function<Verdict(const DraftTree&, RowsView, const SamplingParams&, Rng&)>;

// A random distribution over kVocab tokens, with some exact zeros when allowed.
Distribution random_dist(std::mt19937_64& g, bool zeros) {
  std::uniform_real_distribution<double> u(0, 1);
  Distribution d(kVocab);
  double total = 0;
  for (auto& x : d) {
    x = static_cast<float>(zeros && u(g) < 0.25 ? 0.0 : u(g) * u(g));
    total += x;
  }
  if (total == 0) d[0] = 1, total = 1;
  for (auto& x : d) x = static_cast<float>(x / total);
  return d;
}

// Logits whose temperature-1 softmax is p (log 0 = -inf stays excluded).
Rows logits_of(const std::vector<Distribution>& ps) {
  Rows t(static_cast<int64_t>(ps.size()), kVocab);
  for (size_t r = 0; r < ps.size(); ++r)
    for (int i = 0; i < kVocab; ++i) t.row(static_cast<int64_t>(r))[i] = std::log(ps[r][i]);
  return t;
}

std::vector<double> as_double(const Distribution& d) { return {d.begin(), d.end()}; }

SamplingParams unit_temperature() {
  SamplingParams p;
  p.temperature = 1.0f;
  return p;
}

// Draws `count` siblings from q, either independently or without
// replacement; each child's q is what it was actually drawn from.
void draw_children(DraftTree& t, int32_t parent, const Distribution& q, int count, bool without_replacement, Rng& rng) {
  Distribution cur = q;
  for (int k = 0; k < count; ++k) {
    const int32_t x = rng.categorical(cur);
    t.tokens.push_back(x);
    t.parents.push_back(parent);
    t.q.push_back(cur);
    if (without_replacement) {
      cur[x] = 0;
      double s = 0;
      for (float v : cur) s += v;
      if (s <= 0) break;
      for (auto& v : cur) v = static_cast<float>(v / s);
    }
  }
}

struct TreeShape {
  int root_children;
  int grandchildren;  // under the first root child
  bool without_replacement;
};

// For each case: random p per tree node and q per parent, kSamples fresh
// drafts; returns the p-values of the first emitted token against p(root) and
// of the second, given the first root child was accepted, against p(child 0).
std::vector<double> tree_pvalues(const Verifier& verify, const TreeShape& shape, uint64_t seed) {
  std::vector<double> pvalues;
  std::mt19937_64 g(seed);
  for (int c = 0; c < kCases; ++c) {
    const int nodes = shape.root_children + shape.grandchildren;
    std::vector<Distribution> p;
    for (int i = 0; i <= nodes; ++i) p.push_back(random_dist(g, true));
    const Distribution q_root = random_dist(g, !shape.without_replacement);
    const Distribution q_child = random_dist(g, true);
    const Rows logits = logits_of(p);
    std::vector<int64_t> first(kVocab, 0), second(kVocab, 0);
    Rng rng(seed * 1000 + c);
    for (int s = 0; s < kSamples; ++s) {
      DraftTree t;
      draw_children(t, -1, q_root, shape.root_children, shape.without_replacement, rng);
      const int32_t kids = t.size();
      if (shape.grandchildren > 0) draw_children(t, 0, q_child, shape.grandchildren, shape.without_replacement, rng);
      // Rows follow node indices; nodes missing after an early stop get unused rows.
      const Verdict v = verify(t, logits.view().slice(0, t.size() + 1), unit_temperature(), rng);
      first[v.tokens[0]]++;
      if (v.accepted >= 1 && v.path[0] == 0 && kids > 0) second[v.tokens[1]]++;
    }
    pvalues.push_back(goodness_of_fit_pvalue(first, as_double(p[0])));
    if (shape.grandchildren > 0 || shape.root_children == 1)
      pvalues.push_back(goodness_of_fit_pvalue(second, as_double(p[1])));
  }
  return pvalues;
}

std::vector<double> chain_pvalues(const Verifier& verify, uint64_t seed) {
  // A chain of 3 is the tree with one child per level.
  std::vector<double> pvalues;
  std::mt19937_64 g(seed);
  for (int c = 0; c < kCases; ++c) {
    std::vector<Distribution> p, q;
    for (int i = 0; i < 4; ++i) p.push_back(random_dist(g, true));
    for (int i = 0; i < 3; ++i) q.push_back(random_dist(g, true));
    const Rows logits = logits_of(p);
    std::vector<std::vector<int64_t>> counts(4, std::vector<int64_t>(kVocab, 0));
    Rng rng(seed * 1000 + c);
    for (int s = 0; s < kSamples; ++s) {
      DraftTree t;
      for (int i = 0; i < 3; ++i) draw_children(t, i - 1, q[i], 1, false, rng);
      const Verdict v = verify(t, logits, unit_temperature(), rng);
      // The k-th emitted token, given the k-1 before it were accepted drafts,
      // must follow p_k.
      for (size_t k = 0; k < v.tokens.size(); ++k) counts[k][v.tokens[k]]++;
    }
    for (int k = 0; k < 2; ++k) pvalues.push_back(goodness_of_fit_pvalue(counts[k], as_double(p[k])));
  }
  return pvalues;
}

int count_below(const std::vector<double>& ps, double alpha) {
  return static_cast<int>(std::count_if(ps.begin(), ps.end(), [&](double p) { return p < alpha; }));
}

Verdict real_verifier(const DraftTree& t, RowsView l, const SamplingParams& p, Rng& r) {
  return verify_tree(t, l, p, r);
}

// Wrong in the classic way: after a rejection it resamples from p itself
// instead of the residual norm(max(0, p - q)), over-weighting draft tokens.
Verdict broken_verifier(const DraftTree& t, RowsView l, const SamplingParams& params, Rng& rng) {
  Verdict v;
  int32_t node = -1;
  while (true) {
    const Distribution p = filtered_distribution(l.row(node + 1), l.cols, params);
    int32_t next = -1;
    for (int32_t c : t.children(node)) {
      if (rng.uniform() * t.q[c][t.tokens[c]] < p[t.tokens[c]]) {
        next = c;
        break;
      }
    }
    if (next < 0) {
      v.tokens.push_back(rng.categorical(p));
      return v;
    }
    v.accepted++;
    v.tokens.push_back(t.tokens[next]);
    v.path.push_back(next);
    node = next;
  }
}

}  // namespace

TEST(VerifyGreedy, ChainAcceptsMatchingPrefixThenTargetToken) {
  // Row i's argmax is 10 + i.
  std::vector<float> values(4 * 20, 0.0f);
  for (int i = 0; i < 4; ++i) values[i * 20 + 10 + i] = 1.0f;
  const RowsView logits{values.data(), 4, 20};
  Rng rng(0);
  SamplingParams greedy;
  auto verify_chain = [&](std::vector<int32_t> draft, RowsView l) {
    return verify_tree(DraftTree::chain(std::move(draft)), l, greedy, rng);
  };
  Verdict v = verify_chain({10, 11, 5}, logits);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{10, 11, 12}));
  v = verify_chain({10, 11, 12}, logits);
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{10, 11, 12, 13})) << "all accepted: bonus token from the last row";
  v = verify_chain({3, 11, 12}, logits);
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.tokens, std::vector<int32_t>{10});
  v = verify_chain({}, logits.slice(0, 1));
  EXPECT_EQ(v.tokens, std::vector<int32_t>{10}) << "an empty draft is plain decoding";
}

TEST(VerifyGreedy, TreeFollowsTheMatchingChild) {
  DraftTree t;
  t.tokens = {4, 7, 9, 1, 9};
  t.parents = {-1, -1, 0, 1, 1};
  std::vector<float> logits(6 * 20, 0.0f);
  logits[0 * 20 + 7] = 1;  // root -> node 1
  logits[2 * 20 + 9] = 1;  // node 1 -> node 4 (token 9; node 2 is under node 0)
  logits[5 * 20 + 15] = 1;  // after node 4: 15
  Rng rng(0);
  Verdict v = verify_tree(t, RowsView{logits.data(), 6, 20}, SamplingParams{}, rng);
  EXPECT_EQ(v.path, (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{7, 9, 15}));
}

TEST(VerifyStochastic, ChainEmitsTargetDistribution) {
  const auto ps = chain_pvalues(real_verifier, 1);
  EXPECT_EQ(count_below(ps, kAlpha), 0);
}

TEST(VerifyStochastic, TreeWithIndependentSiblingsEmitsTargetDistribution) {
  const auto ps = tree_pvalues(real_verifier, {3, 2, false}, 2);
  EXPECT_EQ(count_below(ps, kAlpha), 0);
}

TEST(VerifyStochastic, TreeWithSiblingsWithoutReplacementEmitsTargetDistribution) {
  const auto ps = tree_pvalues(real_verifier, {4, 2, true}, 3);
  EXPECT_EQ(count_below(ps, kAlpha), 0);
}

// Nodes chosen deterministically (a look-up table's candidates, a drafter's
// argmax) carry no q and are verified as one-hot, beside drawn siblings.
TEST(VerifyStochastic, TreeWithDeterministicNodesEmitsTargetDistribution) {
  std::vector<double> pvalues;
  std::mt19937_64 g(9);
  for (int c = 0; c < kCases / 2; ++c) {
    std::vector<Distribution> p;
    for (int i = 0; i < 5; ++i) p.push_back(random_dist(g, true));
    const Distribution q_root = random_dist(g, true);
    const Rows logits = logits_of(p);
    const int32_t a = static_cast<int32_t>(g() % kVocab), b = static_cast<int32_t>((a + 1 + g() % (kVocab - 1)) % kVocab);
    std::vector<int64_t> first(kVocab, 0), second(kVocab, 0);
    Rng rng(9000 + c);
    for (int s = 0; s < kSamples; ++s) {
      // Root children: a and b chosen, then one drawn from q_root; under a,
      // one chosen child.
      DraftTree t;
      t.tokens = {a, b};
      t.parents = {-1, -1};
      t.q = {{}, {}};
      draw_children(t, -1, q_root, 1, false, rng);
      t.tokens.push_back(static_cast<int32_t>(g() % kVocab));
      t.parents.push_back(0);
      t.q.emplace_back();
      const Verdict v = verify_tree(t, logits, unit_temperature(), rng);
      first[v.tokens[0]]++;
      if (v.accepted >= 1 && v.path[0] == 0) second[v.tokens[1]]++;
    }
    pvalues.push_back(goodness_of_fit_pvalue(first, as_double(p[0])));
    pvalues.push_back(goodness_of_fit_pvalue(second, as_double(p[1])));
  }
  EXPECT_EQ(count_below(pvalues, kAlpha), 0);
}

TEST(VerifyStochastic, TargetFiltersApplyToP) {
  // Target and draft sampled with temperature, top-k and top-p: the emitted
  // token must follow the *filtered* target distribution.
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 5;
  params.top_p = 0.9f;
  std::mt19937_64 g(4);
  int failures = 0;
  for (int c = 0; c < kCases; ++c) {
    const std::vector<float> logits = randn(3 * kVocab, 100 + c, 2.0f), draft_logits = randn(2 * kVocab, 200 + c, 2.0f);
    const Distribution p0 = filtered_distribution(logits.data(), kVocab, params);
    std::vector<int64_t> counts(kVocab, 0);
    Rng rng(300 + c);
    for (int s = 0; s < kSamples; ++s) {
      std::vector<int32_t> draft;
      std::vector<Distribution> q;
      for (int i = 0; i < 2; ++i) {
        Sample d = sample(draft_logits.data() + i * kVocab, kVocab, params, rng);
        draft.push_back(d.token);
        q.push_back(std::move(d.q));
      }
      counts[verify_tree(DraftTree::chain(draft, q), RowsView{logits.data(), 3, kVocab}, params, rng).tokens[0]]++;
    }
    failures += goodness_of_fit_pvalue(counts, as_double(p0)) < kAlpha;
  }
  EXPECT_EQ(failures, 0);
}

TEST(VerifyStochastic, DeliberatelyBrokenVerifierIsCaught) {
  // The same checks with the broken verifier must fail in most cases, or
  // the tests above would prove nothing.
  const auto chain = chain_pvalues(broken_verifier, 1);
  const auto tree = tree_pvalues(broken_verifier, {3, 2, false}, 2);
  EXPECT_GE(count_below(chain, kAlpha), static_cast<int>(chain.size()) / 2)
      << "broken chain verifier rejected in " << count_below(chain, kAlpha) << " of " << chain.size();
  EXPECT_GE(count_below(tree, kAlpha), static_cast<int>(tree.size()) / 2)
      << "broken tree verifier rejected in " << count_below(tree, kAlpha) << " of " << tree.size();
  std::cout << "[ broken verifier rejected in " << count_below(chain, kAlpha) << "/" << chain.size()
            << " chain checks and " << count_below(tree, kAlpha) << "/" << tree.size() << " tree checks ]\n";
}

TEST(VerifyBadInput, MalformedDraftsAreRejected) {
  const std::vector<float> zeros(3 * 8, 0.0f);
  const RowsView logits{zeros.data(), 3, 8};
  Rng rng(0);
  SamplingParams greedy, sampled = unit_temperature();
  auto error_of = [&](const DraftTree& t, const SamplingParams& p) -> std::string {
    try {
      verify_tree(t, logits.slice(0, t.size() + 1), p, rng);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(DraftTree::chain({1, 8}), greedy).find("token id 8 outside"), std::string::npos);
  DraftTree bad_parent;
  bad_parent.tokens = {1, 2};
  bad_parent.parents = {-1, 1};
  EXPECT_NE(error_of(bad_parent, greedy).find("parent must precede"), std::string::npos);
  EXPECT_EQ(error_of(DraftTree::chain({1, 2}), sampled), "") << "no q: every node chosen deterministically";
  DraftTree short_q = DraftTree::chain({1, 2}, {Distribution(8, 0.125f)});
  EXPECT_NE(error_of(short_q, sampled).find("give one per token"), std::string::npos);
  Distribution not_normalised(8, 0.5f);
  EXPECT_NE(error_of(DraftTree::chain({1}, {not_normalised}), sampled).find("sums to"), std::string::npos);
  Distribution zero_at_token(8, 0.0f);
  zero_at_token[0] = 1.0f;
  EXPECT_NE(error_of(DraftTree::chain({1}, {zero_at_token}), sampled).find("probability 0"), std::string::npos);
  Distribution negative(8, 0.25f);
  negative[7] = -0.75f;
  EXPECT_NE(error_of(DraftTree::chain({1}, {negative}), sampled).find("negative"), std::string::npos);
  EXPECT_THROW(verify_tree(DraftTree::chain({1, 2}), logits.slice(0, 2), greedy, rng), Error);
}

// End to end on a real forward pass: greedy speculation with a draft that is
// often wrong, with rollback (chains) and compaction (trees) of the KV cache,
// must reproduce the target's own greedy output token for token.
TEST(VerifyGreedy, SpeculativeDecodingReproducesTargetOutput) {
  auto model = Model::random(tiny_config(50, 2), 21);
  const std::vector<int32_t> prompt = {1, 4, 9, 16};
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.ignore_eos = true;
  const std::vector<int32_t> reference = target_alone(*model, prompt, o).output_ids;

  for (bool tree_mode : {false, true}) {
    std::mt19937 g(tree_mode ? 5 : 6);
    KVCache cache = model->new_cache();
    ForwardRequest pre;
    pre.tokens.assign(prompt.begin(), prompt.end() - 1);
    model->forward(pre, cache);
    std::vector<int32_t> out;
    int32_t last = prompt.back();
    int rounds = 0;
    while (out.size() < reference.size()) {
      // An oracle draft, corrupted at random: right sometimes, wrong often.
      const int gamma = 1 + static_cast<int>(g() % 5);
      DraftTree t;
      for (int i = 0; i < gamma && out.size() + i < reference.size(); ++i) {
        t.tokens.push_back(g() % 3 == 0 ? static_cast<int32_t>(g() % 50) : reference[out.size() + i]);
        t.parents.push_back(i - 1);
      }
      if (tree_mode && t.size() > 0) {  // a sibling branch of junk under the root
        for (int i = 0; i < 2; ++i) {
          t.tokens.push_back(static_cast<int32_t>(g() % 50));
          t.parents.push_back(i == 0 ? -1 : t.size() - 2);
        }
      }
      const int64_t base = cache.size();
      ForwardRequest r;
      r.tokens = {last};
      r.tokens.insert(r.tokens.end(), t.tokens.begin(), t.tokens.end());
      std::vector<int32_t> parents = {-1};
      for (int32_t p : t.parents) parents.push_back(p + 1);  // shift: the root is row 0
      std::vector<int32_t> depth = {0};
      for (int32_t d : t.depths()) depth.push_back(d);
      for (int32_t d : depth) r.positions.push_back(base + d);
      r.mask = tree_attention_mask(parents, base);
      const Rows logits = model->forward(r, cache).logits;
      Rng rng(0);
      const Verdict v = verify_tree(t, logits, SamplingParams{}, rng);
      std::vector<int64_t> keep = {0};
      for (int32_t n : v.path) keep.push_back(n + 1);
      cache.keep(base, keep);
      for (int32_t tok : v.tokens) out.push_back(tok);
      last = v.tokens.back();
      ++rounds;
    }
    out.resize(reference.size());
    EXPECT_EQ(out, reference) << (tree_mode ? "tree" : "chain");
    EXPECT_LT(rounds, static_cast<int>(reference.size())) << "some drafts should have been accepted";
  }
}

}  // namespace splitspec::test
