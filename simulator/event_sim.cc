// Event-driven scheduling with per-stream FIFOs and fluid bandwidth sharing per link.
#include "simulator/event_sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "model/errors.h"

namespace shardtune::sim {
namespace {

enum class Ev : uint8_t { kFinish, kLatencyDone, kTransferDone, kIssued };

// Three 8-byte words (the op, its version and the kind packed in one): an event built from
// narrower fields and copied into the heap stalls store forwarding, which perf showed as the
// simulation's hottest line (#18).
struct Event {
  int64_t time;
  uint64_t seq;
  uint64_t tag;  // version << 32 | op << 2 | kind
  static uint64_t Tag(Ev kind, int32_t op, uint32_t version) {
    return static_cast<uint64_t>(version) << 32 | static_cast<uint64_t>(static_cast<uint32_t>(op)) << 2 |
           static_cast<uint64_t>(kind);
  }
  Ev kind() const { return static_cast<Ev>(tag & 3); }
  int32_t op() const { return static_cast<int32_t>((tag & 0xffffffffu) >> 2); }
  uint32_t version() const { return static_cast<uint32_t>(tag >> 32); }
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

constexpr int kMaxLinks = 6;  // simulate.cc Links: shard, replicate, PCIe, cp, (unused), ep

class Sim {
 public:
  Sim(const StepProgram& p, const std::vector<OpCost>& c, size_t first_op) : p_(p), c_(c) {
    size_t n = p.ops.size();
    out_.start_ns.assign(n, -1);
    out_.end_ns.assign(n, -1);
    remaining_.assign(n, 0.0);
    version_.assign(n, 0);
    issued_.assign(n, 0);
    first_op = std::min(first_op, n);
    std::fill(out_.start_ns.begin(), out_.start_ns.begin() + static_cast<std::ptrdiff_t>(first_op), 0);
    std::fill(out_.end_ns.begin(), out_.end_ns.begin() + static_cast<std::ptrdiff_t>(first_op), 0);
    std::fill(issued_.begin(), issued_.begin() + static_cast<std::ptrdiff_t>(first_op), 1);
    host_next_ = finished_prefix_ = first_op;
    for (size_t i = first_op; i < n; ++i) queues_[static_cast<size_t>(p.ops[i].stream)].push_back(static_cast<int32_t>(i));
  }

  Schedule Run() {
    IssueNext();
    for (int s = 0; s < kNumStreams; ++s) TryStart(s);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Event>());
      const Event e = heap_.back();
      heap_.pop_back();
      const int32_t op = e.op();
      if (e.version() != version_[static_cast<size_t>(op)]) continue;  // superseded by a rate change
      Advance(e.time);
      const Ev kind = e.kind();
      if (kind == Ev::kIssued) {
        issued_[static_cast<size_t>(op)] = 1;
        host_busy_ = false;
        ++host_next_;
        IssueNext();
        for (int s = 0; s < kNumStreams; ++s) TryStart(s);
      } else if (kind == Ev::kLatencyDone) {
        JoinLink(op);
      } else {
        if (kind == Ev::kTransferDone) LeaveLink(op);
        Finish(op);
      }
    }
    for (size_t i = 0; i < p_.ops.size(); ++i) {
      SHARDTUNE_CHECK(out_.end_ns[i] >= 0) << "op never ran: " << p_.OpName(i);
    }
    return out_;
  }

 private:
  void Push(int64_t t, Ev kind, int32_t op) {
    Event& e = heap_.emplace_back();
    e.time = t;
    e.seq = seq_++;
    e.tag = Event::Tag(kind, op, version_[static_cast<size_t>(op)]);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Event>());
  }

  // The host issues the next op in program order (a host_sync op once all earlier ops finished).
  // Ops with no host time are issued at once, without an event.
  void IssueNext() {
    while (!host_busy_ && host_next_ < p_.ops.size()) {
      size_t i = host_next_;
      if (p_.ops[i].host_sync) {
        while (finished_prefix_ < i && out_.end_ns[finished_prefix_] >= 0) ++finished_prefix_;
        if (finished_prefix_ < i) return;  // retried when an op finishes
      }
      if (c_[i].host_ns <= 0) {
        issued_[i] = 1;
        ++host_next_;
        continue;
      }
      host_busy_ = true;
      Push(now_ + c_[i].host_ns, Ev::kIssued, static_cast<int32_t>(i));
    }
  }

