// A main for the libFuzzer targets in the ordinary (GCC) build, so the test
// suite builds them and runs each for a few seconds: every seed, then
// random mutations of them (bit flips, byte changes, cuts, repeats,
// insertions, splices) from a fixed seed, until the time is up. It is not
// coverage-guided (scripts/fuzz.sh runs the targets under libFuzzer, ASan
// and UBSan); a target's own checks abort on a broken invariant, and an
// escaping exception ends the program, so either fails the test.
//   fuzz_smoke_<target> SECONDS SEED_DIR...
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

using Bytes = std::vector<uint8_t>;

void mutate(Bytes& b, const std::vector<Bytes>& seeds, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static const uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, '{', '}', '"', ':', ',', '[', ']', '0', '9', '-'};
  const int steps = 1 + static_cast<int>(rng() % 4);
  for (int s = 0; s < steps; ++s) {
    switch (rng() % 7) {
      case 0:
        if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!b.empty()) b[pick(b.size())] = kInteresting[pick(sizeof kInteresting)];
        break;
      case 2:
        if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(rng());
        break;
      case 3: {  // cut a range
        if (b.empty()) break;
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(b.size() - at, 64));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 4: {  // repeat a range
        if (b.empty() || b.size() > (1u << 20)) break;
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(b.size() - at, 64));
        const Bytes piece(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)), piece.begin(), piece.end());
        break;
      }
      case 5: {  // insert random bytes
        const size_t n = 1 + pick(8);
        const size_t at = pick(b.size() + 1);
        for (size_t i = 0; i < n; ++i) b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng()));
        break;
      }
      case 6: {  // splice: this input's head, another seed's tail
        const Bytes& other = seeds[pick(seeds.size())];
        if (other.empty()) break;
        b.resize(pick(b.size() + 1));
        const size_t from = pick(other.size());
        b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SECONDS SEED_DIR...\n", argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<Bytes> seeds;
  for (int i = 2; i < argc; ++i) {
    if (!std::filesystem::is_directory(argv[i])) continue;
    for (const auto& e : std::filesystem::directory_iterator(argv[i])) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  if (seeds.empty()) seeds.emplace_back();
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t runs = 0;
  for (const Bytes& s : seeds) {
    LLVMFuzzerTestOneInput(s.data(), s.size());
    runs += 1;
  }
  std::mt19937_64 rng(0x5eed);
  while (std::chrono::steady_clock::now() < until) {
    Bytes b = seeds[rng() % seeds.size()];
    mutate(b, seeds, rng);
    LLVMFuzzerTestOneInput(b.data(), b.size());
    runs += 1;
  }
  std::printf("%s: %lld runs from %zu seeds in %.0f s, no finding\n", argv[0], static_cast<long long>(runs),
              seeds.size(), seconds);
  return 0;
}
