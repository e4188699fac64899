// The Python module `splitspec`: client.h for Python (docs/client-package.md).
//
//   import splitspec
//   client = splitspec.Client(splitspec.ClientOptions(
//       verifier="local", drafter="model",
//       target_dir="models/demo-target", draft_dir="models/demo-draft"))
//   result = client.generate("Turn left at the", splitspec.Request(max_new_tokens=32))
//   for piece in client.stream("Turn left at the", splitspec.Request()):
//       print(piece, end="", flush=True)
//
// Generating never holds the GIL, so a robot's other Python threads (its
// executor, a stop callback calling cancel()) run meanwhile. Durations are
// datetime.timedelta (a float of seconds is accepted too); verifier and mode
// are the names the CLI takes. splitspec::Error becomes splitspec.Error (a
// RuntimeError) with the same message.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <splitspec/client.h>

#include "common/util/error.h"

namespace py = pybind11;

namespace splitspec {
namespace {

// A Client, and whether a generation runs on it. client.h allows one at a
// time; here a second (another thread, or generate() while a stream is
// open) raises instead of corrupting the first.
class PyClient {
 public:
  explicit PyClient(std::unique_ptr<Client> client) : client_(std::move(client)) {}
  Client& client() { return *client_; }

  // Holds the client for one generation.
  class Lease {
   public:
    Lease() = default;
    explicit Lease(PyClient* owner) : owner_(owner) {
      if (owner_->busy_.exchange(true))
        throw Error("this Client is already running a generation (one at a time: finish, close or cancel it "
                    "first, or use one Client per thread)");
    }
    Lease(Lease&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)) {}
    Lease& operator=(Lease&& o) noexcept {
      release();
      owner_ = std::exchange(o.owner_, nullptr);
      return *this;
    }
    ~Lease() { release(); }
    void release() {
      if (owner_) owner_->busy_ = false;
      owner_ = nullptr;
    }

   private:
    PyClient* owner_ = nullptr;
  };

 private:
  std::unique_ptr<Client> client_;
  std::atomic<bool> busy_{false};
};

// A Python callable as a streaming callback. It runs on the generating thread,
// which takes the GIL for it. Returning False stops the generation; an
// exception (Ctrl-C included) stops it too and is raised once generate()
// returns, so it never unwinds through the library.
template <class Arg>
class PyCallback {
 public:
  explicit PyCallback(py::object fn) : fn_(std::move(fn)) {}
  StreamCallback<Arg> callback() {
    if (fn_.is_none()) return {};
    return [this](Arg a) -> bool {
      py::gil_scoped_acquire gil;
      try {
        const py::object r = fn_(a);
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        return r.ptr() != Py_False;
      } catch (...) {
        error_ = std::current_exception();
        return false;
      }
    };
  }
  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  py::object fn_;
  std::exception_ptr error_;
};

// Items a generation's callback hands to the Python thread iterating.
template <class Item>
class Queue {
 public:
  void push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
  }
  std::optional<Item> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return std::nullopt;
    Item item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
};

// A generation on its own thread (Client::generate_async), read as a Python
// iterator: text pieces (str) or token ids (int), each once final.
template <class Item, class Arg>
class Stream {
 public:
  using Start = std::function<Generation(Client&, StreamCallback<Arg>)>;
  Stream(PyClient& owner, const Start& start) : lease_(&owner), queue_(std::make_shared<Queue<Item>>()) {
    auto queue = queue_;
    py::gil_scoped_release nogil;
    generation_.emplace(start(owner.client(), [queue](Arg item) { queue->push(Item(item)); }));
  }
  // Dropped unfinished (a `break` out of a for loop): cancelled. The GIL is
  // kept: the generation's callback never takes it, and a destructor may run
  // while Python is shutting down.
  ~Stream() {
    if (generation_) {
      cancel_and_wait();
      generation_.reset();
    }
  }

