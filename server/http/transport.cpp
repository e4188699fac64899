#include "server/http/transport.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/util/error.h"
#include "common/util/host_port.h"

namespace splitspec::http {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string Head::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, name)) return v;
  return "";
}

namespace {

Clock::duration seconds(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

// A response's status line and headers, up to the blank line; an empty
// request id is left out.
std::string head_lines(int status, const std::string& content_type, const Headers& headers,
                       const std::string& request_id, bool keep_alive, const std::string& framing) {
  std::string s = "HTTP/1.1 " + std::to_string(status) + " " +
                  std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status))) +
                  "\r\nContent-Type: " + content_type + "\r\n" + framing;
  for (const auto& [k, v] : headers) s += k + ": " + v + "\r\n";
  if (!request_id.empty()) s += "X-Request-Id: " + request_id + "\r\n";
  return s + "Connection: " + (keep_alive ? "keep-alive" : "close") + "\r\n\r\n";
}

// A whole response, its length given.
std::string whole(const Response& r, const std::string& request_id, bool keep_alive) {
  return head_lines(r.status, r.content_type, r.headers, request_id, keep_alive,
                    "Content-Length: " + std::to_string(r.body.size()) + "\r\n") +
         r.body;
}

// The same shape as the endpoint's errors (openai.cpp).
std::string error_body(const std::string& message, const char* type = "invalid_request_error") {
  return nlohmann::json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}.dump();
}

Response internal_error() { return {500, "application/json", error_body("internal error", "server_error"), {}}; }

// A client certificate's names, as gRPC's auth context lists them: common
// name, then DNS, URI, e-mail and IP subject alternative names.
std::vector<std::string> certificate_names(SSL* ssl) {
  std::vector<std::string> names;
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (!cert) return names;
  X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) {
    unsigned char* utf8 = nullptr;
    const int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
    if (n >= 0) names.emplace_back(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
    OPENSSL_free(utf8);
  }
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
    if (g->type == GEN_DNS || g->type == GEN_URI || g->type == GEN_EMAIL) {
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.ia5)),
                         static_cast<size_t>(ASN1_STRING_length(g->d.ia5)));
    } else if (g->type == GEN_IPADD) {
      const unsigned char* p = ASN1_STRING_get0_data(g->d.iPAddress);
      const int n = ASN1_STRING_length(g->d.iPAddress);
      if (n == 4) {
        net::ip::address_v4::bytes_type b;
        std::copy(p, p + 4, b.begin());
        names.push_back(net::ip::address_v4(b).to_string());
      } else if (n == 16) {
        net::ip::address_v6::bytes_type b;
        std::copy(p, p + 16, b.begin());
        names.push_back(net::ip::address_v6(b).to_string());
      }
    }
  }
  GENERAL_NAMES_free(sans);
  X509_free(cert);
  return names;
}

// The TLS context new connections get: rebuilt when a file changes (checked
// at most every reload_s, at accept), the last good one kept when a new one
// fails to load.
class TlsContexts {
 public:
  explicit TlsContexts(TlsFiles files) : files_(std::move(files)), stamp_(stamp()), current_(build()) {}

  std::shared_ptr<ssl::context> current() {
    std::lock_guard<std::mutex> lock(mu_);
    if (Clock::now() - checked_ < std::chrono::seconds(files_.reload_s)) return current_;
    checked_ = Clock::now();
    const std::string now = stamp();
    if (now != stamp_) {
      try {
        current_ = build();
        stamp_ = now;
        spdlog::info("event=http_tls_reloaded cert={}", files_.cert);
      } catch (const std::exception& e) {
        spdlog::warn("event=http_tls_reload_failed error=\"{}\" note=\"serving the previous certificate\"", e.what());
      }
    }
    return current_;
  }

 private:
  std::string stamp() const {
    std::string s;
    for (const std::string& f : {files_.cert, files_.key, files_.client_ca}) {
      std::error_code ec;
      if (f.empty()) continue;
      const auto t = std::filesystem::last_write_time(f, ec);
      s += std::to_string(ec ? 0 : t.time_since_epoch().count()) + ":" +
           std::to_string(ec ? 0 : std::filesystem::file_size(f, ec)) + ";";
    }
    return s;
  }

