#pragma once
// The wire form of a round, in one place for the client and the server: a
// draft tree (tokens, parents, each node's q) and a verdict (tokens, path,
// the target's top K, a hidden state). Decoders check everything and say
// what is wrong, for either side may be talking to a broken or hostile peer.
#include <cstdint>
#include <string>
#include <vector>

#include "common/decoding/token_tree.h"
#include "common/decoding/verify.h"
#include "proto/splitspec.pb.h"

namespace splitspec {

// A draft's tree into `out` (its round and flags are the caller's): parents
// only for a tree that is not a chain, each node's q only when `sampled`
// (sparse, dense or one-hot, whichever is smaller).
void encode_draft(const DraftTree& tree, bool sampled, v1::Draft& out);
// The tree a Draft carries over a vocabulary of `vocab`, validated (q of
// every node when sampling, none or all when greedy); throws
// splitspec::Error naming what is wrong.
DraftTree decode_draft(const v1::Draft& d, int64_t vocab, bool greedy);

// A verdict's accepted count, tokens and path into `out`.
void encode_verdict(const Verdict& v, v1::RoundVerdict& out);
// `v` as a verdict on `tree` over `vocab` into `out`; empty, or why it
// cannot be one. A chain's verdict may leave out its path (the first nodes).
std::string decode_verdict(const v1::RoundVerdict& v, const DraftTree& tree, int64_t vocab, Verdict& out);

void encode_top_k(const std::vector<TopK>& top_k, v1::RoundVerdict& out);
// The verdict's top K over `vocab` into `out`; empty, or why they are malformed.
std::string decode_top_k(const v1::RoundVerdict& v, int64_t vocab, std::vector<TopK>& out);

// A hidden state as the wire carries it: IEEE half, little-endian.
void encode_hidden(const std::vector<float>& hidden, v1::RoundVerdict& out);
// Into `out`; empty, or why it is not `hidden_size` values (0: not known).
std::string decode_hidden(const std::string& bytes, int64_t hidden_size, std::vector<float>& out);
// Hidden rows (VerdictExtras::hidden_rows) the same way, into hidden_rows.
void encode_hidden_rows(const std::vector<float>& rows, v1::RoundVerdict& out);
// Into `out`; empty, or why it is not whole rows of `hidden_size` values.
std::string decode_hidden_rows(const std::string& bytes, int64_t hidden_size, std::vector<float>& out);

}  // namespace splitspec
