// Plain parts of the executor: checkpoint files and their verification, rank variables
// (torchrun, Slurm), and the launcher's failure handling with a stand-in program.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "executor/train/checkpoint.h"
#include "executor/errors.h"
#include "executor/train/launcher.h"
#include "executor/rank_env.h"
#include "model/errors.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// A complete checkpoint folder of two ranks at `step`: rank r's file is 64 bytes of 'a' + r, and
// the manifest lists both with their sizes and checksums.
std::string WriteTwoRankCheckpoint(const testing::TempDir& tmp, int64_t step) {
  std::string dir = tmp.Sub(CheckpointDirName(step));
  std::filesystem::create_directories(dir);
  CheckpointManifest m;
  m.step = step;
  m.world_size = 2;
  for (int r = 0; r < 2; ++r) {
    std::string name = "rank0000" + std::to_string(r) + ".bin";
    m.files.emplace_back(
        name, WriteFileAtomically(dir + "/" + name, std::string(64, static_cast<char>('a' + r))));
  }
  WriteManifest(dir, m);
  return dir;
}

TEST(ExecutorCheckpointTest, BlobsRoundTripAndTruncationIsDetected) {
  std::vector<Blob> blobs{{"meta", "{}"}, {"param/0", std::string("\0\1\2\3", 4)}};
  std::string bytes = EncodeBlobs(blobs);
  std::vector<Blob> back = DecodeBlobs(bytes, "f");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].name, "param/0");
  EXPECT_EQ(back[1].bytes, blobs[1].bytes);
  EXPECT_THAT([&] { DecodeBlobs(bytes.substr(0, bytes.size() - 1), "f"); },
              ThrowsMessage<BackendError>(HasSubstr("f: truncated")));
}

// The streamed writer produces EncodeBlobs' bytes exactly, with the digest of those bytes, and
// BlobFile reads each blob back in place. A blob emitted in pieces (a CUDA tensor staged, or a
// writer feeding a large tensor in chunks) is the same file.
TEST(ExecutorCheckpointTest, StreamedWriteIsTheEncodedFileAndReadsBackInPlace) {
  testing::TempDir tmp;
  std::string big(3 * (size_t{8} << 20) + 17, '\0');  // over the writer's 8 MiB batching
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131) % 251);
  std::vector<Blob> blobs{{"meta", "{\"step\": 3}"}, {"param/0", big}, {"empty", ""}, {"rng", "\x01\x02"}};
  std::vector<BlobSource> sources;
  for (const Blob& b : blobs) sources.push_back(BlobOfBytes(b.name, b.bytes));
  // param/0 again as three pieces
  BlobSource pieces;
  pieces.name = "param/1";
  pieces.size_bytes = static_cast<int64_t>(big.size());
  pieces.write = [&big](const BlobEmit& emit) {
    emit(big.data(), 5);
    emit(big.data() + 5, (size_t{8} << 20));
    emit(big.data() + 5 + (size_t{8} << 20), big.size() - 5 - (size_t{8} << 20));
  };
  sources.push_back(pieces);
  blobs.push_back({"param/1", big});
  const std::string path = tmp.Sub("rank00000.bin");
  FileDigest d = WriteBlobsAtomically(path, sources);
  const std::string expected = EncodeBlobs(blobs);
  EXPECT_EQ(d.size_bytes, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(d.fnv1a64, DigestOf(expected).fnv1a64);
  EXPECT_EQ(ReadWholeFile(path), expected);
  EXPECT_EQ(DigestOfFile(path).fnv1a64, d.fnv1a64);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  BlobFile f(path);
  ASSERT_EQ(f.entries().size(), blobs.size());
  for (const Blob& b : blobs) {
    const BlobEntry* e = f.Find(b.name);
    ASSERT_NE(e, nullptr) << b.name;
    EXPECT_EQ(f.Read(*e), b.bytes) << b.name;
  }
  EXPECT_EQ(f.Find("nothing"), nullptr);
  std::filesystem::resize_file(path, expected.size() - 1);
  EXPECT_THAT([&] { BlobFile g(path); }, ThrowsMessage<BackendError>(HasSubstr("truncated")));
}

