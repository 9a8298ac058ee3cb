// verl's token-budget micro-batches (seqlen_balancing.py) and a run's sequence lengths.
#include "model/packing.h"

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <utility>

#include "model/errors.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

uint64_t SplitMix64(uint64_t z) {  // Steele, Lea & Flood 2014, "Fast splittable PRNGs"
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  const std::optional<int64_t> v = ParseInt64(s);
  if (!v) return false;
  *out = *v;
  return true;
}

// karmarkar_karp's Set: its items (index, value) in insertion order and their sum.
struct KkSet {
  int64_t sum = 0;
  std::vector<std::pair<int, int64_t>> items;
};

// Set.__lt__: by sum, then by the number of items, then the item lists compared as Python
// compares lists of tuples.
bool Less(const KkSet& a, const KkSet& b) {
  if (a.sum != b.sum) return a.sum < b.sum;
  if (a.items.size() != b.items.size()) return a.items.size() < b.items.size();
  return a.items < b.items;
}

struct KkState {
  std::vector<KkSet> sets;  // kept in decreasing order (sorted(reverse=True): stable)
  void Sort() {
    std::stable_sort(sets.begin(), sets.end(), [](const KkSet& a, const KkSet& b) { return Less(b, a); });
  }
  int64_t Spread() const { return sets.front().sum - sets.back().sum; }
};

// State.__lt__ (heapq pops the "smallest"): the larger spread first, then the larger first set.
bool Less(const KkState& a, const KkState& b) {
  if (a.Spread() != b.Spread()) return a.Spread() > b.Spread();
  return Less(b.sets[0], a.sets[0]);
}

// CPython's heapq (Lib/heapq.py heappush / heappop with _siftdown / _siftup), so that equal
// states leave the heap in the order verl's do.
void SiftDown(std::vector<KkState>& h, size_t start, size_t pos) {
  KkState item = std::move(h[pos]);
  while (pos > start) {
    size_t parent = (pos - 1) >> 1;
    if (Less(item, h[parent])) {
      h[pos] = std::move(h[parent]);
      pos = parent;
      continue;
    }
    break;
  }
  h[pos] = std::move(item);
}

void SiftUp(std::vector<KkState>& h, size_t pos) {
  size_t end = h.size(), start = pos, child = 2 * pos + 1;
  KkState item = std::move(h[pos]);
  while (child < end) {
    size_t right = child + 1;
    if (right < end && !Less(h[child], h[right])) child = right;
    h[pos] = std::move(h[child]);
    pos = child;
    child = 2 * pos + 1;
  }
  h[pos] = std::move(item);
  SiftDown(h, start, pos);
}

void HeapPush(std::vector<KkState>& h, KkState s) {
  h.push_back(std::move(s));
  SiftDown(h, 0, h.size() - 1);
}