  Item next() {
    if (!generation_) throw py::stop_iteration();
    for (;;) {
      std::optional<Item> item;
      bool done = false;
      {
        py::gil_scoped_release nogil;
        item = queue_->pop(kPoll);
        // Every callback has returned once the generation is done, so an
        // empty queue then is the end. Generation has no completion
        // callback, hence the poll; it only delays the end, by < kPoll.
        if (!item && generation_->done()) {
          item = queue_->pop(std::chrono::milliseconds(0));
          done = !item;
        }
      }
      if (item) return std::move(*item);
      if (done) {
        finish(false);
        throw py::stop_iteration();
      }
      // Ctrl-C while waiting (signals are seen on the main thread only).
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set interrupted;  // taken before close() runs more Python-facing code
        close();
        throw interrupted;
      }
    }
  }

  // Cancels a running generation and waits for it; the result (finish
  // reason "cancelled" unless it had finished) stays readable.
  void close() {
    if (!generation_) return;
    try {
      finish(true);
    } catch (const std::exception&) {
      // A generation failing as it is cancelled has nothing left to report.
    }
  }

  // The generation's Result once the iterator is exhausted or closed, else None.
  py::object result() const { return result_ ? py::cast(*result_) : py::none(); }

 private:
  static constexpr std::chrono::milliseconds kPoll{10};

  // Ends the generation (cancelling it first if asked), keeps its result and
  // frees the client, also when get() rethrows the generation's error.
  void finish(bool cancel) {
    struct Reset {
      Stream* s;
      ~Reset() {
        s->generation_.reset();
        s->lease_.release();
      }
    } reset{this};
    py::gil_scoped_release nogil;
    if (cancel) cancel_and_wait();
    result_ = generation_->get();
  }

  // A cancel that comes before the generation's thread has started it is
  // lost (client.h: it stops the generation running now), so it is repeated
  // until the generation is done.
  void cancel_and_wait() {
    do generation_->cancel();
    while (!generation_->wait_for(kPoll));
  }

  PyClient::Lease lease_;
  std::shared_ptr<Queue<Item>> queue_;
  std::optional<Generation> generation_;  // after queue_: its callback pushes there
  std::optional<Result> result_;
};

using TextStream = Stream<std::string, const std::string&>;
using TokenStream = Stream<int32_t, int32_t>;

// Named fields, so that __repr__ and as_dict() list them as bound.
template <class T>
class Fields {
 public:
  explicit Fields(py::class_<T>& cls) : cls_(cls) {}
  // A member of T or of one of its bases (Request's SpeculativeParams).
  template <class M, class B>
  Fields& rw(const char* name, M B::*member, const char* doc = "") {
    cls_.def_readwrite(name, member, doc);
    names_.push_back(name);
    return *this;
  }
  // The same, read only (Stats' parts).
  template <class M, class B>
  Fields& ro(const char* name, M B::*member, const char* doc = "") {
    cls_.def_readonly(name, member, doc);
    names_.push_back(name);
    return *this;
  }
  // A credential: __repr__ shows that it is set, never its value (reprs end
  // up in logs and tracebacks); as_dict() and the attribute still give it.
  template <class M>
  Fields& secret(const char* name, M T::*member, const char* doc = "") {
    secrets_.push_back(name);
    return rw(name, member, doc);
  }
  template <class Get, class Set>
  Fields& property(const char* name, Get get, Set set, const char* doc = "") {
    cls_.def_property(name, get, set, doc);
    names_.push_back(name);
    return *this;
  }
  // as_dict() and __repr__ ("Request(max_new_tokens=128, ...)"), and, when
  // `init`, a constructor taking any of the fields as keywords.
  void finish(const char* type_name, bool init) {
    auto names = std::make_shared<std::vector<std::string>>(names_);
    auto as_dict = [names](const py::object& self) {
      py::dict d;
      for (const auto& n : *names) {
        py::object v = self.attr(n.c_str());
        d[n.c_str()] = py::hasattr(v, "as_dict") ? v.attr("as_dict")() : v;
      }
      return d;
    };
    cls_.def("as_dict", as_dict, "The fields as a dict (nested ones as dicts too).");
    auto secrets = std::make_shared<std::vector<std::string>>(secrets_);
    cls_.def("__repr__", [names, secrets, type_name](const py::object& self) {
      std::string out = std::string(type_name) + "(";
      for (size_t i = 0; i < names->size(); ++i) {
        const std::string& n = (*names)[i];
        const py::object v = self.attr(n.c_str());
        const bool hidden = std::find(secrets->begin(), secrets->end(), n) != secrets->end() && py::bool_(v);
        out += (i ? ", " : "") + n + "=" + (hidden ? std::string("'<hidden>'") : py::repr(v).template cast<std::string>());
      }
      return out + ")";
    });
    if (init)
      cls_.def(py::init([](const py::kwargs& kwargs) {
                 // Each keyword through its property, so that names are checked
                 // (an unknown one raises AttributeError) and values converted
                 // as on assignment.
                 py::object self = py::cast(T{});
                 for (const auto& kv : kwargs) py::setattr(self, kv.first, kv.second);
                 return self.cast<T>();
               }),
               "Defaults as in client.h; any field may be given as a keyword.");
  }