  std::shared_ptr<ssl::context> build() const {
    auto c = std::make_shared<ssl::context>(ssl::context::tls_server);
    c->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    auto load = [](const std::string& path, const char* what, auto&& fn) {
      try {
        fn();
      } catch (const boost::system::system_error& e) {
        throw Error(path + ": cannot load the " + what + " (" + e.code().message() + ")");
      }
    };
    load(files_.cert, "TLS certificate", [&] { c->use_certificate_chain_file(files_.cert); });
    load(files_.key, "TLS private key", [&] { c->use_private_key_file(files_.key, ssl::context::pem); });
    if (!files_.client_ca.empty()) {
      load(files_.client_ca, "client CA certificate", [&] { c->load_verify_file(files_.client_ca); });
      c->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    return c;
  }

  const TlsFiles files_;
  std::mutex mu_;
  std::string stamp_;
  std::shared_ptr<ssl::context> current_;
  Clock::time_point checked_ = Clock::now();
};

class Conn {
 public:
  virtual ~Conn() = default;
  virtual void start() = 0;
  // On the transport's thread: closes the socket; what is pending fails.
  virtual void close() = 0;
  // On a worker thread: runs the request's handler.
  virtual void serve() = 0;
  virtual net::any_io_executor executor() = 0;
};

}  // namespace

struct Server::Impl {
  Impl(Limits l, Handlers h) : limits(l), handlers(std::move(h)) {}

  const Limits limits;
  const Handlers handlers;
  std::optional<TlsContexts> tls;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Conn>> queue;
  std::set<std::weak_ptr<Conn>, std::owner_less<std::weak_ptr<Conn>>> conns;
  bool stopping = false;
  std::atomic<int> open{0};

  // Declared after what its handlers touch, so that it is destroyed first.
  net::io_context ioc{1};
  net::executor_work_guard<net::io_context::executor_type> work = net::make_work_guard(ioc);
  tcp::acceptor acceptor{ioc};
  std::thread io_thread;
  std::vector<std::thread> workers;

  void accept();
  void adopt(tcp::socket socket);
  // False when the queue is full or the server stopping.
  bool enqueue(std::shared_ptr<Conn> c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping || static_cast<int>(queue.size()) >= limits.max_queued) return false;
      queue.push_back(std::move(c));
    }
    cv.notify_one();
    return true;
  }
  void work_loop() {
    for (;;) {
      std::shared_ptr<Conn> c;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping) return;
        c = std::move(queue.front());
        queue.pop_front();
      }
      c->serve();
    }
  }
};

namespace {

template <class Stream>
class Connection final : public Conn, public Exchange, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, ssl::stream<tcp::socket>>;

  template <class... Context>
  Connection(Server::Impl& server, std::shared_ptr<void> keep, tcp::socket socket, Context&... context)
      : server_(server),
        keep_(std::move(keep)),
        stream_(std::move(socket), context...),
        deadline_(stream_.get_executor()),
        delay_(stream_.get_executor()) {
    beast::error_code ec;
    const tcp::endpoint remote = lowest().remote_endpoint(ec);
    if (!ec) {
      peer_ = remote.address().to_string();
      peer_port_ = remote.port();
    }
  }
  ~Connection() override { server_.open.fetch_sub(1); }

  net::any_io_executor executor() override { return stream_.get_executor(); }

