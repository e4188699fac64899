#include "server/server_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <variant>

#include "common/backend/registry.h"
#include "common/model/model_config.h"
#include "common/tokenizer/chat_template.h"
#include "common/util/error.h"
#include "common/util/json_integer.h"

namespace splitspec {

namespace {

// What server_options.inc's check column may say about one value by itself.
struct Check {
  enum Kind { kAny, kHostPort, kHostPortOrNone, kAtLeast, kRange, kOneOf, kNoEmpty };
  Kind kind = kAny;
  double lo = 0, hi = 0;
  bool open_low = false;  // kRange: (lo, hi] instead of [lo, hi]
  std::string unit;       // kRange: what the number is, e.g. "a number of seconds"
  std::string note;       // after the rule, in parentheses; for kNoEmpty what an element is
  std::vector<std::string> choices;
};

Check make(Check::Kind kind, std::string note = "") {
  Check c;
  c.kind = kind;
  c.note = std::move(note);
  return c;
}
Check range(double lo, double hi, bool open_low, std::string unit, std::string note) {
  Check c = make(Check::kRange, std::move(note));
  c.lo = lo;
  c.hi = hi;
  c.open_low = open_low;
  c.unit = std::move(unit);
  return c;
}
Check any() { return {}; }
Check host_port() { return make(Check::kHostPort); }
Check host_port_or_none() { return make(Check::kHostPortOrNone); }
Check at_least(double lo, std::string note = "") {
  Check c = make(Check::kAtLeast, std::move(note));
  c.lo = lo;
  return c;
}
Check within(double lo, double hi) { return range(lo, hi, false, "", ""); }
// Finite: a time becomes a deadline, and an infinite one is undefined.
Check seconds(double lo, double hi, std::string note = "") { return range(lo, hi, false, "a number of seconds", note); }
Check seconds_above(double lo, double hi) { return range(lo, hi, true, "a number of seconds", ""); }
Check one_of(std::vector<std::string> choices, std::string note = "") {
  Check c = make(Check::kOneOf, std::move(note));
  c.choices = std::move(choices);
  return c;
}
Check no_empty(std::string what) { return make(Check::kNoEmpty, std::move(what)); }

using Member = std::variant<std::string ServerConfig::*, int32_t ServerConfig::*, int64_t ServerConfig::*,
                            double ServerConfig::*, bool ServerConfig::*, std::vector<int64_t> ServerConfig::*,
                            std::vector<std::string> ServerConfig::*, ForwardEmulation ServerConfig::*>;

struct Option {
  std::string key, flags, help;
  Check check;
  Member member;
};

const std::vector<Option>& options() {
  static const std::vector<Option> table = [] {
    std::vector<Option> t = {
#define SPLITSPEC_SERVER_OPTION(type, member, key, default_value, flags, check, help) \
  {key, flags, help, check, &ServerConfig::member},
#include "server/server_options.inc"
#undef SPLITSPEC_SERVER_OPTION
    };
    for (Option& o : t)
      if (o.flags.empty()) {
        o.flags = "--" + o.key;
        std::replace(o.flags.begin(), o.flags.end(), '_', '-');
      }
    return t;
  }();
  return table;
}

// Whole numbers in full (4194304, not 4.1943e+06), others as %g.
std::string number(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string with_note(const std::string& rule, const std::string& note) {
  return note.empty() ? rule : rule + " (" + note + ")";
}

// The option's check on its value; Error "KEY must ..." when it fails.
void check_number(const Option& o, double v) {
  const Check& c = o.check;
  if (c.kind == Check::kAtLeast && !(v >= c.lo))
    throw Error(o.key + " must be " + with_note("at least " + number(c.lo), c.note));
  if (c.kind == Check::kRange && !((c.open_low ? v > c.lo : v >= c.lo) && v <= c.hi))
    throw Error(o.key + " must be " +
                with_note((c.unit.empty() ? "" : c.unit + " ") + "in " + (c.open_low ? "(" : "[") + number(c.lo) +
                              ", " + number(c.hi) + "]",
                          c.note));
}

void check(const Option& o, int32_t v) { check_number(o, v); }
void check(const Option& o, int64_t v) { check_number(o, static_cast<double>(v)); }
void check(const Option& o, double v) { check_number(o, v); }

void check(const Option& o, const std::string& v) {
  const Check& c = o.check;
  if ((c.kind == Check::kHostPort || (c.kind == Check::kHostPortOrNone && !v.empty())) &&
      v.find(':') == std::string::npos)
    throw Error(o.key + " must be HOST:PORT, got '" + v + "'");
  if (c.kind == Check::kOneOf && std::find(c.choices.begin(), c.choices.end(), v) == c.choices.end()) {
    std::string list;
    for (size_t i = 0; i < c.choices.size(); ++i)
      list += (i == 0 ? "" : i + 1 == c.choices.size() ? " or " : ", ") + c.choices[i];
    throw Error(o.key + " must be " + with_note(list, c.note) + ", got '" + v + "'");
  }
}

void check(const Option& o, const std::vector<std::string>& v) {
  if (o.check.kind == Check::kNoEmpty)
    for (const std::string& e : v)
      if (e.empty()) throw Error(o.key + " holds an empty " + o.check.note);
}

void check(const Option&, bool) {}
void check(const Option&, const std::vector<int64_t>&) {}
void check(const Option&, const ForwardEmulation&) {}

void read(const nlohmann::json& v, const std::string& key, std::string& out) {
  if (!v.is_string()) throw Error(key + " must be a string");
  out = v.get<std::string>();
}
void read(const nlohmann::json& v, const std::string& key, int32_t& out) { out = json_integer<int32_t>(v, key); }
void read(const nlohmann::json& v, const std::string& key, int64_t& out) { out = json_integer<int64_t>(v, key); }
void read(const nlohmann::json& v, const std::string& key, double& out) {
  if (!v.is_number()) throw Error(key + " must be a number");
  out = v.get<double>();
}
void read(const nlohmann::json& v, const std::string& key, bool& out) {
  if (!v.is_boolean()) throw Error(key + " must be true or false");
  out = v.get<bool>();
}
void read(const nlohmann::json& v, const std::string& key, std::vector<int64_t>& out) {
  out = json_integers<int64_t>(v, key);
}
void read(const nlohmann::json& v, const std::string& key, std::vector<std::string>& out) {
  if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_string(); }))
    throw Error(key + " must be an array of strings");
  out = v.get<std::vector<std::string>>();
}
// "30:0.3", or a number for a fixed time alone.
void read(const nlohmann::json& v, const std::string& key, ForwardEmulation& out) {
  if (!v.is_number() && !v.is_string()) throw Error(key + " must be \"FIXED[:PER_ROW]\" or a number");
  out = ForwardEmulation::parse(v.is_number() ? std::to_string(v.get<double>()) : v.get<std::string>());
}

