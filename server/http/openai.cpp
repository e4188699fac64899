#include "server/http/openai.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/model/model.h"
#include "common/tokenizer/chat_template.h"
#include "common/tokenizer/stop_strings.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/error.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/generate_reactor.h"
#include "server/auth_gate.h"
#include "server/http/transport.h"
#include "server/log_text.h"
#include "server/service.h"
#include "server/token_auth.h"

namespace splitspec {

namespace {

using nlohmann::json;

// An error as OpenAI's API reports one.
struct HttpError {
  int status;
  std::string message;
  std::string type = "invalid_request_error";
};

json error_json(const HttpError& e) {
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}}}};
}

// Messages can quote what a client sent (a parser's "last read"), so bytes
// that are not UTF-8 are replaced rather than thrown on.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

http::Response error_response(const HttpError& e) {
  http::Response r{e.status, "application/json", dump(error_json(e)), {}};
  // A full server: when to try again, as OpenAI's 429s say.
  if (e.status == 429) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// Deeper than any OpenAI request needs: a body nested deeper is refused as
// the parser reaches that depth, before it builds the rest.
constexpr int kMaxJsonDepth = 32;

json parse_body(const std::string& text) {
  try {
    return json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw HttpError{400, "the body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
      return true;
    });
  } catch (const json::exception& e) {
    throw HttpError{400, std::string("the body is not JSON: ") + e.what()};
  }
}

// An integer field: a JSON integer (16.7 and "16" are refused, not
// truncated) in [lo, hi].
int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  const json& v = body[name];
  if (!v.is_number_integer()) throw HttpError{400, std::string("'") + name + "' must be an integer"};
  const bool big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t x = big ? INT64_MAX : v.get<int64_t>();
  if (big || x < lo || x > hi)
    throw HttpError{400, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  return x;
}

HttpError from_status(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return {400, s.error_message()};
    case grpc::StatusCode::UNAUTHENTICATED:
      return {401, s.error_message(), "authentication_error"};
    case grpc::StatusCode::PERMISSION_DENIED:
      return {403, s.error_message(), "permission_error"};
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return {429, s.error_message(), "rate_limit_error"};
    case grpc::StatusCode::UNAVAILABLE:
      return {503, s.error_message(), "server_error"};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {504, s.error_message(), "server_error"};
    default:
      return {500, s.error_message(), "server_error"};
  }
}

// What one request asks for, checked.
struct Job {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  std::string id;
  std::string model;
  std::vector<int32_t> prompt;
  std::vector<std::string> stop;
  v1::GenerationRequest wire;
};

template <class T>
T field(const json& body, const char* name, T fallback) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  try {
    return body[name].get<T>();
  } catch (const std::exception&) {
    throw HttpError{400, std::string("'") + name + "' has the wrong type"};
  }
}

// What follows a generation's last token: a stop string, or the server's reason.
std::string finish_name(v1::FinishReason r) { return r == v1::FINISH_REASON_EOS ? "stop" : "length"; }

class Endpoint {
 public:
  Endpoint(ServiceContext& ctx, const Tokenizer& tok, std::shared_ptr<grpc::Channel> channel)
      : ctx_(ctx), tok_(tok), stub_(v1::SplitSpec::NewStub(std::move(channel))) {}