KkState HeapPop(std::vector<KkState>& h) {
  KkState last = std::move(h.back());
  h.pop_back();
  if (h.empty()) return last;
  KkState top = std::move(h[0]);
  h[0] = std::move(last);
  SiftUp(h, 0);
  return top;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

SequenceLengths SequenceLengths::Parse(const std::string& text, const std::string& flag,
                                       int64_t longest) {
  SequenceLengths l;
  if (text.empty()) return l;
  const std::string prefix = "uniform:";
  size_t dash = text.find('-', prefix.size());
  int64_t lo = 0, hi = 0;
  if (text.rfind(prefix, 0) != 0 || dash == std::string::npos ||
      !ParseInt(text.substr(prefix.size(), dash - prefix.size()), &lo) ||
      !ParseInt(text.substr(dash + 1), &hi)) {
    throw InputError(flag + ": expected uniform:MIN-MAX (sequence lengths drawn evenly between "
                            "MIN and MAX tokens), got '" + text + "'");
  }
  if (lo < 2 || hi < lo) {
    throw InputError(flag + ": expected 2 <= MIN <= MAX in uniform:MIN-MAX, got '" + text + "'");
  }
  if (longest > 0 && hi > longest) {
    throw InputError(flag + ": expected MAX at most the longest sequence " + std::to_string(longest) +
                     " (--seq-len), got '" + text + "'");
  }
  l.min_len = lo;
  l.max_len = hi;
  return l;
}

std::string SequenceLengths::Describe(int64_t longest) const {
  if (!uniform()) return "every sequence " + std::to_string(longest) + " tokens";
  return "uniform:" + std::to_string(min_len) + "-" + std::to_string(max_len);
}

int64_t SequenceLengths::Length(uint64_t seed, int64_t index, int64_t longest) const {
  if (!uniform()) return longest;
  uint64_t span = static_cast<uint64_t>(max_len - min_len + 1);
  uint64_t r = SplitMix64(SplitMix64(seed ^ 0x6C656E67746873ull) + static_cast<uint64_t>(index));
  return min_len + static_cast<int64_t>(r % span);
}

double SequenceLengths::Mean(int64_t longest) const {
  return uniform() ? 0.5 * static_cast<double>(min_len + max_len) : static_cast<double>(longest);
}

int64_t VerlWorkload(int64_t s) { return 24576 * s + s * s; }

std::vector<std::vector<int>> KarmarkarKarp(const std::vector<int64_t>& values, int k) {
  SHARDTUNE_CHECK(k >= 1) << "KarmarkarKarp k " << k;
  std::vector<std::pair<int64_t, int>> sorted;
  for (size_t i = 0; i < values.size(); ++i) sorted.push_back({values[i], static_cast<int>(i)});
  std::sort(sorted.begin(), sorted.end());
  std::vector<KkState> heap;
  for (const auto& [value, index] : sorted) {
    KkState s;
    s.sets.resize(static_cast<size_t>(k));
    s.sets[0].items.push_back({index, value});
    s.sets[0].sum = value;
    s.Sort();
    HeapPush(heap, std::move(s));
  }
  if (heap.empty()) return std::vector<std::vector<int>>(static_cast<size_t>(k));
  while (heap.size() > 1) {
    KkState a = HeapPop(heap);
    KkState b = HeapPop(heap);
    for (int i = 0; i < k; ++i) {  // State.merge: a's i-th set takes b's (k-1-i)-th
      KkSet& into = a.sets[static_cast<size_t>(i)];
      for (const auto& item : b.sets[static_cast<size_t>(k - 1 - i)].items) {
        into.items.push_back(item);
        into.sum += item.second;
      }
    }
    a.Sort();
    HeapPush(heap, std::move(a));
  }
  std::vector<std::vector<int>> out;
  for (const KkSet& s : heap[0].sets) {
    std::vector<int> part;
    for (const auto& item : s.items) part.push_back(item.first);
    out.push_back(std::move(part));
  }
  return out;
}

int64_t PackedRowsAtLongest(int64_t sequences, int64_t longest, int64_t row) {
  SHARDTUNE_CHECK(row >= 1) << "row " << row;
  return std::min(sequences, CeilDiv(sequences * longest, row));
}

int64_t LargestPackedRowAtLongest(int64_t sequences, int64_t longest, int64_t row) {
  const int64_t k = std::max<int64_t>(1, PackedRowsAtLongest(sequences, longest, row));
  return CeilDiv(sequences, k) * longest;
}

int PackedMicroBatchCount(const std::vector<int64_t>& lengths, int64_t budget) {
  SHARDTUNE_CHECK(budget >= 1) << "budget " << budget;
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  return static_cast<int>(std::min<int64_t>(static_cast<int64_t>(lengths.size()), CeilDiv(total, budget)));
}

std::vector<std::vector<int>> PackedMicroBatches(const std::vector<int64_t>& lengths, int count) {
  SHARDTUNE_CHECK(count >= 1 && static_cast<size_t>(count) <= lengths.size())
      << "micro-batches " << count << " of " << lengths.size() << " sequences";
  std::vector<int64_t> work;
  for (int64_t l : lengths) work.push_back(VerlWorkload(l));
  std::vector<std::vector<int>> parts = KarmarkarKarp(work, count);
  for (auto& p : parts) std::sort(p.begin(), p.end());  // _check_and_sort_partitions
  auto key = [&](const std::vector<int>& p) {
    int64_t w = 0;
    for (int i : p) w += work[static_cast<size_t>(i)];
    return std::make_pair(w, p.empty() ? 0 : p.front());
  };
  // micro_bsz_idx.sort(key=(workload, first index), reverse=True): stable, descending.
  std::stable_sort(parts.begin(), parts.end(),
                   [&](const std::vector<int>& a, const std::vector<int>& b) { return key(b) < key(a); });
  // micro_bsz_idx[::2][::-1] + micro_bsz_idx[1::2]
  std::vector<std::vector<int>> out;
  std::vector<size_t> even;
  for (size_t i = 0; i < parts.size(); i += 2) even.push_back(i);
  for (auto it = even.rbegin(); it != even.rend(); ++it) out.push_back(parts[*it]);
  for (size_t i = 1; i < parts.size(); i += 2) out.push_back(parts[i]);
  return out;
}

int64_t LargestPackedRowOverSteps(const SequenceLengths& lengths, uint64_t seed, int64_t longest,
                                  int64_t budget, int64_t per_rank, int dp, int steps) {
  SHARDTUNE_CHECK(per_rank >= 1 && dp >= 1 && steps >= 1) << "sampled rows";
  int64_t largest = 0;
  const int sampled_ranks = std::min(dp, 8);
  std::vector<int64_t> l(static_cast<size_t>(per_rank));
  for (int s = 0; s < steps; ++s) {
    const int64_t first = static_cast<int64_t>(s) * dp * per_rank;
    auto fill = [&](int r) {
      for (int64_t i = 0; i < per_rank; ++i) {
        l[static_cast<size_t>(i)] = lengths.Length(seed, first + r * per_rank + i, longest);
      }
    };
    int count = 1;
    for (int r = 0; r < dp; ++r) {
      fill(r);
      count = std::max(count, PackedMicroBatchCount(l, budget));
    }
    for (int r = 0; r < sampled_ranks; ++r) {
      fill(r);
      for (const auto& part : PackedMicroBatches(l, count)) {
        int64_t tokens = 0;
        for (int i : part) tokens += l[static_cast<size_t>(i)];
        largest = std::max(largest, tokens);
      }
    }
  }
  return largest;
}

}  // namespace shardtune::model
