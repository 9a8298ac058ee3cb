// estimate --memory-snapshot (issue #19): the pickle loads with Python's own pickle module, has
// every key torch/cuda/_memory_viz.py reads (segments: stream, address, total_size,
// allocated_size, blocks with state, size, requested_size, frames of filename, line, name; device
// traces: action, addr, size, stream, frames; oom: device_free), and its trace, replayed in
// Python, rebuilds the final segments and the allocator replay's peaks.
#include "simulator/memory_snapshot.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "model/errors.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/allocator_sim.h"
#include "simulator/pickle_writer.h"

namespace shardtune::sim {
namespace {

using ::testing::HasSubstr;

std::string Temp(const std::string& name) {
  return ::testing::TempDir() + "snapshot_" + std::to_string(::getpid()) + "_" + name;
}

// Runs python3 with `script` (a file) and `arg`; returns stdout, or "exit N" on failure.
std::string Python(const std::string& script_text, const std::string& arg) {
  std::string script = Temp("check.py");
  std::ofstream(script) << script_text;
  std::string cmd = "python3 " + script + " " + arg + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  std::remove(script.c_str());
  if (status != 0) return "exit " + std::to_string(status) + ": " + out;
  return out;
}

TEST(PickleWriterTest, PythonLoadsEveryKindOfValue) {
  PickleWriter w;
  w.BeginDict();
  w.Str("ints");
  w.BeginList();
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{255}, int64_t{-2147483648LL},
                    int64_t{2147483647LL}, int64_t{2147483648LL}, int64_t{-2147483649LL},
                    int64_t{1} << 40, int64_t{128} << 32, INT64_MAX, INT64_MIN}) {
    w.Int(v);
  }
  w.EndList();
  w.Str("text");
  w.Str("step 1 \xc2\xb7 block 7");  // UTF-8 middle dot
  w.Str("misc");
  w.BeginTuple();
  w.Bool(true);
  w.Bool(false);
  w.None();
  w.Float(0.25);
  w.BeginList();
  w.EndList();
  w.EndTuple();
  w.Str("shared");
  w.BeginList();
  w.Str("x");
  w.EndList();
  uint32_t m = w.Memoize();
  w.Str("again");
  w.Recall(m);
  w.EndDict();
  std::string path = Temp("values.pickle");
  std::ofstream(path, std::ios::binary) << w.Finish();
  std::string out = Python(R"(import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
print(d['ints'])
print(d['text'] == 'step 1 \u00b7 block 7', d['misc'], d['shared'] is d['again'], sorted(d))
)", path);
  std::remove(path.c_str());
  // Python's own reprs of the values written.
  EXPECT_EQ(out,
            "[0, -1, 255, -2147483648, 2147483647, 2147483648, -2147483649, 1099511627776, "
            "549755813888, 9223372036854775807, -9223372036854775808]\n"
            "True (True, False, None, 0.25, []) True ['again', 'ints', 'misc', 'shared', 'text']\n");
}

// Loads the snapshot, checks the keys _memory_viz.py reads, replays the trace and prints
// "events=N peak_allocated=A peak_reserved=R final_ok=1 oom=K".
constexpr const char* kCheckSnapshot = R"(import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
assert set(d) >= {'segments', 'device_traces'}, sorted(d)
def frames_ok(fs):
    for f in fs:
        assert isinstance(f['filename'], str) and isinstance(f['line'], int) and isinstance(f['name'], str)
for s in d['segments']:
    for k in ('device', 'address', 'total_size', 'allocated_size', 'active_size', 'requested_size', 'stream', 'segment_type', 'blocks'):
        assert k in s, k
    assert sum(b['size'] for b in s['blocks']) == s['total_size']
    addr = s['address']
    for b in s['blocks']:
        assert b['state'] in ('active_allocated', 'inactive'), b['state']
        assert b['address'] == addr
        addr += b['size']
        frames_ok(b['frames'])
        if b['state'] == 'active_allocated':
            assert 0 < b['requested_size'] <= b['size']
    assert s['allocated_size'] == sum(b['size'] for b in s['blocks'] if b['state'] == 'active_allocated')