  // On the transport's thread, before the body is read: the route, the
  // client certificate's names, the bearer token (a peer failing too often
  // waits, failed_tokens.h), the content type. /v1/models is answered here.
  std::optional<http::Response> check(const http::Head& head) {
    const std::string path = head.path();
    const bool generate = path == "/v1/completions" || path == "/v1/chat/completions";
    if (!generate && path != "/v1/models") return error_response({404, "no such endpoint: " + path});
    if (head.method != (generate ? "POST" : "GET")) {
      http::Response r = error_response({405, "use " + std::string(generate ? "POST" : "GET") + " for " + path});
      r.headers.emplace_back("Allow", generate ? "POST" : "GET");
      return r;
    }
    // Behind an upstream TLS proxy the certificate (and its names) are the proxy's to check.
    if (ctx_.config.http_tls == "same") {
      if (const auto refused = refused_client_names(ctx_, head.client_names))
        return error_response({403, *refused, "permission_error"});
    }
    if (ctx_.auth) {
      const std::string peer = FailedTokens::key(head.peer, head.header("X-Forwarded-For"), ctx_.config.trusted_proxies);
      if (const auto wait = ctx_.failed_tokens.wait(peer); wait.count() > 0) {
        const auto retry = std::to_string((wait.count() + 999) / 1000);
        http::Response r = error_response({429, "too many refused tokens from " + peer + "; retry after " + retry + " s",
                                           "rate_limit_error"});
        r.headers = {{"Retry-After", retry}};
        return r;
      }
      const std::string authorization = head.header("Authorization");
      if (refused_token(ctx_, authorization.empty() ? std::nullopt : std::optional<std::string>(authorization), "http",
                        head.method + " " + path, peer)) {
        http::Response r = error_response({401, "a valid bearer token is required (Authorization: Bearer TOKEN)",
                                           "authentication_error"});
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
        r.delay = ctx_.failed_tokens.failed(peer);
        return r;
      }
    }
    if (!generate) return http::Response{200, "application/json", dump(models()), {}};
    const std::string type = head.header("Content-Type");
    if (type.substr(0, type.find(';')) != "application/json")
      return error_response({415, "the body must be JSON, sent as Content-Type: application/json (got '" +
                                      (type.empty() ? std::string("none") : log_text(type)) + "')"});
    return std::nullopt;
  }

  json models() const {
    return {{"object", "list"},
            {"data", json::array({{{"id", ctx_.model_name}, {"object", "model"}, {"created", 0},
                                   {"owned_by", "splitspec"}}})}};
  }

