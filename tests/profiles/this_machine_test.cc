// This machine's memory as cpu:N and run's pre-flight read it: /proc/meminfo's figures, the
// cgroup's limit and usage (v2 and v1 files), and cpu:N built from them (SHARDTUNE_TEST_MEMINFO
// stands for /proc/meminfo, so the expectations are the fake file's, not this machine's).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "profiles/cluster.h"
#include "profiles/this_machine.h"

namespace shardtune::profiles {
namespace {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "shardtune_machine_XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class FakeMeminfo {
 public:
  explicit FakeMeminfo(const std::string& path) { ::setenv("SHARDTUNE_TEST_MEMINFO", path.c_str(), 1); }
  ~FakeMeminfo() { ::unsetenv("SHARDTUNE_TEST_MEMINFO"); }
};

TEST(ThisMachineTest, MeminfoFiguresAreKibTimes1024) {
  MeminfoFigures f = ParseMeminfo(
      "MemTotal:       24558576 kB\nMemFree:        20000000 kB\nMemAvailable:   23000000 kB\n"
      "Buffers:            1234 kB\n");
  EXPECT_EQ(f.total_bytes, int64_t{24558576} * 1024);
  EXPECT_EQ(f.available_bytes, int64_t{23000000} * 1024);
  EXPECT_EQ(ParseMeminfo("garbage\n").total_bytes, 0);
}

TEST(ThisMachineTest, CgroupV2AndV1LimitsAndTheirNoLimitForms) {
  ScratchDir v2;
  v2.Write("memory.max", "17179869184\n");
  v2.Write("memory.current", "1073741824\n");
  int64_t limit = -1, usage = -1;
  ReadCgroupMemory(v2.path(), &limit, &usage);
  EXPECT_EQ(limit, int64_t{16} << 30);
  EXPECT_EQ(usage, int64_t{1} << 30);
  v2.Write("memory.max", "max\n");
  ReadCgroupMemory(v2.path(), &limit, &usage);
  EXPECT_EQ(limit, 0);  // "max": no limit

  ScratchDir v1;
  v1.Write("memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  v1.Write("memory.usage_in_bytes", "4096\n");
  ReadCgroupMemory(v1.path(), &limit, &usage);
  EXPECT_EQ(limit, 0);
  v1.Write("memory.limit_in_bytes", "8589934592\n");
  ReadCgroupMemory(v1.path(), &limit, &usage);
  EXPECT_EQ(limit, int64_t{8} << 30);
  EXPECT_EQ(usage, 4096);

  ScratchDir none;
  ReadCgroupMemory(none.path(), &limit, &usage);
  EXPECT_EQ(limit, 0);
  EXPECT_EQ(usage, 0);
}

TEST(ThisMachineTest, CpuRanksShareThisMachinesMemory) {
  ScratchDir d;
  FakeMeminfo fake(d.Write("meminfo", "MemTotal: 8388608 kB\nMemAvailable: 6291456 kB\n"));
  MachineMemory m = ReadThisMachine();
  ASSERT_TRUE(m.read);
  EXPECT_EQ(m.total.count(), int64_t{8} << 30);
  EXPECT_EQ(m.available.count(), int64_t{6} << 30);
  EXPECT_GE(m.cpu_cores, 1);
  const ClusterSpec c = ParseClusterShorthand("cpu:4");
  EXPECT_EQ(c.host_memory_per_node.count(), int64_t{8} << 30);
  EXPECT_EQ(c.gpu.usable_memory.count(), (int64_t{8} << 30) / 4);
  EXPECT_EQ(c.cpu_cores_per_node, m.cpu_cores);
  EXPECT_THAT(c.machine, ::testing::StartsWith("this machine: 8.0 GiB RAM (MemTotal), "));
}

TEST(ThisMachineTest, UnreadableMeminfoFallsBackToTheNamedAssumption) {
  FakeMeminfo fake("/nonexistent/meminfo");
  EXPECT_FALSE(ReadThisMachine().read);
  const ClusterSpec c = ParseClusterShorthand("cpu:2");
  EXPECT_EQ(c.host_memory_per_node.count(), int64_t{32} << 30);
  EXPECT_THAT(c.machine, ::testing::HasSubstr("unreadable"));
}

}  // namespace
}  // namespace shardtune::profiles