assert len(d['device_traces']) == 1
live, segs = {}, {}
allocated = reserved = peak_a = peak_r = ooms = 0
for e in d['device_traces'][0]:
    for k in ('action', 'addr', 'size', 'stream', 'frames'):
        assert k in e, k
    frames_ok(e['frames'])
    a = e['action']
    if a == 'segment_alloc':
        assert e['addr'] not in segs
        segs[e['addr']] = e['size']; reserved += e['size']; peak_r = max(peak_r, reserved)
    elif a == 'segment_free':
        assert segs.pop(e['addr']) == e['size']; reserved -= e['size']
    elif a == 'alloc':
        assert e['addr'] not in live
        assert any(s <= e['addr'] and e['addr'] + e['size'] <= s + n for s, n in segs.items())
        live[e['addr']] = e['size']; allocated += e['size']; peak_a = max(peak_a, allocated)
    elif a == 'free_requested':
        assert live[e['addr']] == e['size']
    elif a == 'free_completed':
        assert live.pop(e['addr']) == e['size']; allocated -= e['size']
    elif a == 'oom':
        assert e['device_free'] >= 0; ooms += 1
    else:
        raise AssertionError(a)
final = {b['address']: b['size'] for s in d['segments'] for b in s['blocks'] if b['state'] == 'active_allocated'}
final_segs = {s['address']: s['total_size'] for s in d['segments']}
print(f"events={len(d['device_traces'][0])} peak_allocated={peak_a} peak_reserved={peak_r} final_ok={int(final == live and final_segs == segs)} oom={ooms}")
)";

struct Case {
  MemoryEstimate est;
  std::string check;  // kCheckSnapshot's output on the snapshot of `est`
};

// Estimates `plan`, writes its snapshot, checks it in Python and removes it.
Case Estimate(const std::string& model, const std::string& cluster, const model::Plan& plan) {
  auto spec = model::FindModelPreset(model);
  auto c = profiles::ParseClusterShorthand(cluster);
  Case k;
  k.est = EstimateMemoryWithProgram(spec, c, plan, MemoryOptions{}, false);
  const std::string path = Temp(model + ".pickle");
  WriteMemorySnapshot(path, "--memory-snapshot", k.est.program, k.est.report, "test");
  k.check = Python(kCheckSnapshot, path);
  std::remove(path.c_str());
  return k;
}

TEST(MemorySnapshotTest, TraceRebuildsTheFinalSegmentsAndTheReplaysPeaks) {
  model::Plan plan;
  plan.seq_len = 2048;
  plan.grad_accum = 2;
  Case k = Estimate("llama3.2-1b", "8xH100", plan);
  ASSERT_TRUE(k.est.report.fits);
  // The same program through the allocator model's own counters.
  AllocatorReplay replay = ReplayAllocator(k.est.program, 0);
  std::ostringstream want;
  want << "peak_allocated=" << replay.allocated_peak_bytes
       << " peak_reserved=" << replay.reserved_peak_bytes << " final_ok=1 oom=0\n";
  EXPECT_THAT(k.check, HasSubstr(want.str())) << k.check;
  // Every tensor event leaves at least one trace event (alloc, or free_requested + completed).
  size_t events = 0;
  ASSERT_EQ(std::sscanf(k.check.c_str(), "events=%zu", &events), 1) << k.check;
  EXPECT_GE(events, k.est.program.tensors.size());
}

TEST(MemorySnapshotTest, APlanThatRunsOutEndsWithAnOomEvent) {
  model::Plan plan;
  plan.seq_len = 8192;
  plan.micro_batch = 4;
  Case k = Estimate("llama3-8b", "8xH100", plan);
  ASSERT_FALSE(k.est.report.fits);
  EXPECT_THAT(k.check, HasSubstr("final_ok=1 oom=1")) << k.check;
}

TEST(MemorySnapshotTest, BadNamesAndUnwritablePathsAreOneLineErrorsWithNoFileLeft) {
  model::Plan plan;
  plan.seq_len = 256;
  auto spec = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("2xH100");
  MemoryEstimate est = EstimateMemoryWithProgram(spec, c, plan, MemoryOptions{}, false);
  EXPECT_THAT(
      [&] { CheckSnapshotName("memory.json", "--memory-snapshot"); },
      ::testing::ThrowsMessage<InputError>(HasSubstr(
          "--memory-snapshot: expected a file name ending in .pickle, got \"memory.json\"")));
  const std::string dir = "/nonexistent-shardtune-dir";
  EXPECT_THAT(
      [&] {
        WriteMemorySnapshot(dir + "/m.pickle", "--memory-snapshot", est.program, est.report, "t");
      },
      ::testing::ThrowsMessage<InputError>(HasSubstr(dir + "/m.pickle: cannot write")));
  EXPECT_NE(::access((dir + "/m.pickle").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace shardtune::sim