  void start() override {
    if constexpr (kTls) {
      arm(server_.limits.request_timeout_s);
      stream_.async_handshake(ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
        if (ec) {
          spdlog::debug("event=http_tls_refused peer={} error=\"{}\"", self->peer_, ec.message());
          return self->close();
        }
        self->client_names_ = certificate_names(self->stream_.native_handle());
        self->read_head();
      });
    } else {
      read_head();
    }
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    deadline_.cancel();
    delay_.cancel();
    lowest().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close(ec);
    gone();
  }

  // Exchange, from the worker thread.
  const Head& head() const override { return head_; }
  const std::string& body() const override { return body_; }

  void respond(Response r) override {
    responded_ = true;
    ended_ = true;
    std::string out = whole(r, head_.request_id, keep_alive_);
    net::post(executor(), [self = this->shared_from_this(), out = std::move(out), status = r.status]() mutable {
      self->write(std::move(out), [self, status](bool) { self->complete_one(status); });
    });
  }

  bool begin_stream(int status, const std::string& content_type, const Headers& headers) override {
    responded_ = true;
    stream_status_ = status;
    // HTTP/1.0 has no chunks: the body ends with the connection.
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    return send_now(head_lines(status, content_type, headers, head_.request_id, keep_alive_,
                               chunked_ ? "Transfer-Encoding: chunked\r\n" : ""));
  }

  bool send(const std::string& bytes) override {
    if (bytes.empty()) return !failed_.load();
    std::ostringstream size;
    size << std::hex << bytes.size();
    return send_now(chunked_ ? size.str() + "\r\n" + bytes + "\r\n" : bytes);
  }

  void end_stream() override {
    ended_ = true;
    net::post(executor(), [self = this->shared_from_this()] {
      const int status = self->stream_status_;
      if (!self->chunked_ || self->failed_) return self->complete_one(status);
      self->write("0\r\n\r\n", [self, status](bool) { self->complete_one(status); });
    });
  }

  void on_gone(std::function<void()> cancel) override {
    net::post(executor(), [self = this->shared_from_this(), cancel = std::move(cancel)]() mutable {
      if (self->gone_)
        cancel();
      else
        self->on_gone_ = std::move(cancel);
    });
  }

  void serve() override {
    try {
      server_.handlers.handle(*this);
    } catch (const std::exception& e) {
      spdlog::error("event=http_handler_error id={} error=\"{}\"", head_.request_id, e.what());
    }
    if (!responded_)
      respond(internal_error());
    else if (!ended_)
      end_stream();
    // The next request on this connection waits for this: the worker touches
    // the request's state until here.
    net::post(executor(), [self = this->shared_from_this()] { self->complete_one(0); });
  }

 private:
  tcp::socket& lowest() {
    if constexpr (kTls)
      return stream_.next_layer();
    else
      return stream_;
  }

  // The socket closes when `s` seconds pass before disarm(): a request's
  // head and body, a handshake, one write.
  void arm(double s) { arm_at(Clock::now() + seconds(s)); }
  void arm_at(Clock::time_point until) {
    deadline_.expires_at(until);
    deadline_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) {
        spdlog::debug("event=http_deadline peer={} id={}", self->peer_, self->head_.request_id);
        self->close();
      }
    });
  }
  void disarm() { deadline_.cancel(); }

  void read_head() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(server_.limits.max_header_bytes);
    parser_->body_limit(server_.limits.max_body_bytes);
    request_until_ = Clock::now() + seconds(server_.limits.request_timeout_s);
    arm_at(request_until_);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(beast::error_code ec) {
    if (closed_) return;
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == ssl::error::stream_truncated)
      return close();
    head_ = Head{};
    head_.peer = peer_;
    head_.peer_port = peer_port_;
    head_.client_names = client_names_;
    head_.request_id = server_.handlers.next_id();
    // The parser refuses a Content-Length over the limit as it reads the head.
    if (ec == bhttp::error::body_limit)
      return refuse(413, "request body too large: over the " + std::to_string(server_.limits.max_body_bytes) +
                             " bytes of max_message_bytes");
    if (ec == bhttp::error::header_limit)
      return refuse(431, "the request's headers exceed " + std::to_string(server_.limits.max_header_bytes) + " bytes");
    if (ec) return refuse(400, "malformed HTTP request (" + ec.message() + ")");
    const auto& req = parser_->get();
    version_ = req.version();
    head_.method = std::string(req.method_string());
    head_.target = std::string(req.target());
    for (const auto& field : req) head_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    if (const auto length = parser_->content_length()) head_.content_length = *length;
    keep_alive_ = req.keep_alive() && ++served_ < server_.limits.keep_alive_requests;
    if (head_.content_length && *head_.content_length > server_.limits.max_body_bytes)
      return refuse(413, "request body too large: " + std::to_string(*head_.content_length) + " bytes, over the " +
                             std::to_string(server_.limits.max_body_bytes) + " of max_message_bytes");
    std::optional<Response> refusal;
    try {
      refusal = server_.handlers.check(head_);
    } catch (const std::exception& e) {
      spdlog::error("event=http_check_error id={} error=\"{}\"", head_.request_id, e.what());
      refusal = internal_error();
    }
    if (refusal) return refuse(std::move(*refusal));
    if (parser_->is_done()) return dispatch();
    // The body keeps the request's deadline (a 100 Continue's write has its own in between).
    auto read_body = [self = this->shared_from_this()] {
      self->arm_at(self->request_until_);
      bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                        [self](beast::error_code ec, size_t) { self->on_body(ec); });
    };
    if (beast::iequals(head_.header("Expect"), "100-continue"))
      write("HTTP/1.1 100 Continue\r\n\r\n", [read_body](bool ok) {
        if (ok) read_body();
      });
    else
      read_body();
  }

  void on_body(beast::error_code ec) {
    if (closed_) return;
    if (ec == bhttp::error::body_limit)
      return refuse(413, "request body too large: over the " + std::to_string(server_.limits.max_body_bytes) +
                             " bytes of max_message_bytes");
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted) return close();
    if (ec) return refuse(400, "malformed HTTP request body (" + ec.message() + ")");
    dispatch();
  }

  void dispatch() {
    disarm();
    head_.content_length = parser_->get().body().size();
    body_ = parser_->release().body();
    parser_.reset();
    responded_ = false;
    ended_ = false;
    chunked_ = false;
    failed_ = false;
    // Done when both the answer's last write and the worker have returned.
    pending_ = 2;
    if (!server_.enqueue(this->shared_from_this())) {
      keep_alive_ = false;
      return refuse(Response{503, "application/json",
                             error_body("the server has too many requests waiting; retry shortly", "server_error"),
                             {{"Retry-After", "1"}}});
    }
    watch();
  }

  // While a request is handled, a read notices the client leaving (a
  // non-streamed generation then stops). Bytes of a pipelined next request
  // are kept for it.
  void watch() {
    if (buffer_.size() > 0 || closed_) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (ec) {
        self->gone();
        if (self->awaiting_) self->close();
        return;
      }
      self->buffer_.commit(n);
      if (self->awaiting_) {
        self->awaiting_ = false;
        self->read_head();
      }
    });
  }

  void gone() {
    gone_ = true;
    failed_ = true;
    if (on_gone_) {
      auto cancel = std::move(on_gone_);
      on_gone_ = nullptr;
      cancel();
    }
  }

  void refuse(int status, const std::string& message) {
    refuse(Response{status, "application/json", error_body(message), {}});
  }

  // An answer from the transport's thread. A body left unread ends the connection.
  void refuse(Response r) {
    disarm();
    if (parser_ && !parser_->is_done()) keep_alive_ = false;
    if (r.status == 400 || r.status == 431 || r.status == 413) keep_alive_ = false;
    const int status = r.status;
    std::string out = whole(r, head_.request_id, keep_alive_);
    auto send = [self = this->shared_from_this(), out = std::move(out), status]() mutable {
      self->write(std::move(out), [self, status](bool) { self->finish(status); });
    };
    if (r.delay.count() <= 0) return send();
    delay_.expires_after(r.delay);
    delay_.async_wait([send = std::move(send)](beast::error_code ec) mutable {
      if (!ec) send();
    });
  }

  // A write with the send deadline; `then` learns whether it went out.
  template <class Then>
  void write(std::string bytes, Then then) {
    if (closed_ || failed_) return then(false);
    auto buffer = std::make_shared<std::string>(std::move(bytes));
    arm(server_.limits.send_timeout_s);
    net::async_write(stream_, net::buffer(*buffer),
                     [self = this->shared_from_this(), buffer, then = std::move(then)](beast::error_code ec, size_t) mutable {
                       self->disarm();
                       if (ec) {
                         self->failed_ = true;
                         self->close();
                       }
                       then(!ec);
                     });
  }

  // From a worker: writes and waits for the bytes to go out.
  bool send_now(std::string bytes) {
    if (failed_) return false;
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> result = done->get_future();
    net::post(executor(), [self = this->shared_from_this(), bytes = std::move(bytes), done]() mutable {
      self->write(std::move(bytes), [done](bool ok) { done->set_value(ok); });
    });
    return result.get();
  }

  // One of a handled request's two ends (its last write, with its status;
  // its worker's return, with 0).
  void complete_one(int status) {
    if (status > 0) final_status_ = status;
    if (--pending_ == 0) finish(final_status_);
  }

  // A response has gone out (or failed): log it, then the next request.
  void finish(int status) {
    on_gone_ = nullptr;
    server_.handlers.done(head_, status, head_.content_length.value_or(0));
    if (closed_ || failed_ || !keep_alive_) return close();
    if (watching_) {
      // The pending read continues as the next request's first bytes.
      awaiting_ = true;
      arm(server_.limits.request_timeout_s);
      return;
    }
    read_head();
  }

  Server::Impl& server_;
  // The TLS context the stream was made from.
  std::shared_ptr<void> keep_;
  Stream stream_;
  net::steady_timer deadline_;
  Clock::time_point request_until_;
  net::steady_timer delay_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string peer_;
  uint16_t peer_port_ = 0;
  std::vector<std::string> client_names_;
  Head head_;
  std::string body_;
  unsigned version_ = 11;
  int served_ = 0;
  int stream_status_ = 200;
  bool keep_alive_ = false;
  bool closed_ = false;
  bool gone_ = false;
  bool watching_ = false;
  bool awaiting_ = false;
  // Set by the worker while it runs, read by it and, after its return, by the
  // next request's dispatch.
  bool responded_ = false;
  bool ended_ = false;
  int pending_ = 0;
  int final_status_ = 500;
  bool chunked_ = false;
  std::atomic<bool> failed_{false};
  std::function<void()> on_gone_;
};

}  // namespace