std::string text(const std::string& v) { return v; }
std::string text(int32_t v) { return std::to_string(v); }
std::string text(int64_t v) { return std::to_string(v); }
std::string text(double v) { return number(v); }
std::string text(bool v) { return v ? "true" : "false"; }
template <class T>
std::string text(const std::vector<T>& v) {
  return nlohmann::json(v).dump();
}
std::string text(const ForwardEmulation& v) { return v.spec(); }

template <class T>
CLI::Option* add_flag(CLI::App& app, const Option& o, T& sink) {
  return app.add_option(o.flags, sink, o.help)->default_str(text(sink));
}
CLI::Option* add_flag(CLI::App& app, const Option& o, bool& sink) {
  // A switch where the default is off; true|false where it is on.
  if (!sink) return app.add_flag(o.flags, sink, o.help);
  return app.add_option(o.flags, sink, o.help)->default_str(text(sink));
}
template <class T>
CLI::Option* add_flag(CLI::App& app, const Option& o, std::vector<T>& sink) {
  return app.add_option(o.flags, sink, o.help)->delimiter(',');
}
CLI::Option* add_flag(CLI::App& app, const Option& o, ForwardEmulation& sink) {
  return app
      .add_option_function<std::string>(
          o.flags,
          [&sink](const std::string& spec) {
            try {
              sink = ForwardEmulation::parse(spec);
            } catch (const Error& e) {
              throw CLI::ValidationError(e.what());
            }
          },
          o.help)
      ->default_str(sink.spec());
}

}  // namespace

