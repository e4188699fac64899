#pragma once
// SplitSpec client API: what a robot controller links against.
//
//   splitspec::ClientOptions opts;
//   opts.verifier = splitspec::VerifierKind::kServer;  // the target runs on a server
//   opts.drafter = "model";                             // a draft model here proposes
//   opts.server = "10.0.0.5:50051";
//   opts.draft_dir = "models/demo-draft";
//   auto client = splitspec::Client::connect(opts);   // checks vocab + tokenizer
//   splitspec::Request req;
//   req.max_new_tokens = 64;
//   auto result = client->generate("Turn left at the", req,
//                                  [](const std::string& piece) { std::cout << piece; });
//
// A generation is rounds of one loop: a drafter proposes tokens (a chain or a
// token tree), a verifier checks them against the target in one forward. Two
// choices make a mode:
//   verifier  local   the target on this device, in memory or streamed from
//                     disk under `memory_budget`
//             server  the target on splitspec-server
//   drafter   none        no drafting: plain decoding (with the server
//                         verifier, the server's own streaming loop: cloud-ar)
//             model       a draft model proposes `gamma` tokens a round
//             model-tree  a draft model grows EdgeLLM's width-adaptive token
//                         tree, verified when its confidence falls below an
//                         adaptive threshold; with a streamed target it drafts
//                         on while the target's weights load
//   predraft  (server)    the server streams what its early exits predict the
//                         verdict will be; worker threads here draft the next
//                         round from those predictions, and when the final
//                         verdict matches one, that draft goes out at once
// Earlier releases named the modes; those names stay as aliases (`mode`):
//   local-ar = local+none, local-sd = local+model, local-tree =
//   local+model-tree, cloud-ar = server+none, edge-sd = server+model,
//   edge-fsd = server+model with predraft.
// Every mode produces exactly what the target alone would: the same tokens
// under greedy decoding (temperature 0), the same distribution when sampling.
//
// A robot's network drops. With the server verifier a generation whose
// Session stream breaks (server restarted, network blip, replica drained)
// reconnects within `reconnect_budget` and continues from exactly the
// committed tokens; with `fallback_target_dir` it goes on with the local
// verifier at the next round boundary once the server is unreachable or a
// round outlasts `Request::round_timeout`, and returns to the server when its
// health says SERVING. With a fallback, connect() to a server that cannot be
// reached succeeds: generations start locally and move to the server once it
// answers with the fallback's model. A generation whose server rounds, at
// their measured pace, would miss `Request::deadline` finishes on the
// fallback. Every random draw is keyed by the seed and the
// position, so either way the tokens are those of an uninterrupted run, and
// the callback never sees a token twice.
//
// Errors (unreachable or dead server, tokenizer mismatch, bad request, a
// combination that cannot work, deadline) throw splitspec::Error with a
// message meant for humans. A Client runs one generation at a time; use one
// Client per thread. cancel() may be called from any thread.
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The options and a request (client_options.h), and what a generation
// measured (client_stats.h): the library's internal parts include those alone.
#include "client/client_options.h"
#include "client/client_stats.h"

namespace splitspec {

// What every call throws, with a message meant for humans. Defined here, token
// for token as in common/util/error.h, so that the installed header stands alone.
#ifndef SPLITSPEC_ERROR_DEFINED
#define SPLITSPEC_ERROR_DEFINED
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
#endif

struct Result {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;   // generated ids
  std::string text;           // generated text (empty without a tokenizer)
  std::string finish_reason;  // "length", "eos", "context" or "cancelled"
  Stats stats;
};

struct ServerInfo {
  std::string model_name;
  int32_t vocab_size = 0;
  std::string tokenizer_fingerprint;
  int32_t max_context = 0;
  int32_t max_draft_tokens = 0;
  int32_t active_sessions = 0;
  std::string version;
  std::string kv_cache;  // the target's KV cache type: "f32" or "f16"
  std::string weight_type;     // the target's layer matrices' type, e.g. "q4_k"
  std::string weights_digest;  // of its weights (empty: streamed from disk)
  // What computes it: "cpu" or "cuda", and the device in words.
  std::string backend;
  std::string device;
  // "FIXED:PER_ROW" ms when the server emulates a slower accelerator
  // (--emulate-forward-ms): its times are emulated. Empty: real.
  std::string emulated_forward_ms;
};

namespace detail {
template <class T>
inline constexpr bool is_std_function_v = false;
template <class R, class... A>
inline constexpr bool is_std_function_v<std::function<R(A...)>> = true;
}  // namespace detail

// A streaming callback: returns void, or bool where false stops the
// generation (its result then ends "cancelled").
template <class Arg>
class StreamCallback {
 public:
  StreamCallback() = default;
  template <class F, std::enable_if_t<std::is_invocable_v<F&, Arg> &&
                                          !std::is_same_v<std::decay_t<F>, StreamCallback>, int> = 0>
  StreamCallback(F f) {  // NOLINT: implicit, so that lambdas pass as they are
    if constexpr (detail::is_std_function_v<std::decay_t<F>> || std::is_pointer_v<std::decay_t<F>>)
      if (!f) return;  // empty: no callback
    if constexpr (std::is_same_v<std::invoke_result_t<F&, Arg>, bool>)
      fn_ = std::move(f);
    else
      fn_ = [f = std::move(f)](Arg a) mutable {
        f(a);
        return true;
      };
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }
  bool operator()(Arg a) const { return fn_(a); }

 private:
  std::function<bool(Arg)> fn_;
};
using OnText = StreamCallback<const std::string&>;
using OnToken = StreamCallback<int32_t>;

class Client;

// A generation running on its own thread (Client::generate_async).
class Generation {
 public:
  Generation(Generation&&) noexcept = default;
  // Ends the one held first, as the destructor does.
  Generation& operator=(Generation&& other) noexcept;
  // Cancels it if still running, and waits.
  ~Generation();
  bool done() const;
  // Whether it finished within `timeout`.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Waits; the result, or the generation's error rethrown. Once.
  Result get();
  // Stops it at the next round boundary; get() then returns what it made.
  void cancel();

 private:
  friend class Client;
  Generation(Client* client, std::future<Result> result) : client_(client), result_(std::move(result)) {}
  void finish() noexcept;
  Client* client_ = nullptr;
  std::future<Result> result_;
};

class Client {
 public:
  // Loads the local model(s) and, with the server verifier, connects and
  // checks that the server's vocabulary and tokenizer match ours.
  static std::unique_ptr<Client> connect(const ClientOptions& options);
  ~Client();

  // Text prompt: tokenized with BOS prepended; on_text receives the text as it
  // becomes final.
  Result generate(const std::string& prompt, const Request& request, const OnText& on_text = {});
  // Token ids, used verbatim; on_token receives each id once final.
  Result generate_ids(const std::vector<int32_t>& prompt_ids, const Request& request, const OnToken& on_token = {});
  // generate() on a thread of its own; callbacks run there. The Client must
  // outlive the handle and run nothing else meanwhile.
  Generation generate_async(const std::string& prompt, const Request& request, OnText on_text = {});
  Generation generate_ids_async(const std::vector<int32_t>& prompt_ids, const Request& request, OnToken on_token = {});
  // Stops the generation running now, from any thread, at the next round
  // boundary (a round on the server is cancelled at once, freeing its
  // session); it returns what it made, finish_reason "cancelled".
  void cancel();

  // Server verifier only (throws otherwise).
  ServerInfo server_info();
  // One GetInfo round trip, in ms: the network's RTT plus gRPC's overhead.
  double ping_ms();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace splitspec
