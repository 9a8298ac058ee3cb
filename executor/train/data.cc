// Byte-level file tokens and the synthetic induction stream.
#include "executor/train/data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "model/errors.h"

namespace shardtune::exec {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {  // splitmix64 of a combination, for per-sequence seeds
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

TokenSource::TokenSource(const DataOptions& o) : options_(o) {
  SHARDTUNE_CHECK(o.seq_len >= 1 && o.vocab_size >= 2) << "data options";
  if (o.path.empty()) {
    description_ = "synthetic (seed " + std::to_string(o.seed) + ")";
    return;
  }
  std::ifstream in(o.path, std::ios::binary);
  if (!in) {
    throw InputError("--data: cannot read \"" + o.path + "\": " + std::strerror(errno));
  }
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError("--data: cannot read \"" + o.path + "\": read error");
  if (static_cast<int64_t>(bytes_.size()) < o.seq_len + 1) {
    throw InputError("--data: \"" + o.path + "\" holds " + std::to_string(bytes_.size()) +
                     " bytes, expected at least seq_len + 1 = " + std::to_string(o.seq_len + 1) +
                     " (hint: a shorter --seq-len)");
  }
  if (o.vocab_size < 256) {
    throw InputError("--data: byte-level tokens need a vocabulary of at least 256, the model has " +
                     std::to_string(o.vocab_size));
  }
  description_ = o.path + " (" + std::to_string(bytes_.size()) + " bytes)";
}

void TokenSource::Sequence(int64_t index, int64_t* out) const {
  int64_t S = options_.seq_len;
  if (!bytes_.empty()) {
    int64_t windows = static_cast<int64_t>(bytes_.size()) - S;  // >= 1
    int64_t start = (index * S) % windows;
    for (int64_t t = 0; t <= S; ++t) out[t] = bytes_[static_cast<size_t>(start + t)];
    return;
  }
  std::mt19937_64 rng(Mix(options_.seed, static_cast<uint64_t>(index)));
  int64_t symbols = std::min<int64_t>(options_.vocab_size, 256);
  std::uniform_int_distribution<int64_t> len(3, 16), tok(0, symbols - 1);
  std::vector<int64_t> motif(static_cast<size_t>(len(rng)));
  for (auto& m : motif) m = tok(rng);
  for (int64_t t = 0; t <= S; ++t) out[t] = motif[static_cast<size_t>(t) % motif.size()];
}

}  // namespace shardtune::exec
