#pragma once
// A draft head's shortlist (common/model/shortlist.h) from its drafter's
// options: `shortlist=K` with the ranking it takes the first K from,
// `ranking=FILE` (a JSON array of token ids, most frequent first) or
// `corpus=FILE` (text, tokenized with the target's tokenizer and ranked by
// count). `splitspec eval shortlist` writes a ranking and measures it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/drafting/drafter_options.h"
#include "common/model/shortlist.h"

namespace splitspec {

class Tokenizer;

// Token ids by their count in `text` (line by line) under `tok`, most
// frequent first, ties by the lower id; ids never seen are left out.
std::vector<int32_t> rank_tokens(const std::string& text, const Tokenizer& tok);

// The shortlist the options ask for, reading `shortlist`, `ranking` and
// `corpus` from `opt`; null without `shortlist` (or 0). `tokenizer_path`
// encodes a corpus; `head_rows` gives rows of the head matrix by token id.
// Throws splitspec::Error for a ranking that is missing, unreadable, shorter
// than K, or holds an id outside the vocabulary or twice.
std::shared_ptr<const Shortlist> shortlist_from_options(
    DrafterOptions& opt, const std::string& drafter, const std::string& tokenizer_path, int64_t vocab,
    const std::function<Rows(const std::vector<int64_t>& ids)>& head_rows);

}  // namespace splitspec