  Job parse(const std::string& text, bool chat) {
    const json body = parse_body(text);
    if (!body.is_object()) throw HttpError{400, "the body must be a JSON object"};
    Job job;
    job.chat = chat;
    job.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1));
    job.model = field<std::string>(body, "model", ctx_.model_name);
    job.stream = field<bool>(body, "stream", false);
    if (body.contains("stream_options") && body["stream_options"].is_object())
      job.include_usage = field<bool>(body["stream_options"], "include_usage", false);
    if (integer(body, "n", 1, 1, 1) != 1) throw HttpError{400, "'n' must be 1: one completion a request"};
    if (field<bool>(body, "echo", false)) throw HttpError{400, "'echo' is not supported"};
    if (body.contains("logprobs") && !body["logprobs"].is_null() && body["logprobs"] != false)
      throw HttpError{400, "'logprobs' is not supported"};
    if (body.contains("stop") && !body["stop"].is_null()) {
      const json& s = body["stop"];
      if (s.is_string()) {
        job.stop.push_back(s.get<std::string>());
      } else if (s.is_array() && s.size() <= 4) {
        for (const json& x : s) {
          if (!x.is_string()) throw HttpError{400, "'stop' must be a string or up to 4 strings"};
          job.stop.push_back(x.get<std::string>());
        }
      } else {
        throw HttpError{400, "'stop' must be a string or up to 4 strings"};
      }
      for (const std::string& x : job.stop)
        if (x.empty()) throw HttpError{400, "'stop' strings must not be empty"};
    }
    const int64_t max_tokens =
        integer(body, chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                chat ? ctx_.config.max_new_tokens : 16, 1, ctx_.config.max_new_tokens);
    const double temperature = field<double>(body, "temperature", 1.0);
    const double top_p = field<double>(body, "top_p", 1.0);
    if (!(temperature >= 0 && temperature <= 2)) throw HttpError{400, "'temperature' must be in [0, 2]"};
    if (!(top_p > 0 && top_p <= 1)) throw HttpError{400, "'top_p' must be in (0, 1]"};

    if (chat) {
      if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
        throw HttpError{400, "'messages' must be a non-empty array"};
      std::vector<ChatMessage> messages;
      for (const json& m : body["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
          throw HttpError{400, "each message needs a string 'role' and a string 'content'"};
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      const std::string name = ctx_.config.chat_template.empty() ? tok_.chat_template() : ctx_.config.chat_template;
      if (name.empty())
        throw HttpError{400, ctx_.model_name + " names no chat template (the server's chat_template can name one); "
                                               "use /v1/completions"};
      ChatPrompt rendered;
      try {
        rendered = render_chat(name, messages, true);
      } catch (const Error& e) {
        throw HttpError{400, e.what()};
      }
      // The template's markers are tokens; what the messages say is text
      // unless the operator allows otherwise (chat_special_tokens).
      job.prompt = tok_.tokenize(rendered.text, true, true, ctx_.config.chat_special_tokens ? nullptr : &rendered.content);
    } else {
      const json p = body.contains("prompt") ? body["prompt"] : json();
      if (p.is_string()) {
        job.prompt = tok_.tokenize(p.get<std::string>(), true, true);
      } else if (p.is_array() && !p.empty() && p[0].is_number()) {
        // Checked as integers in the vocabulary before any narrowing: 2^32 + 1
        // is out of range, not token 1.
        const int64_t vocab = ctx_.target->config().vocab_size;
        for (const json& id : p) {
          if (!id.is_number_integer()) throw HttpError{400, "'prompt' as token ids must be integers"};
          const bool big = id.is_number_unsigned() && id.get<uint64_t>() >= static_cast<uint64_t>(vocab);
          const int64_t x = big ? vocab : id.get<int64_t>();
          if (x < 0 || x >= vocab)
            throw HttpError{400, "prompt token id " + id.dump() + " outside the vocabulary [0, " + std::to_string(vocab) + ")"};
          job.prompt.push_back(static_cast<int32_t>(x));
        }
      } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
        job.prompt = tok_.tokenize(p[0].get<std::string>(), true, true);
      } else {
        throw HttpError{400, "'prompt' must be a string or token ids (one prompt a request)"};
      }
    }
    if (job.prompt.empty()) throw HttpError{400, "the prompt is empty"};
    const int64_t vocab = ctx_.target->config().vocab_size;
    for (int32_t id : job.prompt)
      if (id < 0 || id >= vocab)
        throw HttpError{400, "prompt token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                 std::to_string(vocab) + ")"};
    const int64_t context = ctx_.target->config().max_position_embeddings;
    if (static_cast<int64_t>(job.prompt.size()) >= context)
      throw HttpError{400, "the prompt's " + std::to_string(job.prompt.size()) + " tokens do not fit the context of " +
                               std::to_string(context)};

    v1::GenerationRequest& w = job.wire;
    w.mutable_prompt_ids()->Add(job.prompt.begin(), job.prompt.end());
    w.set_max_new_tokens(static_cast<int32_t>(max_tokens));
    w.set_vocab_size(static_cast<int32_t>(ctx_.target->config().vocab_size));
    w.set_tokenizer_fingerprint(tok_.fingerprint());
    w.mutable_sampling()->set_temperature(static_cast<float>(temperature));
    w.mutable_sampling()->set_top_p(static_cast<float>(top_p));
    w.mutable_sampling()->set_seed(static_cast<uint64_t>(
        integer(body, "seed", static_cast<int64_t>(next_seed_.fetch_add(1) & INT64_MAX), INT64_MIN, INT64_MAX)));
    return job;
  }

  struct Outcome {
    std::string text;
    std::string finish;
    int64_t completion_tokens = 0;
    grpc::Status status;
  };

  // A Generate call under way: started, and admitted or refused.
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
    bool finished = false;
    // A response never written (its client gone first) ends its call.
    ~Call() {
      if (reader && !finished) {
        context.TryCancel();
        reader->Finish();
      }
    }
  };

  // Starts `job` as a Generate call and waits for the server's admission
  // (its initial metadata). A refusal (a full server, a bad request) is
  // thrown as its HTTP error here, before any byte of a response is sent.
  std::shared_ptr<Call> start(const Job& job, const std::string& token) {
    auto call = std::make_shared<Call>();
    if (!token.empty()) call->context.AddMetadata("authorization", "Bearer " + token);
    call->reader = stub_->Generate(&call->context, job.wire);
    call->reader->WaitForInitialMetadata();
    if (call->context.GetServerInitialMetadata().count(kAdmittedKey) == 0) {
      const grpc::Status s = call->reader->Finish();
      call->finished = true;
      throw from_status(s.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "the generation was not admitted") : s);
    }
    return call;
  }

  // Reads `call` to its end; `on_text` sees the text as it becomes final
  // (stop strings held back and cut) and returns false when the client has
  // gone, which cancels the call.
  Outcome drain(Call& call, const Job& job, const std::function<bool(const std::string&)>& on_text) {
    TextStreamer streamer(tok_, job.prompt);
    StopMatcher stops(job.stop);
    Outcome out;
    bool hit = false, gone = false;
    v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
    auto emit = [&](const std::string& piece) {
      if (piece.empty() || gone) return;
      out.text += piece;
      if (on_text && !on_text(piece)) gone = true;
    };
    v1::GenerateResponse r;
    while (!hit && !gone && call.reader->Read(&r)) {
      for (int32_t id : r.tokens()) {
        out.completion_tokens += 1;
        emit(stops.feed(streamer.push(id), &hit));
        if (hit || gone) break;
      }
      if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) reason = r.finish_reason();
    }
    if (hit || gone) call.context.TryCancel();
    out.status = call.reader->Finish();
    call.finished = true;
    if (hit) {
      out.status = grpc::Status::OK;
      out.finish = "stop";
    } else if (out.status.ok()) {
      emit(stops.feed(streamer.finish(), &hit));
      if (!hit) emit(stops.flush());
      out.finish = hit ? "stop" : finish_name(reason);
    }
    return out;
  }

  json usage(const Job& job, const Outcome& o) const {
    const auto prompt = static_cast<int64_t>(job.prompt.size());
    return {{"prompt_tokens", prompt}, {"completion_tokens", o.completion_tokens},
            {"total_tokens", prompt + o.completion_tokens}};
  }

  json chunk(const Job& job, const json& choice) const {
    return {{"id", job.id},
            {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", static_cast<int64_t>(std::time(nullptr))},
            {"model", job.model},
            {"choices", json::array({choice})}};
  }

  json whole(const Job& job, const Outcome& o) const {
    json choice = {{"index", 0}, {"finish_reason", o.finish}, {"logprobs", nullptr}};
    if (job.chat)
      choice["message"] = {{"role", "assistant"}, {"content", o.text}};
    else
      choice["text"] = o.text;
    json j = chunk(job, choice);
    j["object"] = job.chat ? "chat.completion" : "text_completion";
    j["usage"] = usage(job, o);
    return j;
  }

  // On a worker thread: a generation, whole or streamed as server-sent
  // events (a chunk for each piece of text, then the finish, the usage when
  // asked, and [DONE]). Refusals (429 for a full server) come before any
  // byte of a stream; an error after the first byte goes out as an event,
  // as OpenAI's does. A client that goes cancels its generation.
  void complete(http::Exchange& ex) {
    const bool chat = ex.head().path() == "/v1/chat/completions";
    try {
      const std::optional<std::string> token = TokenAuth::bearer(ex.head().header("Authorization"));
      auto job = std::make_shared<Job>(parse(ex.body(), chat));
      const std::shared_ptr<Call> call = start(*job, ctx_.auth && token ? *token : "");
      ex.on_gone([call] { call->context.TryCancel(); });
      if (!job->stream) {
        const Outcome o = drain(*call, *job, {});
        if (!o.status.ok()) throw from_status(o.status);
        ex.respond({200, "application/json", dump(whole(*job, o)), {}});
        return;
      }
      if (!ex.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
      auto send = [&ex](const json& j) { return ex.send("data: " + dump(j) + "\n\n"); };
      if (job->chat)
        send(chunk(*job, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                          {"finish_reason", nullptr}}));
      const Outcome o = drain(*call, *job, [&](const std::string& piece) {
        json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
        if (job->chat)
          choice["delta"] = {{"content", piece}};
        else
          choice["text"] = piece;
        return send(chunk(*job, choice));
      });
      if (!o.status.ok()) {
        send(error_json(from_status(o.status)));
      } else {
        json last = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", o.finish}};
        if (job->chat)
          last["delta"] = json::object();
        else
          last["text"] = "";
        send(chunk(*job, last));
        if (job->include_usage) {
          json u = chunk(*job, json());
          u["choices"] = json::array();
          u["usage"] = usage(*job, o);
          send(u);
        }
      }
      ex.send("data: [DONE]\n\n");
      ex.end_stream();
    } catch (const HttpError& e) {
      ex.respond(error_response(e));
    }
  }

 private:
  ServiceContext& ctx_;
  const Tokenizer& tok_;
  std::unique_ptr<v1::SplitSpec::Stub> stub_;
  std::atomic<uint64_t> next_id_{1};
  // A request without a seed gets its own, so two are not the same draw.
  std::atomic<uint64_t> next_seed_{static_cast<uint64_t>(std::time(nullptr))};
};

}  // namespace