std::vector<ServerOptionInfo> server_options() {
  const ServerConfig defaults;
  std::vector<ServerOptionInfo> out;
  for (const Option& o : options())
    out.push_back({o.key, o.flags, std::visit([&](auto m) { return text(defaults.*m); }, o.member), o.help});
  return out;
}

ServerFlags::ServerFlags(CLI::App& app) {
  for (const Option& o : options())
    options_.push_back(std::visit([&](auto m) { return add_flag(app, o, given_.*m); }, o.member));
}

void ServerFlags::apply(ServerConfig& config) const {
  for (size_t i = 0; i < options_.size(); ++i)
    if (options_[i]->count() > 0) std::visit([&](auto m) { config.*m = given_.*m; }, options()[i].member);
}

ServerConfig ServerConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open server config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": server config is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": server config must be a JSON object");
  ServerConfig c;
  try {
    for (const auto& [key, value] : j.items()) {
      const auto& table = options();
      const auto o = std::find_if(table.begin(), table.end(), [&](const Option& e) { return e.key == key; });
      if (o == table.end()) throw Error("unknown key '" + key + "' (configs/README.md lists the keys)");
      std::visit([&](auto m) { read(value, key, c.*m); }, o->member);
    }
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

void ServerConfig::validate_for_start() const {
  validate();
  if (target_dir.empty()) throw Error("no target model: give --target DIR (or \"target\" in the config file)");
  // The target's config (config.json, or a GGUF file's header) is read
  // here, so --check-config fails on a target that is not there; the
  // weights are left to the load.
  std::error_code ec;
  if (!std::filesystem::exists(target_dir, ec))
    throw Error("target " + target_dir + ": no such file or directory (give --target DIR|FILE.gguf)");
  load_model_config(target_dir);
  // A device this program was built without fails here, not at load.
  const Device d = parse_device(device);
  const std::vector<std::string> kinds = backend_kinds();
  if (std::find(kinds.begin(), kinds.end(), d.kind) == kinds.end()) {
    std::string have;
    for (const std::string& k : kinds) have += (have.empty() ? "" : ", ") + k;
    throw Error("device " + device + ": this splitspec-server was built without the " + d.kind +
                " backend (it has: " + have + "); build it where nvcc is found, or with -DSPLITSPEC_CUDA=ON");
  }
  if (!auth_tokens_file.empty() && tls_cert.empty() && !allow_insecure_tokens)
    throw Error("auth_tokens_file on a plaintext port: clients' tokens would cross the network in the clear; serve "
                "TLS (tls_cert, tls_key), or set allow_insecure_tokens (--allow-insecure-tokens) for a network you trust");
}

void ServerConfig::validate() const {
  for (const Option& o : options()) std::visit([&](auto m) { check(o, this->*m); }, o.member);
  parse_device(device);
  if (tls_cert.empty() != tls_key.empty()) throw Error("tls_cert and tls_key go together: give both, or neither for plaintext");
  if (!tls_client_ca.empty() && tls_cert.empty()) throw Error("tls_client_ca (mutual TLS) needs tls_cert and tls_key");
  if (!tls_client_names.empty() && tls_client_ca.empty())
    throw Error("tls_client_names needs tls_client_ca: only a client certificate carries a name to check");
  if (!chat_template.empty()) {
    const std::vector<std::string> names = chat_template_names();
    if (std::find(names.begin(), names.end(), chat_template) == names.end())
      throw Error("chat_template must be a built-in template's name (llama3, chatml, phi3, llama2, gemma), got '" +
                  chat_template + "'");
  }
  // The HTTP door is never weaker than the gRPC door by accident.
  if (!http_listen.empty() && http_tls == "upstream" && tls_cert.empty())
    throw Error("http_tls is upstream but the gRPC port has no TLS either: set http_tls to same (the default); "
                "upstream is for a plaintext endpoint behind a TLS-terminating proxy while gRPC speaks TLS");
  if (!http_listen.empty() && http_tls == "same" && tls_cert.empty() && !auth_tokens_file.empty() && !allow_insecure_tokens)
    throw Error("http_listen speaks plaintext HTTP (no tls_cert), which would carry the bearer tokens in the clear: "
                "serve TLS (tls_cert, tls_key), or set allow_insecure_tokens for a network you trust");
}

}  // namespace splitspec
