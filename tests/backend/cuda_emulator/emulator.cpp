// The CPU emulator of CUDA (cuda_runtime.h here): host memory for device
// memory, synchronous streams, and kernels run block by block with each
// thread a fiber that yields at every barrier and shuffle.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/backend/cuda/warp_math.h"

namespace {

std::mutex g_state_mu;  // memory map and last error; launches take g_launch_mu
cudaError_t g_last = cudaSuccess;
std::map<void*, size_t> g_device;
size_t g_used = 0;

size_t capacity() {
  static const size_t bytes = [] {
    const char* env = std::getenv("SPLITSPEC_EMULATED_GPU_MIB");
    return static_cast<size_t>(env ? std::atoll(env) : 4096) << 20;
  }();
  return bytes;
}

cudaError_t set_error(cudaError_t e) {
  std::lock_guard<std::mutex> lk(g_state_mu);
  if (e != cudaSuccess) g_last = e;
  return e;
}

struct EmulatedEventState {
  std::chrono::steady_clock::time_point at;
};

}  // namespace

struct EmulatedGraph {
  std::vector<std::function<void()>> launches;
};
struct EmulatedStream {
  EmulatedGraph* capturing = nullptr;
};
struct EmulatedEvent {
  EmulatedEventState state;
};

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return set_error(cudaErrorInvalidValue);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "SplitSpec CUDA emulator (CPU)");
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = capacity();
  p->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidValue); }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lk(g_state_mu);
  *total = capacity();
  *free = capacity() - g_used;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_state_mu);
  if (g_used + bytes > capacity()) {
    g_last = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* m = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (!m) {
    g_last = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  // Device memory starts undefined: a pattern, so reading it unwritten shows
  // (skipped for big buffers, whose pages need not become resident).
  if (rounded <= (size_t{64} << 20)) std::memset(m, 0xCD, rounded);
  g_device[m] = bytes;
  g_used += bytes;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lk(g_state_mu);
  const auto it = g_device.find(p);
  if (it == g_device.end()) {
    g_last = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  g_used -= it->second;
  g_device.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (stream && stream->capturing) {
    stream->capturing->launches.push_back([=] { std::memmove(dst, src, bytes); });
    return cudaSuccess;
  }
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new EmulatedStream;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new EmulatedEvent;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->state.at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = std::chrono::duration<float, std::milli>(stop->state.at - start->state.at).count();
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s || s->capturing) return set_error(cudaErrorInvalidValue);
  s->capturing = new EmulatedGraph;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  if (!s || !s->capturing) return set_error(cudaErrorInvalidValue);
  *graph = s->capturing;
  s->capturing = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = new EmulatedGraph(*graph);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  for (const auto& l : exec->launches) l();
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lk(g_state_mu);
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  std::lock_guard<std::mutex> lk(g_state_mu);
  return g_last;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorLaunchFailure: return "unspecified launch failure (the emulator printed why)";
    default: return "unknown error";
  }
}

// Switching fibers: the callee-saved registers and the stack pointer, no
// signal mask (ucontext's swapcontext makes a system call at every switch,
// and a kernel switches at every shuffle).
extern "C" void splitspec_emulator_switch(void** save_sp, void* load_sp);
#if defined(__x86_64__)
asm(R"(
.pushsection .text
.globl splitspec_emulator_switch
.type splitspec_emulator_switch,@function
splitspec_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size splitspec_emulator_switch, .-splitspec_emulator_switch
.popsection
)");
#else
#error "the CUDA emulator switches fibers on x86-64 only"
#endif