  bool Ready(int32_t op) const {
    if (issued_[static_cast<size_t>(op)] == 0) return false;
    for (int32_t d : p_.ops[static_cast<size_t>(op)].deps) {
      if (d >= 0 && out_.end_ns[static_cast<size_t>(d)] < 0) return false;
    }
    return true;
  }

  void TryStart(int s) {
    auto& q = queues_[static_cast<size_t>(s)];
    size_t& h = head_[static_cast<size_t>(s)];
    if (busy_[static_cast<size_t>(s)] || h >= q.size()) return;
    int32_t op = q[h];
    if (!Ready(op)) return;
    busy_[static_cast<size_t>(s)] = true;
    auto i = static_cast<size_t>(op);
    out_.start_ns[i] = now_;
    const OpCost& c = c_[i];
    if (c.transfer_ns > 0) Push(now_ + c.latency_ns, Ev::kLatencyDone, op);
    else Push(now_ + c.fixed_ns + c.latency_ns, Ev::kFinish, op);
  }

  // Moves the clock, progressing every active transfer at its share of its link.
  void Advance(int64_t t) {
    double dt = static_cast<double>(t - now_);
    if (dt > 0) {
      for (int l = 0; l < kMaxLinks; ++l) {
        auto& act = active_[static_cast<size_t>(l)];
        if (act.empty()) continue;
        double share = dt / static_cast<double>(act.size());
        for (int32_t op : act) remaining_[static_cast<size_t>(op)] -= share;
      }
    }
    now_ = t;
  }

  void Reschedule(int link) {
    auto& act = active_[static_cast<size_t>(link)];
    double k = static_cast<double>(act.size());
    for (int32_t op : act) {
      auto i = static_cast<size_t>(op);
      ++version_[i];
      double left = std::max(0.0, remaining_[i]);
      Push(now_ + RoundNonNegative(left * k), Ev::kTransferDone, op);
    }
  }

  int LinkOf(int32_t op) const {
    return std::clamp<int>(c_[static_cast<size_t>(op)].link, 0, kMaxLinks - 1);
  }

  void JoinLink(int32_t op) {
    remaining_[static_cast<size_t>(op)] = static_cast<double>(c_[static_cast<size_t>(op)].transfer_ns);
    active_[static_cast<size_t>(LinkOf(op))].push_back(op);
    Reschedule(LinkOf(op));
  }

  void LeaveLink(int32_t op) {
    auto& act = active_[static_cast<size_t>(LinkOf(op))];
    act.erase(std::find(act.begin(), act.end(), op));
    Reschedule(LinkOf(op));
  }

  void Finish(int32_t op) {
    auto i = static_cast<size_t>(op);
    out_.end_ns[i] = now_;
    out_.makespan_ns = std::max(out_.makespan_ns, now_);
    auto s = static_cast<size_t>(p_.ops[i].stream);
    busy_[s] = false;
    ++head_[s];
    IssueNext();
    for (int t = 0; t < kNumStreams; ++t) TryStart(t);
  }

  const StepProgram& p_;
  const std::vector<OpCost>& c_;
  Schedule out_;
  std::array<std::vector<int32_t>, kNumStreams> queues_;
  std::array<size_t, kNumStreams> head_{};
  std::array<bool, kNumStreams> busy_{};
  std::vector<uint8_t> issued_;  // the host has issued the op (bytes: read on every TryStart)
  size_t host_next_ = 0;      // next op the host issues (program order)
  bool host_busy_ = false;
  size_t finished_prefix_ = 0;  // ops [0, finished_prefix_) have all finished
  std::array<std::vector<int32_t>, kMaxLinks> active_;
  std::vector<double> remaining_;
  std::vector<uint32_t> version_;
  std::vector<Event> heap_;  // a min-heap on (time, seq)
  uint64_t seq_ = 0;
  int64_t now_ = 0;
};

}  // namespace

Schedule RunEventSimulation(const StepProgram& program, const std::vector<OpCost>& costs,
                            size_t first_op) {
  SHARDTUNE_CHECK(costs.size() == program.ops.size()) << costs.size() << " costs for " << program.ops.size();
  return Sim(program, costs, first_op).Run();
}

}  // namespace shardtune::sim