OpenAiHttp::OpenAiHttp(ServiceContext& ctx, std::shared_ptr<grpc::Channel> channel) {
  const ServerConfig& c = ctx.config;
  if (!tokenizer_available(c.target_dir))
    throw Error("http_listen: the OpenAI endpoint speaks text, and the target " + c.target_dir + " ships no tokenizer");
  tokenizer_ = std::make_unique<Tokenizer>(c.target_dir);
  auto endpoint = std::make_shared<Endpoint>(ctx, *tokenizer_, std::move(channel));
  http::Limits limits;
  limits.request_timeout_s = c.http_request_timeout_s;
  limits.send_timeout_s = c.http_send_timeout_s;
  limits.max_body_bytes = static_cast<uint64_t>(c.max_message_bytes);
  limits.max_connections = c.http_max_connections;
  limits.max_queued = c.http_max_queued;
  // A worker holds a generation to its end: one for each session the
  // server admits, and a few to answer the rest with 429s.
  limits.workers = c.max_sessions + 4;
  http::TlsFiles tls;
  if (c.http_tls == "same") tls = {c.tls_cert, c.tls_key, c.tls_client_ca, c.tls_reload_s};
  http::Handlers handlers;
  handlers.check = [endpoint](const http::Head& head) { return endpoint->check(head); };
  handlers.handle = [endpoint](http::Exchange& ex) { endpoint->complete(ex); };
  // The access log and the status counts: one line a request, with its
  // request id (X-Request-Id back to the client too).
  handlers.done = [&ctx](const http::Head& head, int status, uint64_t bytes_in) {
    if (status >= 100 && status < 600) ctx.counters.http_by_class[static_cast<size_t>(status / 100 - 1)].fetch_add(1);
    spdlog::info("event=http_request id={} peer={}:{} method={} path=\"{}\" status={} bytes_in={}", head.request_id,
                 head.peer, head.peer_port, log_text(head.method), log_text(head.path()), status, bytes_in);
  };
  handlers.next_id = [&ctx] { return "req-" + std::to_string(ctx.next_session_id.fetch_add(1)); };
  http_ = std::make_unique<http::Server>(c.http_listen, limits, tls, std::move(handlers));
}

OpenAiHttp::~OpenAiHttp() { http_->stop(); }

int OpenAiHttp::port() const { return http_->port(); }

bool OpenAiHttp::tls() const { return http_->tls(); }

}  // namespace splitspec