 private:
  py::class_<T>& cls_;
  std::vector<std::string> names_, secrets_;
};

void bind_options(py::module_& m) {
  py::class_<ClientOptions> cls(m, "ClientOptions",
                                "How a Client generates: verifier, drafter and their settings (client.h).");
  Fields<ClientOptions> f(cls);
  f.property(
       "verifier", [](const ClientOptions& o) { return verifier_name(o.verifier); },
       [](ClientOptions& o, const std::string& v) { o.verifier = parse_verifier(v); }, "'local' or 'server'")
      .rw("drafter", &ClientOptions::drafter, "none, model, model-tree, lut, pld, recurrent or a registered one")
      .rw("predraft", &ClientOptions::predraft, "server verifier: pre-draft on early verdicts")
      .property(
          "mode",
          [](const ClientOptions& o) -> std::optional<std::string> {
            if (!o.mode) return std::nullopt;
            return mode_name(*o.mode);
          },
          [](ClientOptions& o, const std::optional<std::string>& name) {
            o.mode = name ? std::optional<Mode>(parse_mode(*name)) : std::nullopt;
          },
          "an alias of earlier releases (local-ar, local-sd, local-tree, cloud-ar, edge-sd, edge-fsd) or None; "
          "when set, it decides verifier, drafter and predraft")
      .rw("server", &ClientOptions::server, "HOST:PORT, for the server verifier")
      .rw("draft_dir", &ClientOptions::draft_dir)
      .rw("target_dir", &ClientOptions::target_dir)
      .rw("memory_budget", &ClientOptions::memory_budget)
      .rw("device", &ClientOptions::device, "the local target's device: \"cpu\" (\"\") or \"cuda[:N]\" where the "
          "program has the CUDA backend")
      .rw("kv_cache", &ClientOptions::kv_cache, "the local target's KV cache: \"f32\" or \"f16\" (\"\": f32; a "
          "fallback target takes the server's)")
      .rw("dtype", &ClientOptions::dtype, "convert the local target's and the draft's weights at load: \"q4_0\", "
          "\"q4_k_m\", ... (\"\": as stored)")
      .rw("stream_pipeline", &ClientOptions::stream_pipeline)
      .rw("stream_read_ahead", &ClientOptions::stream_read_ahead)
      .rw("drafter_options", &ClientOptions::drafter_options,
          "dict of str to str; reading gives a copy, so assign a whole dict")
      .rw("tokenizer", &ClientOptions::tokenizer)
      .rw("chat_template", &ClientOptions::chat_template, "Request.messages: a built-in template (llama3, chatml, ...)")
      .rw("threads", &ClientOptions::threads, "compute threads; 0: OMP_NUM_THREADS if set, else the physical cores")
      .rw("predraft_threads", &ClientOptions::predraft_threads)
      .rw("predraft_queue", &ClientOptions::predraft_queue, "priority, fifo or random")
      .rw("predraft_adaptive", &ClientOptions::predraft_adaptive)
      .rw("emulate_draft_factor", &ClientOptions::emulate_draft_factor,
          "an emulated slower edge device: drafting takes this many times its measured time (1: real)")
      .rw("connect_timeout", &ClientOptions::connect_timeout, "timedelta (or float seconds)")
      .rw("reconnect_budget", &ClientOptions::reconnect_budget, "timedelta (or float seconds); 0: never reconnect")
      .rw("fallback_target_dir", &ClientOptions::fallback_target_dir)
      .rw("failback_interval", &ClientOptions::failback_interval, "timedelta (or float seconds)")
      .rw("strict_numerics", &ClientOptions::strict_numerics,
          "refuse a fallback target that computes with other numerics than the server (else warn and mark the "
          "generations it verifies: Stats.mixed_numerics)")
      .rw("tls_ca", &ClientOptions::tls_ca)
      .rw("tls_cert", &ClientOptions::tls_cert)
      .rw("tls_key", &ClientOptions::tls_key)
      .rw("tls_server_name", &ClientOptions::tls_server_name)
      .secret("auth_token", &ClientOptions::auth_token)
      .rw("auth_token_file", &ClientOptions::auth_token_file)
      .rw("allow_insecure_tokens", &ClientOptions::allow_insecure_tokens);
  f.finish("ClientOptions", true);

  m.def(
      "with_mode", [](const ClientOptions& o, const std::string& name) { return with_mode(o, name); },
      py::arg("options"), py::arg("mode"),
      "A copy of `options` with the verifier, drafter and predraft that `mode` stands for: an alias "
      "('edge-fsd') or choices as mode_name() writes them ('server+model-tree').");
  m.def(
      "mode_name", [](const ClientOptions& o) { return mode_name(o); }, py::arg("options"),
      "The alias an option set is known by ('edge-fsd'), else its choices ('server+model-tree').");
}