// A blob that emits other than its declared size is an error, and the half-written file is
// removed (its space freed) rather than left as path.tmp.
TEST(ExecutorCheckpointTest, StreamedWriteThatFailsLeavesNoTemporaryFile) {
  testing::TempDir tmp;
  BlobSource wrong;
  wrong.name = "param/0";
  wrong.size_bytes = 10;
  wrong.write = [](const BlobEmit& emit) { emit("abc", 3); };
  const std::string path = tmp.Sub("rank00000.bin");
  EXPECT_THAT([&] { WriteBlobsAtomically(path, {BlobOfBytes("meta", "{}"), wrong}); },
              ThrowsMessage<BackendError>(HasSubstr("wrote 3 bytes, expected 10")));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THAT([&] { WriteBlobsAtomically(tmp.Sub("missing/dir/f.bin"), {}); },
              ThrowsMessage<BackendError>(HasSubstr("checkpoint: cannot create")));
}

// Rank 0 picks a checkpoint from its manifest and the files' sizes; each rank then checks its
// own file's checksum.
TEST(ExecutorCheckpointTest, ManifestAndSizesThenEachRankItsOwnChecksum) {
  testing::TempDir tmp;
  const std::string dir = WriteTwoRankCheckpoint(tmp, 5);
  CheckpointManifest got;
  EXPECT_EQ(CheckManifestAndSizes(dir, &got), "");
  WriteFileAtomically(dir + "/rank00001.bin", std::string(64, 'z'));  // same size, other bytes
  EXPECT_EQ(CheckManifestAndSizes(dir, &got), "");
  EXPECT_EQ(VerifyRankFile(dir, got, "rank00000.bin"), "");
  EXPECT_EQ(VerifyRankFile(dir, got, "rank00001.bin"), "rank00001.bin: checksum mismatch");
  EXPECT_EQ(VerifyRankFile(dir, got, "rank00002.bin"), "rank00002.bin: not in manifest.json");
  std::filesystem::resize_file(dir + "/rank00000.bin", 3);
  EXPECT_EQ(CheckManifestAndSizes(dir, &got), "rank00000.bin: 3 bytes, manifest says 64");
}

TEST(ExecutorCheckpointTest, PartialCheckpointsAreTmpAndOldFoldersOnly) {
  testing::TempDir tmp;
  const std::string root = tmp.Sub("checkpoints");
  for (const char* d : {"step_00000004", "step_00000006.tmp", "step_00000002.old", "step_x.tmp",
                        "other.tmp", "step_00000007.bak"}) {
    std::filesystem::create_directories(root + "/" + d);
  }
  std::ofstream(root + "/step_00000009.tmp") << "a file, not a folder";
  EXPECT_THAT(ListPartialCheckpoints(root),
              ::testing::ElementsAre(root + "/step_00000002.old", root + "/step_00000006.tmp"));
  EXPECT_TRUE(ListPartialCheckpoints(tmp.Sub("none")).empty());
}

TEST(ExecutorCheckpointTest, VerifyFindsMissingTruncatedAndCorruptedFiles) {
  testing::TempDir tmp;
  const std::string dir = WriteTwoRankCheckpoint(tmp, 12);
  CheckpointManifest got;
  EXPECT_EQ(VerifyCheckpoint(dir, &got), "");
  EXPECT_EQ(got.step, 12);
  EXPECT_EQ(got.files.size(), 2u);
  std::filesystem::resize_file(dir + "/rank00001.bin", 10);
  EXPECT_EQ(VerifyCheckpoint(dir, &got), "rank00001.bin: 10 bytes, manifest says 64");
  WriteFileAtomically(dir + "/rank00001.bin", std::string(64, 'z'));
  EXPECT_EQ(VerifyCheckpoint(dir, &got), "rank00001.bin: checksum mismatch");
  std::filesystem::remove(dir + "/rank00001.bin");
  EXPECT_EQ(VerifyCheckpoint(dir, &got), "rank00001.bin: missing");
  std::filesystem::remove(dir + "/manifest.json");
  EXPECT_THAT(VerifyCheckpoint(dir, &got), HasSubstr("manifest.json"));
}

TEST(ExecutorCheckpointTest, ListIgnoresTemporaryFoldersAndSortsNewestFirst) {
  testing::TempDir tmp;
  for (const char* d : {"step_00000002", "step_00000010", "step_00000012.tmp", "other"}) {
    std::filesystem::create_directories(tmp.Sub(d));
  }
  auto list = ListCheckpoints(tmp.path());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, 10);
  EXPECT_EQ(list[1].first, 2);
}

TEST(ExecutorRankEnvTest, TorchrunVariablesWinAndSlurmNeedsAJobStep) {
  RankEnv none = RankEnvFromVariables({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
  EXPECT_FALSE(none.launched) << "an salloc shell is not a rank";
  RankEnv t = RankEnvFromVariables({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}});
  EXPECT_TRUE(t.launched);
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.master_port, 1234);
  RankEnv s = RankEnvFromVariables({{"SLURM_PROCID", "3"},
                                    {"SLURM_NTASKS", "4"},
                                    {"SLURM_STEP_ID", "0"},
                                    {"SLURM_LOCALID", "1"},
                                    {"SLURM_NTASKS_PER_NODE", "2(x2)"},
                                    {"MASTER_ADDR", "node1"}});
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.local_world_size, 2);
  EXPECT_EQ(s.master_addr, "node1");
}

