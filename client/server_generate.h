#pragma once
// cloud-ar: the server's own streaming loop (the Generate RPC) generates
// every token while this device only reads them: plain decoding on the
// server, with one round trip per generation rather than per token. What
// `--verifier server --drafter none` runs.
#include <chrono>
#include <functional>
#include <vector>

#include "client/cancellation.h"
#include "client/server_link.h"

namespace splitspec {

struct StreamedGeneration {
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::kNone;
  int64_t forwards = 0;    // the server's, one per token
  double forward_ms = 0;   // as the server reports them
  double first_token_ms = 0;
  double wall_ms = 0;
  std::vector<double> token_ms;  // after the first message: its gap over its tokens
  int64_t resumes = 0;     // calls made again after a break
  double switch_ms = 0;    // from each break to the next token
};

struct StreamControl {
  std::chrono::milliseconds deadline{120000};
  // After a broken call (UNAVAILABLE), how long to wait for the server to be
  // back and call again from the tokens so far; 0: fail at once.
  std::chrono::milliseconds reconnect_budget{0};
  Cancellation* cancel = nullptr;  // stops the stream (finish kCancelled)
};

// `on_token` returning false stops the stream (finish kCancelled). Throws
// splitspec::Error naming the server for a failed call, a token outside the
// vocabulary (which never reaches `on_token`), or a stream that ends without
// a finish reason.
StreamedGeneration stream_generate(ServerLink& link, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                   int64_t vocab, const std::string& tokenizer_fingerprint, const StreamControl& control,
                                   const std::function<bool(int32_t)>& on_token);

}  // namespace splitspec
