// Packed micro-batches as verl forms them under a token budget, and the sequence lengths of a
// run's data. Torch-free: `shardtune run`'s trainer (executor/train/trainer.cc) cuts each rank's
// sequences of a step with these, and the tests hold them to verl's own rule.
//
// verl (volcengine/verl@b178a3c, verl/utils/seqlen_balancing.py rearrange_micro_batches): a
// rank's mini-batch of sequences is split into
//   k = min(sequences, ceil(sum of lengths / max_token_len))
// micro-batches, k made equal over the data-parallel ranks (all_reduce MAX), and the sequences
// are spread over the k micro-batches by the Karmarkar-Karp largest differencing method on each
// sequence's workload 24576 s + s^2 (calculate_workload), not on its tokens: a micro-batch is
// balanced, not capped, and can hold more than max_token_len tokens (5 sequences of 1,000 under a
// budget of 2,500: k = 2, micro-batches of 3,000 and 2,000 tokens). The micro-batches are then ordered by workload, largest first, and
// interleaved so that the small ones sit at both ends (use_dynamic_bsz_balance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::model {

// The lengths of a run's sequences (tokens each, the label shift included in none).
//  max_len 0: every sequence is the plan's longest (the worst case the estimate judges).
//  uniform [min_len, max_len]: sequence i's length is a pure function of (seed, i), each length
//  equally likely, so every rank, world size and resumed run sees the same lengths.
struct SequenceLengths {
  int64_t min_len = 0;
  int64_t max_len = 0;
  bool uniform() const { return max_len > 0; }
  // "uniform:MIN-MAX" (MIN >= 2; both <= longest when longest > 0), or "" (every sequence the
  // longest). Throws InputError naming `flag`, what it expects and what it got.
  static SequenceLengths Parse(const std::string& text, const std::string& flag,
                               int64_t longest);
  // "uniform:64-256" or "every sequence 256 tokens".
  std::string Describe(int64_t longest) const;
  // The length of global sequence `index`: `longest` when not uniform.
  int64_t Length(uint64_t seed, int64_t index, int64_t longest) const;
  // The mean length (tokens): (min + max) / 2 when uniform, else `longest`.
  double Mean(int64_t longest) const;
};

// verl's calculate_workload: 24576 s + s^2 (a 7B model's 12 H^2 s + 2 H s^2 up to a factor).
int64_t VerlWorkload(int64_t seq_len);

// verl's karmarkar_karp(seqlen_list=values, k_partitions=k, equal_size=False), heap ties and
// stable sorts as Python breaks them: k lists of indices into `values` (a list may be empty when
// there are fewer values than k). REQUIRES: k >= 1.
std::vector<std::vector<int>> KarmarkarKarp(const std::vector<int64_t>& values, int k);

// The rows (micro-batches) a rank's `sequences` take under a budget of `row` tokens when every
// one is `longest` tokens long: min(sequences, ceil(sequences x longest / row)), the most
// rearrange_micro_batches makes of them (the plan's grad_accum for a packed plan).
int64_t PackedRowsAtLongest(int64_t sequences, int64_t longest, int64_t row);

// The largest row rearrange_micro_batches forms from `sequences` of `longest` tokens each under a
// budget of `row` tokens: Karmarkar-Karp spreads equal sequences evenly over the
// k = PackedRowsAtLongest rows, so the largest holds ceil(sequences / k) of them. Above the
// budget when the budget is not a whole number of sequences (32 of 1,536 under 16,384: 3 rows of
// up to 11 sequences, 16,896 tokens). Sequences of mixed lengths can make a larger row still:
// the rows are balanced on VerlWorkload, not on tokens.
int64_t LargestPackedRowAtLongest(int64_t sequences, int64_t longest, int64_t row);

// rearrange_micro_batches' count for one rank: min(sequences, ceil(tokens / budget)).
int PackedMicroBatchCount(const std::vector<int64_t>& lengths, int64_t budget);

// rearrange_micro_batches for one rank: `count` micro-batches (the maximum of
// PackedMicroBatchCount over the data-parallel ranks; REQUIRES 1 <= count <= lengths.size()) as
// lists of indices into `lengths`, in verl's order (KarmarkarKarp on VerlWorkload, sorted by
// workload largest first with ties to the larger first index, then [::2][::-1] + [1::2]).
std::vector<std::vector<int>> PackedMicroBatches(const std::vector<int64_t>& lengths, int count);

// The largest row rearrange_micro_batches forms in `steps` steps of sequences whose lengths follow
// `lengths` (seed `seed`), numbered as shardtune run numbers them (step s's sequences are s x
// dp x per_rank onwards, rank r's the r-th contiguous per_rank of them), under `budget` tokens:
// each step's row count is the maximum over the ranks, and the rows of up to 8 ranks are formed.
// How far above the budget verl's balanced rows go at these lengths. REQUIRES: per_rank, dp,
// steps >= 1; budget >= every length.
int64_t LargestPackedRowOverSteps(const SequenceLengths& lengths, uint64_t seed, int64_t longest,
                                  int64_t budget, int64_t per_rank, int dp, int steps);

}  // namespace shardtune::model