void bind_request(py::module_& m) {
  py::class_<Message> msg(m, "Message", "One turn of a conversation: role 'system', 'user' or 'assistant'.");
  msg.def(py::init([](std::string role, std::string content) { return Message{std::move(role), std::move(content)}; }),
          py::arg("role"), py::arg("content"));
  Fields<Message>(msg).rw("role", &Message::role).rw("content", &Message::content).finish("Message", true);
  py::class_<Request> cls(m, "Request", "One generation's settings (client.h).");
  Fields<Request>(cls)
      .rw("messages", &Request::messages,
          "a conversation instead of a prompt (generate('')): the model's chat template writes the prompt")
      .rw("stop", &Request::stop, "stop once the text holds one of these strings (left out of the text)")
      .rw("max_new_tokens", &Request::max_new_tokens)
      .rw("temperature", &Request::temperature, "0: greedy")
      .rw("top_k", &Request::top_k, "0: off")
      .rw("top_p", &Request::top_p, "1: off")
      .rw("seed", &Request::seed)
      .rw("ignore_eos", &Request::ignore_eos)
      .rw("gamma", &Request::gamma, "the model drafter: draft tokens per round")
      .rw("deadline", &Request::deadline, "timedelta (or float seconds): the whole generation")
      .rw("round_timeout", &Request::round_timeout,
          "timedelta (or float seconds): one server round; 0: only the deadline")
      .finish("Request", true);
}

void bind_results(py::module_& m) {
  py::class_<Stats> stats(m, "Stats", "What a generation measured (client.h documents each field).");
  Fields<Stats> fields(stats);
  const Stats layout;
  Stats::parts(layout, [&fields](const char*, const auto& part) {
    std::decay_t<decltype(part)>::fields([&fields](const char* name, auto member, Merge) { fields.ro(name, member); });
  });
  fields.finish("Stats", false);
  stats.def(py::init<>())
      .def(
          "__iadd__", [](Stats& total, const Stats& s) -> Stats& { return total += s; },
          "Adds a generation: counts and times summed, means, rates and percentiles recomputed from the sums.")
      .def(
          "__add__", [](Stats a, const Stats& b) { return a += b; }, "The sum of two (see __iadd__).");

  py::class_<Result> result(m, "Result", "A generation's tokens, text, finish reason and stats.");
  Fields<Result>(result)
      .ro("prompt_ids", &Result::prompt_ids)
      .ro("ids", &Result::ids, "generated ids")
      .ro("text", &Result::text, "generated text (empty without a tokenizer)")
      .ro("finish_reason", &Result::finish_reason, "'length', 'eos', 'context' or 'cancelled'")
      .ro("stats", &Result::stats)
      .finish("Result", false);

  py::class_<ServerInfo> info(m, "ServerInfo", "What splitspec-server reports about itself.");
  Fields<ServerInfo>(info)
      .ro("model_name", &ServerInfo::model_name)
      .ro("vocab_size", &ServerInfo::vocab_size)
      .ro("tokenizer_fingerprint", &ServerInfo::tokenizer_fingerprint)
      .ro("max_context", &ServerInfo::max_context)
      .ro("max_draft_tokens", &ServerInfo::max_draft_tokens)
      .ro("active_sessions", &ServerInfo::active_sessions)
      .ro("version", &ServerInfo::version)
      .ro("kv_cache", &ServerInfo::kv_cache)
      .ro("backend", &ServerInfo::backend, "what computes the target: 'cpu' or 'cuda'")
      .ro("device", &ServerInfo::device, "the device in words")
      .ro("emulated_forward_ms", &ServerInfo::emulated_forward_ms, "FIXED:PER_ROW when the server's times are emulated")
      .finish("ServerInfo", false);
}