void Server::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) adopt(std::move(socket));
    accept();
  });
}

void Server::Impl::adopt(tcp::socket socket) {
  if (open.load() >= limits.max_connections) {
    // Best effort, without waiting on the client: a plaintext 503; a TLS
    // client sees its connection closed.
    beast::error_code ec;
    if (!tls) {
      const std::string out =
          whole({503, "application/json", error_body("the server has too many open connections; retry shortly", "server_error"),
                 {{"Retry-After", "1"}}},
                "", false);
      socket.non_blocking(true, ec);
      socket.write_some(net::buffer(out), ec);
    }
    socket.close(ec);
    spdlog::debug("event=http_connection_refused open={} max={}", open.load(), limits.max_connections);
    return;
  }
  open.fetch_add(1);
  std::shared_ptr<Conn> c;
  if (tls) {
    std::shared_ptr<ssl::context> context = tls->current();
    c = std::make_shared<Connection<ssl::stream<tcp::socket>>>(*this, context, std::move(socket), *context);
  } else {
    c = std::make_shared<Connection<tcp::socket>>(*this, nullptr, std::move(socket));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = conns.begin(); it != conns.end();) it = it->expired() ? conns.erase(it) : std::next(it);
    conns.insert(c);
  }
  c->start();
}

Server::Server(const std::string& listen, Limits limits, TlsFiles tls, Handlers handlers)
    : impl_(std::make_shared<Impl>(limits, std::move(handlers))) {
  if (!tls.cert.empty()) impl_->tls.emplace(std::move(tls));
  const auto [host, port] = split_host_port(listen, "http_listen");
  try {
    const net::ip::address address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host);
    const tcp::endpoint at(address, static_cast<uint16_t>(port));
    impl_->acceptor.open(at.protocol());
    impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(at);
    impl_->acceptor.listen(net::socket_base::max_listen_connections);
    impl_->port = impl_->acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw Error("cannot listen for HTTP on " + listen + " (" + e.code().message() + ")");
  }
  impl_->accept();
  impl_->io_thread = std::thread([impl = impl_.get()] { impl->ioc.run(); });
  for (int i = 0; i < limits.workers; ++i) impl_->workers.emplace_back([impl = impl_.get()] { impl->work_loop(); });
}

Server::~Server() { stop(); }

int Server::port() const { return impl_->port; }
bool Server::tls() const { return impl_->tls.has_value(); }

void Server::stop() {
  Impl& s = *impl_;
  std::vector<std::shared_ptr<Conn>> live;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    s.queue.clear();
    for (const auto& w : s.conns)
      if (auto c = w.lock()) live.push_back(std::move(c));
    s.conns.clear();
  }
  s.cv.notify_all();
  net::post(s.ioc, [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
  });
  for (auto& c : live) net::post(c->executor(), [c] { c->close(); });
  live.clear();
  // Handlers see their writes fail and their clients gone; the caller has
  // cancelled the work they wait on.
  for (std::thread& t : s.workers) t.join();
  s.work.reset();
  // Everything pending fails at once on closed sockets; a second is a generous bound.
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (!s.ioc.stopped() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.ioc.stop();
  s.io_thread.join();
}

}  // namespace splitspec::http
