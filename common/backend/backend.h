#pragma once
// The seam between decoding and compute: what a target's verification
// (TargetDecoder, the server's sessions, local decoding) asks of the device
// that runs the target. A backend forwards a batch of sequences, each with
// its tokens, positions and tree mask, over KV stores it owns; gives the
// final norm and LM head to the early exits; and names its numerics, so that
// two targets are known to compute the same bits before a client mixes them.
//
// The CPU engine (common/model) is the first backend (cpu_backend.h); the
// CUDA one lives in cuda/ and is built where nvcc is found. Free of CUDA,
// gRPC and LibTorch: the client's build includes it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/model/model.h"

namespace splitspec {

// What decides a target's bits. Two backends with equal Numerics give
// bitwise the same logits for the same requests; a client that would go on
// with another copy of its target (a fallback, a resumed server) compares
// them. Every field is text, as ServerInfo carries it.
struct Numerics {
  std::string backend;         // "cpu", "cuda"
  std::string arch;            // the kernels' arithmetic: "x86" (AVX2 and AVX-512 give one result),
                               // "neon", "scalar"; a GPU's "sm_90"
  std::string kernels;         // version of that arithmetic: changes whenever a result bit would
  std::string weight_type;     // the layer matrices' type: "bf16", "q4_k", ...
  std::string weights_digest;  // WeightSet::digest(); empty where unknown
  std::string kv_type;         // "f32", "f16"

  // The fields that differ between the two, named ("backend cpu vs cuda"),
  // comma-separated; empty when they compute the same bits. An empty digest
  // on either side is not a difference (it is unknown, not other).
  std::string differences(const Numerics& other) const;
  // One line for logs: "cuda sm_90 kernels 1, q4_k 0123456789abcdef, kv f16".
  std::string summary() const;
};

// The key/value entries of one sequence, where its backend keeps them (host
// memory, a GPU's). Positions [0, size()) are live; a forward appends its
// rows and commits them only when it succeeds.
class KVStore {
 public:
  virtual ~KVStore() = default;
  virtual int64_t size() const = 0;
  virtual int64_t capacity() const = 0;
  // Grows the capacity to at least n, keeping the live entries. Throws
  // splitspec::Error (and changes nothing) past the model's context or
  // where the device has no memory left for it.
  virtual void reserve(int64_t n) = 0;
  // Forget everything after the first n entries.
  virtual void truncate(int64_t n) = 0;
  // Of the entries after `base`, keep `rows` (increasing offsets from
  // base) at base, base+1, ...: the accepted path of a tree.
  virtual void keep(int64_t base, const std::vector<int64_t>& rows) = 0;
  // Bytes its storage holds now.
  virtual size_t bytes() const = 0;
  // Entries [from, from + n) of `layer` as float, k and v [n, kv_heads,
  // head_dim] (a drafter attending over the target's keys reads them).
  // Throws splitspec::Error where the backend does not hand them out.
  virtual void read_rows(int64_t layer, int64_t from, int64_t n, float* k, float* v) const;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const std::string& name() const = 0;
  virtual Numerics numerics() const = 0;
  // The device in words, for logs and metrics: "cpu (avx512)",
  // "cuda:0 NVIDIA H200 (sm_90, 139.8 GiB)".
  virtual std::string device() const = 0;
  virtual WType weight_type() const = 0;
  virtual KVType kv_type() const = 0;
  // Bytes of the weights at their types, where they compute.
  virtual size_t weight_bytes() const = 0;

  // A KV store for one sequence, allocated to `capacity` positions.
  virtual std::unique_ptr<KVStore> new_kv(int64_t capacity) const = 0;
  // Bytes one position of a KV store takes.
  virtual size_t kv_bytes_per_position() const = 0;
  // Bytes a KV store's recurrent states may take besides (a hybrid model's
  // delta-rule layers: kv_cache.h) when its forwards carry at most `rows`
  // rows; 0 for a model without them.
  virtual size_t recurrent_state_bytes(int64_t rows) const { return 0; }
  // Bytes left on the device for KV stores; 0 when they live in host
  // memory (the server budgets those from its own limit).
  virtual uint64_t device_memory_free() const { return 0; }

  // One sequence of a batched forward: its request and its own KV store
  // (made by this backend's new_kv).
  struct Item {
    const ForwardRequest* request;
    KVStore* kv;
  };
  // The forwards of several sequences as one (Model::forward_batch says
  // what a request holds). Result i is bitwise what item i gives alone: a
  // backend's kernels are batch-invariant. On any error every store is left
  // as it was. A request's on_layer may be called from another thread than
  // the caller's, while later layers run, but always before this returns.
  virtual std::vector<ForwardResult> forward_batch(const std::vector<Item>& items) const = 0;

  // The early exits' view of the target: the final norm's gains [hidden],
  // LM-head rows `ids` as floats, and the final norm and LM head on hidden
  // rows [m, hidden]. Computed where convenient (the host may do it for a
  // GPU): exits only predict.
  virtual const float* final_norm() const = 0;
  virtual Rows head_rows(const std::vector<int64_t>& ids) const = 0;
  virtual Rows head_logits(RowsView hidden) const = 0;

  // Why the backend can compute no more (a GPU's sticky error), or empty
  // while it is healthy. A server reports NOT_SERVING once it is not.
  virtual std::string fatal_error() const { return ""; }
};

}  // namespace splitspec
