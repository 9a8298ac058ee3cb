// Chrome trace JSON and atomic file writes.
#include "simulator/trace_json.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "model/errors.h"

namespace shardtune::sim {

namespace {

void AddPhaseMarks(const SimReport& r, const JobPhases& phases, nlohmann::ordered_json* events) {
  constexpr int kTid = kNumStreams;  // the track after the streams
  events->push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", kTid},
                     {"args", {{"name", "job phases"}}}});
  const auto& ops = r.program.ops;
  std::array<int64_t, 2> begin{{-1, -1}}, end{{0, 0}};
  int64_t last = 0;
  for (size_t i = 0; i < ops.size() && i < r.schedule.start_ns.size(); ++i) {
    last = std::max(last, r.schedule.end_ns[i]);
    if (ops[i].kind == OpKind::kStartup || ops[i].step < 0 || ops[i].step > 1) continue;
    auto s = static_cast<size_t>(ops[i].step);
    if (begin[s] < 0 || r.schedule.start_ns[i] < begin[s]) begin[s] = r.schedule.start_ns[i];
    end[s] = std::max(end[s], r.schedule.end_ns[i]);
  }
  for (const auto& ph : phases.phases) {
    nlohmann::ordered_json args = {{"allocated_peak_bytes", ph.allocated_peak.count()},
                                   {"required_bytes", ph.required.count()}, {"moment", ph.moment},
                                   {"fits", ph.fits}, {"host_bytes_per_node", ph.host_total.count()}};
    nlohmann::ordered_json e = {{"name", ToString(ph.phase)}, {"cat", "phase"}, {"pid", 0}, {"tid", kTid}};
    if (ph.phase == JobPhase::kStep0 || ph.phase == JobPhase::kSteady) {
      // An async span ("b" ... "e"), so complete ("X") events stay one per scheduled op.
      size_t s = ph.phase == JobPhase::kStep0 ? 0 : 1;
      e["ph"] = "b";
      e["id"] = static_cast<int>(s);
      e["ts"] = static_cast<double>(std::max<int64_t>(0, begin[s])) / 1e3;
      nlohmann::ordered_json close = {{"name", ToString(ph.phase)}, {"cat", "phase"}, {"ph", "e"},
                                      {"id", static_cast<int>(s)}, {"pid", 0}, {"tid", kTid},
                                      {"ts", static_cast<double>(end[s]) / 1e3}};
      e["args"] = args;
      events->push_back(e);
      events->push_back(close);
      continue;
    }
    e["ph"] = "i";  // not scheduled in time: an instant mark
    e["s"] = "t";
    e["ts"] = ph.phase == JobPhase::kLoad ? 0.0 : static_cast<double>(last) / 1e3;
    e["args"] = args;
    events->push_back(e);
  }
}

}  // namespace

nlohmann::ordered_json ChromeTrace(const SimReport& r, const std::string& process_name,
                                   const JobPhases* phases) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", process_name}}}});
  for (int s = 0; s < kNumStreams; ++s) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"name", ToString(static_cast<Stream>(s))}}}});
  }
  const auto& ops = r.program.ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    double ts = static_cast<double>(r.schedule.start_ns[i]) / 1e3;
    double dur = static_cast<double>(r.schedule.end_ns[i] - r.schedule.start_ns[i]) / 1e3;
    nlohmann::ordered_json args = {{"step", ops[i].step}, {"micro_batch", ops[i].micro}};
    if (ops[i].comm_bytes > 0) args["bytes"] = ops[i].comm_bytes;
    // What the host issues for the op (the host model: kernels and FSDP2 hook calls), to set
    // beside a PyTorch profiler trace's launches.
    if (ops[i].host_kernels > 0) args["host_kernels"] = ops[i].host_kernels;
    if (ops[i].host_hooks > 0) args["host_hooks"] = ops[i].host_hooks;
    // How the collective was priced, to hold against nccl-tests output and NCCL_DEBUG=INFO lines.
    if (i < r.op_collective.size() && r.op_collective[i] >= 0) {
      const CollectiveTerms& t = r.collectives[static_cast<size_t>(r.op_collective[i])].terms;
      args["bus_bandwidth_GBps"] = t.bus_bandwidth.count() / 1e9;
      args["latency_us"] = t.latency.count() * 1e6;
      if (t.nccl) {
        args["algorithm"] = profiles::ToString(t.nccl->algo);
        args["protocol"] = profiles::ToString(t.nccl->proto);
        args["channels"] = t.nccl->channels;
        if (t.nccl->by_tuner) args["chosen_by"] = "tuner plugin";
      } else {
        args["algorithm"] = "ring (topology graph)";
      }
    }
    events.push_back({{"name", r.program.OpName(i)}, {"cat", ToString(ops[i].kind)}, {"ph", "X"},
                      {"ts", ts}, {"dur", dur}, {"pid", 0}, {"tid", static_cast<int>(ops[i].stream)},
                      {"args", args}});
    if (i < r.allocated_after.size()) {
      events.push_back({{"name", "allocated bytes"}, {"ph", "C"}, {"ts", ts}, {"pid", 0},
                        {"args", {{"allocated", r.allocated_after[i]}}}});
    }
  }
  if (phases) AddPhaseMarks(r, *phases, &events);
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw InputError(path + ": cannot write (" + std::strerror(errno) + ")");
  size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw InputError(path + ": write failed (" + std::strerror(err) + ")");
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw InputError(path + ": cannot finish writing (" + std::strerror(err) + ")");
  }
}

}  // namespace shardtune::sim
