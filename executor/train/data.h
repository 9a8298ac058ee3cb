// Training data: byte-level tokens of a text file (token = byte value, so vocab >= 256) or a
// seeded synthetic stream. Sequence i of the run is a pure function of (seed or file, i), so
// every rank, every world size and every resumed run reads the same global batch for a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::exec {

struct DataOptions {
  std::string path;  // text file; empty: synthetic
  uint64_t seed = 0;
  int64_t seq_len = 0;  // S
  int64_t vocab_size = 0;
};

class TokenSource {
 public:
  // Reads the file (whole, into memory). Throws InputError "--data: cannot read \"f\": reason"
  // or when the file holds fewer than seq_len + 1 bytes or vocab_size < 256.
  explicit TokenSource(const DataOptions& options);
  // Writes the S + 1 tokens of global sequence `index` (inputs are [0, S), labels [1, S]).
  // File: the window starting at byte (index * S) mod (size - S). Synthetic: a random motif of
  // 3 to 16 tokens repeated (an induction task a small model learns within tens of steps).
  void Sequence(int64_t index, int64_t* out) const;
  // "synthetic (seed 0)" or "file.txt (12345 bytes)".
  const std::string& description() const { return description_; }

 private:
  DataOptions options_;
  std::vector<unsigned char> bytes_;
  std::string description_;
};

}  // namespace shardtune::exec
