#include "server/openai_http.h"

#include <httplib.h>
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
#include "common/util/host_port.h"
#include "proto/splitspec.grpc.pb.h"
#include "server/generate_reactor.h"
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

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
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

  // The bearer token of the request, checked; "" when none is configured.
  // Refusals are counted and logged as the gRPC door's are.
  std::string authorize(const httplib::Request& req) const {
    if (!ctx_.auth) return "";
    const std::optional<std::string> token = TokenAuth::bearer(req.get_header_value("Authorization"));
    if (!token || !ctx_.auth->accepts(*token)) {
      ctx_.counters.unauthenticated.fetch_add(1);
      spdlog::warn("event=unauthenticated door=http peer={}:{} path=\"{}\" error=\"{}\"", req.remote_addr, req.remote_port,
                   log_text(req.path), token ? "unknown token" : "no bearer token");
      throw HttpError{401, "a valid bearer token is required (Authorization: Bearer TOKEN)", "authentication_error"};
    }
    return *token;
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

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    try {
      const std::string token = authorize(req);
      auto job = std::make_shared<Job>(parse(req.body, chat));
      const std::shared_ptr<Call> call = start(*job, token);
      if (!job->stream) {
        const Outcome o = drain(*call, *job, {});
        if (!o.status.ok()) throw from_status(o.status);
        res.set_content(dump(whole(*job, o)), "application/json");
        return;
      }
      // Server-sent events: a chunk for each piece of text, then the finish
      // (and usage when asked), then [DONE]. An error after the first byte
      // goes out as an event, as OpenAI's does.
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [this, job, call](size_t, httplib::DataSink& sink) {
        auto send = [&sink](const json& j) {
          const std::string event = "data: " + dump(j) + "\n\n";
          return sink.write(event.data(), event.size());
        };
        if (job->chat) send(chunk(*job, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr}, {"finish_reason", nullptr}}));
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
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
    } catch (const HttpError& e) {
      send_error(res, e);
      // A full server: when to try again, as OpenAI's 429s say.
      if (e.status == 429) res.set_header("Retry-After", "1");
    } catch (const std::exception& e) {
      send_error(res, {500, e.what(), "server_error"});
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

OpenAiHttp::OpenAiHttp(const std::string& listen, ServiceContext& ctx, std::shared_ptr<grpc::Channel> channel) {
  if (!tokenizer_available(ctx.config.target_dir))
    throw Error("http_listen: the OpenAI endpoint speaks text, and the target " + ctx.config.target_dir +
                " ships no tokenizer");
  tokenizer_ = std::make_unique<Tokenizer>(ctx.config.target_dir);
  const auto [host, port] = split_host_port(listen, "http_listen");
  auto endpoint = std::make_shared<Endpoint>(ctx, *tokenizer_, std::move(channel));
  http_ = std::make_unique<httplib::Server>();
  http_->set_payload_max_length(static_cast<size_t>(ctx.config.max_message_bytes));
  http_->Get("/v1/models", [endpoint](const httplib::Request& req, httplib::Response& res) {
    try {
      endpoint->authorize(req);
      res.set_content(dump(endpoint->models()), "application/json");
    } catch (const HttpError& e) {
      send_error(res, e);
    }
  });
  http_->Post("/v1/completions", [endpoint](const httplib::Request& req, httplib::Response& res) {
    endpoint->complete(req, res, false);
  });
  http_->Post("/v1/chat/completions", [endpoint](const httplib::Request& req, httplib::Response& res) {
    endpoint->complete(req, res, true);
  });
  // The access log and the status counts: one line a request, with its
  // request id (X-Request-Id back to the client too).
  http_->set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    if (res.status >= 100 && res.status < 600) ctx.counters.http_by_class[static_cast<size_t>(res.status / 100 - 1)].fetch_add(1);
    spdlog::info("event=http_request id={} peer={}:{} method={} path=\"{}\" status={} bytes_in={}",
                 res.get_header_value("X-Request-Id"), req.remote_addr, req.remote_port, log_text(req.method),
                 log_text(req.path), res.status, req.body.size());
  });
  http_->set_pre_routing_handler([&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_header("X-Request-Id", "req-" + std::to_string(ctx.next_session_id.fetch_add(1)));
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // An exception no handler caught: a 500 with no internals (cpp-httplib
  // would put the exception's text in an EXCEPTION_WHAT header).
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, {500, "internal error", "server_error"});
  });
  const int64_t max_body = ctx.config.max_message_bytes;
  http_->set_error_handler([max_body](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    // cpp-httplib answers these before any handler runs: say which limit.
    std::string what = "no such endpoint or method";
    if (res.status == 413)
      what = "request body too large: a JSON body (Content-Type: application/json) may have up to " +
             std::to_string(max_body) +
             " bytes (max_message_bytes); one sent as a form (curl -d without -H 'Content-Type: application/json') "
             "up to 8192";
    else if (res.status == 400)
      what = "malformed HTTP request";
    send_error(res, {res.status, what, "invalid_request_error"});
  });
  port_ = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) throw Error("cannot listen for HTTP on " + listen + " (address in use or invalid?)");
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

OpenAiHttp::~OpenAiHttp() {
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace splitspec
