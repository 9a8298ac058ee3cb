// Sharded checkpoints: OUT/checkpoints/step_NNNNNNNN/ holds one file per rank (rankNNNNN.bin:
// named byte blobs) and manifest.json (step, world, shard group, each file's size and FNV-1a 64
// checksum). Every file is written atomically (temporary name, fsync, rename, fsync of the
// folder); the folder is written as step_N.tmp and renamed when the manifest is in, so a folder
// without ".tmp" whose files match the manifest is complete. Plain C++ (no Torch).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace shardtune::exec {

struct Blob {
  std::string name;
  std::string bytes;
};

struct FileDigest {
  int64_t size_bytes = 0;
  uint64_t fnv1a64 = 0;
};

struct CheckpointManifest {
  int64_t step = 0;
  int world_size = 1;
  int shard_group_size = 1;
  std::string model;
  std::vector<std::pair<std::string, FileDigest>> files;  // file name -> digest
};

// FNV-1a 64 (Fowler, Noll, Vo) over a byte stream fed in pieces.
class Fnv1a64 {
 public:
  void Update(const void* data, size_t n);
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

FileDigest DigestOf(const std::string& bytes);
// The digest of a file, read in 8 MiB pieces (nothing else held). Throws BackendError.
FileDigest DigestOfFile(const std::string& path);
// Serializes blobs: "SHTCKPT1", count, then (name length, name, size, bytes) each, little endian.
std::string EncodeBlobs(const std::vector<Blob>& blobs);
// Parses EncodeBlobs' output. Throws BackendError naming `where` when it is malformed.
std::vector<Blob> DecodeBlobs(const std::string& bytes, const std::string& where);

// One blob to stream into a file: `size_bytes` bytes that `write` hands to `emit` in order, in
// one or more pieces. A CPU tensor passes its own memory; a CUDA tensor is copied to the host
// one tensor at a time: no whole copy of the state is ever made (issue #50: staging every shard
// as a string, then the encoded file as another, doubled a rank's RSS while it saved).
using BlobEmit = std::function<void(const void* data, size_t n)>;
struct BlobSource {
  std::string name;
  int64_t size_bytes = 0;
  std::function<void(const BlobEmit& emit)> write;
};
BlobSource BlobOfBytes(std::string name, std::string bytes);  // small ones (metadata, RNG state)

// Streams `blobs` in EncodeBlobs' format to path.tmp, fsyncs it, renames it to `path` and fsyncs
// the folder; the digest is computed on the way. A blob whose `write` emits another number of
// bytes than its size_bytes is a BackendError. On any failure path.tmp is removed (its space
// freed) and BackendError names it with strerror ("No space left on device").
FileDigest WriteBlobsAtomically(const std::string& path, const std::vector<BlobSource>& blobs);

// A blob of a file: where its bytes start and how many there are.
struct BlobEntry {
  std::string name;
  int64_t offset = 0;
  int64_t size_bytes = 0;
};

// A checkpoint file opened for reading blobs in place: the table of names, offsets and sizes is
// read by seeking past each blob's bytes, so opening reads a few hundred bytes however large the
// file is, and each blob is read straight into its destination.
class BlobFile {
 public:
  // Throws BackendError naming `path` when it cannot be opened or its table is malformed
  // (bad magic, a name or size running past the end, trailing bytes).
  explicit BlobFile(const std::string& path);
  ~BlobFile();
  BlobFile(const BlobFile&) = delete;
  BlobFile& operator=(const BlobFile&) = delete;

  const std::vector<BlobEntry>& entries() const { return entries_; }
  const std::string& path() const { return path_; }
  // The entry named `name`, or nullptr.
  const BlobEntry* Find(const std::string& name) const;
  // Reads exactly e.size_bytes bytes into dst. Throws BackendError.
  void ReadInto(const BlobEntry& e, void* dst) const;
  std::string Read(const BlobEntry& e) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<BlobEntry> entries_;
};

// Writes `bytes` to path.tmp, fsyncs it, renames it to `path` and fsyncs the folder (the same
// mechanism as WriteBlobsAtomically: a failed write removes path.tmp). Throws BackendError with
// the path and strerror.
FileDigest WriteFileAtomically(const std::string& path, const std::string& bytes);
// Reads a whole file. Throws BackendError.
std::string ReadWholeFile(const std::string& path);

std::string CheckpointDirName(int64_t step);  // "step_00000012"
void WriteManifest(const std::string& dir, const CheckpointManifest& manifest);
// Reads dir/manifest.json into *manifest: empty, or the problem ("manifest.json: ...").
std::string ReadManifest(const std::string& dir, CheckpointManifest* manifest);
// ReadManifest, then every file exists with the manifest's size (a stat each; no payload read):
// empty, or the first problem. What rank 0 checks before it picks a checkpoint; each rank then
// checks its own file's checksum (VerifyRankFile), all at once.
std::string CheckManifestAndSizes(const std::string& dir, CheckpointManifest* manifest);
// `file` of `dir` has the manifest's size and checksum: empty, or the problem
// ("rank00001.bin: checksum mismatch").
std::string VerifyRankFile(const std::string& dir, const CheckpointManifest& manifest,
                           const std::string& file);
// Empty when `dir` is complete (manifest parses; every file exists with the manifest's size and
// checksum), else the first problem, e.g. "rank00001.bin: 812 bytes, manifest says 4096".
// Fills *manifest when it parses.
std::string VerifyCheckpoint(const std::string& dir, CheckpointManifest* manifest);
// Folders step_N (not .tmp) under `root`, newest step first.
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& root);
// Partial checkpoints under `root`: folders step_N.tmp (a save that did not finish: a rank killed,
// a full disk) and step_N.old (a replaced checkpoint whose removal did not finish), by path.
std::vector<std::string> ListPartialCheckpoints(const std::string& root);
// Renames `tmp` to `final_dir` (an existing `final_dir` is removed first) and fsyncs the parent.
void CommitDirectory(const std::string& tmp, const std::string& final_dir);

// Removes `path` and everything under it (rm -rf; a missing path is fine), by nftw(3) rather
// than std::filesystem::remove_all: a Python wheel's libtorch.so exports its own
// std::filesystem symbols, and its remove_all crashed a binary that resolved to it (H100
// machine, torch 2.11).
void RemoveTree(const std::string& path);

}  // namespace shardtune::exec