namespace emulator {

namespace {

constexpr size_t kStackBytes = 256 << 10;

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
};

struct Fiber {
  void* sp = nullptr;
  std::unique_ptr<char[]> stack;
  Indices idx;
  int warp = 0, lane = 0;
  bool done = false;
  Barrier* waiting = nullptr;
  uint64_t wait_generation = 0;
};

struct Warp {
  Barrier barrier;
  int active = 0, size = 0;
  uint64_t slots[32];
  uint32_t a[32][4], b[32][2];
  float c[32][4];
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Barrier barrier;
  int active = 0;
  std::vector<unsigned char> shared;
  const std::function<void()>* body = nullptr;
  Fiber* current = nullptr;
  void* scheduler_sp = nullptr;
  std::string error;
};

Block& block() {
  static Block b;
  return b;
}

std::mutex g_launch_mu;

// Back to the scheduler for good: the launch has failed.
[[noreturn]] void fail(const std::string& why) {
  Block& b = block();
  if (b.error.empty()) b.error = why;
  splitspec_emulator_switch(&b.current->sp, b.scheduler_sp);
  std::abort();  // never resumed
}

void entry() {
  Block& b = block();
  (*b.body)();
  Fiber* f = b.current;
  f->done = true;
  --b.warps[f->warp].active;
  --b.active;
  splitspec_emulator_switch(&f->sp, b.scheduler_sp);
  std::abort();  // a finished fiber is never resumed
}

void arrive(Barrier& bar, int expected) {
  Block& b = block();
  Fiber* f = b.current;
  if (++bar.arrived >= expected) {
    bar.arrived = 0;
    ++bar.generation;
    return;
  }
  f->waiting = &bar;
  f->wait_generation = bar.generation;
  splitspec_emulator_switch(&f->sp, b.scheduler_sp);
}

Warp& my_warp() {
  Block& b = block();
  Warp& w = b.warps[b.current->warp];
  if (w.active < w.size)
    fail("a warp-wide call (shuffle, __syncwarp, mma) after " + std::to_string(w.size - w.active) +
         " lane(s) of the warp returned");
  return w;
}

// Runs every fiber of the block until all are done; false on a failure.
bool schedule(Block& b) {
  while (true) {
    bool ran = false, left = false;
    for (Fiber& f : b.fibers) {
      if (f.done) continue;
      left = true;
      if (f.waiting && f.waiting->generation == f.wait_generation) continue;
      f.waiting = nullptr;
      b.current = &f;
      splitspec_emulator_switch(&b.scheduler_sp, f.sp);
      ran = true;
      if (!b.error.empty()) return false;
    }
    if (!left) return true;
    if (ran) continue;
    // Everyone left waits: a block barrier whose others have returned is met.
    if (b.barrier.arrived > 0 && b.barrier.arrived >= b.active) {
      b.barrier.arrived = 0;
      ++b.barrier.generation;
      continue;
    }
    b.error = "deadlock: threads wait at barriers or shuffles that others of their block or warp never reach";
    return false;
  }
}

}  // namespace

const Indices& indices() { return block().current->idx; }
void* dynamic_shared() { return block().shared.data(); }
int lane_id() { return block().current->lane; }

void sync_warp() {
  Warp& w = my_warp();
  arrive(w.barrier, w.active);
}

void sync_block() {
  Block& b = block();
  arrive(b.barrier, b.active);
}

uint64_t exchange(uint64_t value, int src) {
  Warp& w = my_warp();
  const int lane = block().current->lane;
  w.slots[lane] = value;
  arrive(w.barrier, w.active);
  const uint64_t out = w.slots[src & 31];
  arrive(w.barrier, w.active);
  return out;
}

void mma_16816(bool bf16, float* c, const uint4& a, const uint2& b) {
  Warp& w = my_warp();
  const int lane = block().current->lane;
  w.a[lane][0] = a.x, w.a[lane][1] = a.y, w.a[lane][2] = a.z, w.a[lane][3] = a.w;
  w.b[lane][0] = b.x, w.b[lane][1] = b.y;
  for (int i = 0; i < 4; ++i) w.c[lane][i] = c[i];
  arrive(w.barrier, w.active);
  auto value = [bf16](uint32_t reg, int half) {
    const auto bits = static_cast<uint16_t>(reg >> (16 * half));
    return bf16 ? splitspec::blocks::bf16_to_float(bits) : splitspec::blocks::half_to_float(bits);
  };
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = splitspec::blocks::c_row(lane, i), n = splitspec::blocks::c_n(lane, i);
    float acc = w.c[lane][i];
    for (int k = 0; k < 16; ++k) {
      int la, ia;
      splitspec::blocks::a_position(row, k, &la, &ia);
      const int lb = 4 * n + (k % 8) / 2, ib = (k & 1) + 2 * (k / 8);
      acc = std::fma(value(w.a[la][ia / 2], ia % 2), value(w.b[lb][ib / 2], ib % 2), acc);
    }
    out[i] = acc;
  }
  arrive(w.barrier, w.active);
  for (int i = 0; i < 4; ++i) c[i] = out[i];
}

