#pragma once
// The HTTP/1.1 transport of the server's front door (Boost.Beast over Asio,
// OpenSSL for TLS): it owns sockets, deadlines, limits and certificates;
// what a request means is its handlers' business (openai.h).
//
// Every resource a client can hold is bounded: a deadline for the TLS
// handshake and the whole request (head and body), a header size limit, a
// body limit checked against Content-Length before reading, a bound on open
// connections and on requests waiting for a worker (503 beyond), a deadline
// for each write of a response (a reader that never reads loses its
// connection, and its handler learns so), keep-alive requests per
// connection. A request's head is checked (token, certificate names, route)
// before its body is read. stop() closes every socket at once, whatever the
// sockets are doing. docs/http.md says why cpp-httplib could not.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace splitspec::http {

struct Limits {
  double request_timeout_s = 10;  // TLS handshake, and a request's head and body from its first awaited byte
  double send_timeout_s = 10;     // each write of a response
  uint32_t max_header_bytes = 16 << 10;
  uint64_t max_body_bytes = 4 << 20;
  int max_connections = 256;      // open sockets; beyond: 503, closed
  int max_queued = 64;            // complete requests waiting for a worker; beyond: 503
  int workers = 8;                // requests handled at once
  int keep_alive_requests = 100;  // then the connection is closed
};

// PEM files; an empty cert: plaintext. With client_ca, clients must present
// a certificate it signed. The files are re-read every reload_s when they
// change, for new connections.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string client_ca;
  int reload_s = 10;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// What is known of a request before its body is read.
struct Head {
  std::string method;
  std::string target;  // path and query as sent
  std::string peer;    // address of the socket's other end
  uint16_t peer_port = 0;
  std::string request_id;
  Headers headers;
  // A mutual-TLS client's certificate: common name and subject alternative
  // names (DNS, URI, e-mail, IP).
  std::vector<std::string> client_names;
  std::optional<uint64_t> content_length;

  // The first value of header `name` (case-insensitive); "" when absent.
  std::string header(const std::string& name) const;
  std::string path() const { return target.substr(0, target.find('?')); }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;
  // Held this long before it is sent, without holding a thread (a peer
  // guessing tokens).
  std::chrono::milliseconds delay{0};
};

// One request being answered, on a worker thread. Calls block until the
// bytes are written or the client is gone.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Head& head() const = 0;
  virtual const std::string& body() const = 0;
  virtual void respond(Response r) = 0;
  // A chunked response (text/event-stream); false once the client is gone
  // or a write missed its deadline, after which nothing more is sent.
  virtual bool begin_stream(int status, const std::string& content_type, const Headers& headers) = 0;
  virtual bool send(const std::string& bytes) = 0;
  virtual void end_stream() = 0;
  // Runs once (on the transport's thread) if the client goes before the
  // response ends; a handler cancels its work there.
  virtual void on_gone(std::function<void()> cancel) = 0;
};

struct Handlers {
  // On the transport's thread, once the head is read: a refusal (401, 403,
  // 404, 413, 415, ...), or nothing to read the body and call `handle`.
  std::function<std::optional<Response>(const Head&)> check;
  // On a worker thread with the whole body.
  std::function<void(Exchange&)> handle;
  // After each answer, for the access log and the status counts.
  std::function<void(const Head&, int status, uint64_t bytes_in)> done;
  // A fresh request id ("req-N").
  std::function<std::string()> next_id;
};

class Server {
 public:
  // Listens on `listen` (HOST:PORT, port 0: any free one) at once; throws
  // splitspec::Error when it cannot or when the TLS files do not load.
  Server(const std::string& listen, Limits limits, TlsFiles tls, Handlers handlers);
  // stop().
  ~Server();
  int port() const;
  bool tls() const;
  // Stops accepting, closes every socket and waits for the handlers, whose
  // writes fail from now on.
  void stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace splitspec::http