TEST(ExecutorRankEnvTest, MalformedVariablesAreInputErrors) {
  EXPECT_THAT(
      [] {
        RankEnvFromVariables({{"RANK", "5"}, {"WORLD_SIZE", "2"}});
      },
      ThrowsMessage<InputError>(
          HasSubstr("RANK: expected an integer in [0, WORLD_SIZE = 2), got \"5\"")));
  EXPECT_THAT(
      [] {
        RankEnvFromVariables({{"RANK", "0"}});
      },
      ThrowsMessage<InputError>(HasSubstr("WORLD_SIZE: not set")));
  EXPECT_THAT(
      [] {
        RankEnvFromVariables(
            {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}});
      },
      ThrowsMessage<InputError>(HasSubstr("MASTER_ADDR: not set")));
}

TEST(ExecutorLauncherTest, FirstFailureIsReportedAndTheOthersAreStopped) {
  LaunchOptions o;
  o.nproc = 3;
  o.exe = "/bin/sh";
  // Rank 1 fails at once; ranks 0 and 2 would sleep for a minute.
  o.argv = {"sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; exec sleep 60"};
  o.grace_s = 2;
  auto t0 = std::chrono::steady_clock::now();
  LaunchResult r = LaunchLocalRanks(o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_THAT(r.message, HasSubstr("rank 1 (pid "));
  EXPECT_THAT(r.message, HasSubstr("exited with code 7; stopped the other 2 rank(s)"));
  EXPECT_LT(s, 10.0);
}

// A port the launcher found free can be bound by another process before rank 0 listens: rank 0
// then exits kExitPortInUse and the ranks start again on a fresh port (the first two starts here
// are handed ports the test holds; rank 0's script fails while its port is the held one).
TEST(ExecutorLauncherTest, RanksStartAgainOnAFreshPortWhenRank0FindsItsPortTaken) {
  std::vector<int> picked;
  LaunchOptions o;
  o.nproc = 2;
  o.exe = "/bin/sh";
  const int held = FindFreePort();
  o.environment = {"HELD=" + std::to_string(held)};
  o.argv = {"sh", "-c", "if [ \"$RANK\" = 0 ] && [ \"$MASTER_PORT\" = \"$HELD\" ]; then exit 75; fi; exit 0"};
  o.pick_port = [&] {
    picked.push_back(picked.size() < 2 ? held : FindFreePort());
    return picked.back();
  };
  LaunchResult r = LaunchLocalRanks(o);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  ASSERT_EQ(picked.size(), 3u);
  EXPECT_EQ(r.taken_ports, (std::vector<int>{held, held}));
  // Always taken: kPortAttempts starts, then rank 0's failure is the answer.
  picked.clear();
  o.pick_port = [&] {
    picked.push_back(held);
    return held;
  };
  r = LaunchLocalRanks(o);
  EXPECT_EQ(r.exit_code, kExitPortInUse);
  EXPECT_EQ(picked.size(), static_cast<size_t>(kPortAttempts));
  EXPECT_THAT(r.message, HasSubstr("MASTER_PORT was taken before rank 0 listened on each of 3 ports tried"));
  // Another rank's 75 is the job's own failure: no second start.
  picked.clear();
  o.argv = {"sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 75; fi; exec sleep 60"};
  o.grace_s = 2;
  r = LaunchLocalRanks(o);
  EXPECT_EQ(r.exit_code, kExitPortInUse);
  EXPECT_EQ(picked.size(), 1u);
  EXPECT_TRUE(r.taken_ports.empty());
}

TEST(ExecutorLauncherTest, RanksSeeTorchrunVariables) {
  LaunchOptions o;
  o.nproc = 2;
  o.exe = "/bin/sh";
  o.argv = {
      "sh", "-c",
      "[ \"$WORLD_SIZE\" = 2 ] && [ \"$MASTER_ADDR\" = 127.0.0.1 ] && [ -n \"$MASTER_PORT\" ] && "
      "[ \"$LOCAL_RANK\" = \"$RANK\" ] && [ \"$KEEP\" = me ]"};
  o.environment = {"KEEP=me", "RANK=99"};
  EXPECT_EQ(LaunchLocalRanks(o).exit_code, 0);
}

}  // namespace
}  // namespace shardtune::exec