void mma_s8(int k, int* c, const uint32_t* a, const uint32_t* b) {
  Warp& w = my_warp();
  const int lane = block().current->lane;
  // The integer layouts of the PTX ISA: A's word r is row g + 8 (r % 2),
  // positions 4t + 16 (r / 2); B's word r positions 4t + 16r, column g.
  for (int r = 0; r < (k == 32 ? 4 : 2); ++r) w.a[lane][r] = a[r];
  for (int r = 0; r < (k == 32 ? 2 : 1); ++r) w.b[lane][r] = b[r];
  arrive(w.barrier, w.active);
  auto byte = [](uint32_t word, int i) { return static_cast<int>(static_cast<int8_t>((word >> (8 * i)) & 0xff)); };
  int out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = splitspec::blocks::c_row(lane, i), n = splitspec::blocks::c_n(lane, i);
    int acc = c[i];
    for (int kk = 0; kk < k; ++kk) {
      const int la = 4 * (row % 8) + (kk % 16) / 4, ra = (row / 8) + 2 * (kk / 16);
      const int lb = 4 * n + (kk % 16) / 4, rb = kk / 16;
      acc += byte(w.a[la][ra], kk % 4) * byte(w.b[lb][rb], kk % 4);
    }
    out[i] = acc;
  }
  arrive(w.barrier, w.active);
  for (int i = 0; i < 4; ++i) c[i] = out[i];
}

void run_launch(dim3 grid, dim3 threads, size_t shared, const std::function<void()>& body);

void launch(dim3 grid, dim3 threads, size_t shared, cudaStream_t stream, const std::function<void()>& body) {
  if (stream && stream->capturing) {
    stream->capturing->launches.push_back([=] { run_launch(grid, threads, shared, body); });
    return;
  }
  run_launch(grid, threads, shared, body);
}

void run_launch(dim3 grid, dim3 threads, size_t shared, const std::function<void()>& body) {
  std::lock_guard<std::mutex> lk(g_launch_mu);
  Block& b = block();
  const int count = static_cast<int>(threads.x * threads.y * threads.z);
  if (count <= 0 || count > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    std::fprintf(stderr, "cuda emulator: an invalid launch (%u x %u x %u blocks of %d threads)\n", grid.x, grid.y,
                 grid.z, count);
    set_error(cudaErrorInvalidValue);
    return;
  }
  if (static_cast<int>(b.fibers.size()) < count) {
    b.fibers.resize(static_cast<size_t>(count));
    for (Fiber& f : b.fibers)
      if (!f.stack) f.stack = std::make_unique<char[]>(kStackBytes);
  }
  b.body = &body;
  b.error.clear();
  const int warps = (count + 31) / 32;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        b.shared.assign(shared, 0xCD);
        b.warps.assign(static_cast<size_t>(warps), Warp{});
        for (int wi = 0; wi < warps; ++wi) b.warps[wi].active = b.warps[wi].size = std::min(32, count - 32 * wi);
        b.barrier = Barrier{};
        b.active = count;
        for (int t = 0; t < count; ++t) {
          Fiber& f = b.fibers[t];
          f.idx.thread = dim3(t % threads.x, (t / threads.x) % threads.y, t / (threads.x * threads.y));
          f.idx.block = dim3(bx, by, bz);
          f.idx.block_dim = threads;
          f.idx.grid_dim = grid;
          f.warp = t / 32;
          f.lane = t % 32;
          f.done = false;
          f.waiting = nullptr;
          // A fresh stack that "returns" into entry(), with an aligned frame
          // under it and six zeroed registers above.
          auto* sp = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(f.stack.get()) + kStackBytes) & ~uintptr_t{15});
          *--sp = 0;
          *--sp = reinterpret_cast<uint64_t>(&entry);
          for (int r = 0; r < 6; ++r) *--sp = 0;
          f.sp = sp;
        }
        // Only this block's fibers run.
        for (size_t i = static_cast<size_t>(count); i < b.fibers.size(); ++i) b.fibers[i].done = true;
        if (!schedule(b)) {
          std::fprintf(stderr, "cuda emulator: block (%u, %u, %u): %s\n", bx, by, bz, b.error.c_str());
          set_error(cudaErrorLaunchFailure);
          return;
        }
      }
}

}  // namespace emulator