template <class S>
void bind_stream(py::module_& m, const char* name, const char* doc) {
  py::class_<S>(m, name, doc)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &S::next)
      .def("close", &S::close, "Cancels the generation if it still runs, and waits for it.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](S& s, const py::args&) { s.close(); })
      .def_property_readonly("result", &S::result,
                             "The Result once the iterator is exhausted or closed, else None.");
}

std::unique_ptr<PyClient> connect(const ClientOptions& options) {
  py::gil_scoped_release nogil;
  return std::make_unique<PyClient>(Client::connect(options));
}

void bind_client(py::module_& m) {
  bind_stream<TextStream>(m, "TextStream", "Client.stream(): the generated text, piece by piece, as it becomes final.");
  bind_stream<TokenStream>(m, "TokenStream", "Client.stream_ids(): the generated ids, each once final.");

  py::class_<PyClient>(m, "Client",
                       "A SplitSpec client: loads the local model(s) and, with the server verifier, connects. One "
                       "generation at a time; cancel() from any thread.")
      .def(py::init(&connect), py::arg("options"))
      .def_static("connect", &connect, py::arg("options"), "The same as Client(options).")
      .def(
          "generate",
          [](PyClient& c, const std::string& prompt, const Request& request, py::object on_text) {
            PyCallback<const std::string&> cb(std::move(on_text));
            Result r;
            {
              PyClient::Lease lease(&c);
              py::gil_scoped_release nogil;
              r = c.client().generate(prompt, request, cb.callback());
            }
            cb.rethrow();
            return r;
          },
          py::arg("prompt"), py::arg("request") = Request(), py::arg("on_text") = py::none(),
          "Text prompt, tokenized with BOS prepended. on_text(piece) receives the text as it becomes final; "
          "returning False stops the generation (finish_reason 'cancelled').")
      .def(
          "generate_ids",
          [](PyClient& c, const std::vector<int32_t>& ids, const Request& request, py::object on_token) {
            PyCallback<int32_t> cb(std::move(on_token));
            Result r;
            {
              PyClient::Lease lease(&c);
              py::gil_scoped_release nogil;
              r = c.client().generate_ids(ids, request, cb.callback());
            }
            cb.rethrow();
            return r;
          },
          py::arg("prompt_ids"), py::arg("request") = Request(), py::arg("on_token") = py::none(),
          "Token ids, used verbatim. on_token(id) receives each id once final; returning False stops.")
      .def(
          "stream",
          [](PyClient& c, const std::string& prompt, const Request& request) {
            return std::make_unique<TextStream>(c, [prompt, request](Client& client, OnText on_text) {
              return client.generate_async(prompt, request, std::move(on_text));
            });
          },
          py::arg("prompt"), py::arg("request") = Request(), py::keep_alive<0, 1>(),
          "generate() as an iterator of text pieces; .result holds the Result at the end. Dropping or "
          "closing it early cancels the generation.")
      .def(
          "stream_ids",
          [](PyClient& c, const std::vector<int32_t>& ids, const Request& request) {
            return std::make_unique<TokenStream>(c, [ids, request](Client& client, OnToken on_token) {
              return client.generate_ids_async(ids, request, std::move(on_token));
            });
          },
          py::arg("prompt_ids"), py::arg("request") = Request(), py::keep_alive<0, 1>(),
          "generate_ids() as an iterator of ids.")
      .def(
          "cancel", [](PyClient& c) { c.client().cancel(); }, py::call_guard<py::gil_scoped_release>(),
          "Stops the running generation at the next round boundary, from any thread; it returns what it made, "
          "finish_reason 'cancelled'.")
      .def(
          "server_info", [](PyClient& c) { return c.client().server_info(); },
          py::call_guard<py::gil_scoped_release>(), "Server verifier only.")
      .def(
          "ping_ms", [](PyClient& c) { return c.client().ping_ms(); }, py::call_guard<py::gil_scoped_release>(),
          "One GetInfo round trip, in ms.");
}

}  // namespace
}  // namespace splitspec

PYBIND11_MODULE(splitspec, m) {
  m.doc() = "SplitSpec: exact speculative decoding on an edge device, with or without a server.";
  m.attr("__version__") = SPLITSPEC_VERSION;
  // Module-local: other pybind11 modules in the process keep their own translators.
  py::register_local_exception<splitspec::Error>(m, "Error", PyExc_RuntimeError);
  splitspec::bind_options(m);
  splitspec::bind_request(m);
  splitspec::bind_results(m);
  splitspec::bind_client(m);
}
