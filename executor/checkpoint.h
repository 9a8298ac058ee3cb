// Sharded checkpoints: OUT/checkpoints/step_NNNNNNNN/ holds one file per rank (rankNNNNN.bin:
// named byte blobs) and manifest.json (step, world, shard group, each file's size and FNV-1a 64
// checksum). Every file is written atomically (temporary name, fsync, rename, fsync of the
// folder); the folder is written as step_N.tmp and renamed when the manifest is in, so a folder
// without ".tmp" whose files match the manifest is complete. Plain C++ (no Torch).
#pragma once

#include <cstdint>
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

FileDigest DigestOf(const std::string& bytes);
// Serializes blobs: "SHTCKPT1", count, then (name length, name, size, bytes) each, little endian.
std::string EncodeBlobs(const std::vector<Blob>& blobs);
// Parses EncodeBlobs' output. Throws BackendError naming `where` when it is malformed.
std::vector<Blob> DecodeBlobs(const std::string& bytes, const std::string& where);

// Writes `bytes` to path.tmp, fsyncs it, renames it to `path` and fsyncs the folder.
// Throws BackendError with the path and strerror.
FileDigest WriteFileAtomically(const std::string& path, const std::string& bytes);
// Reads a whole file. Throws BackendError.
std::string ReadWholeFile(const std::string& path);

std::string CheckpointDirName(int64_t step);  // "step_00000012"
void WriteManifest(const std::string& dir, const CheckpointManifest& manifest);
// Empty when `dir` is complete (manifest parses; every file exists with the manifest's size and
// checksum), else the first problem, e.g. "rank00001.bin: 812 bytes, manifest says 4096".
// Fills *manifest when it parses.
std::string VerifyCheckpoint(const std::string& dir, CheckpointManifest* manifest);
// Folders step_N (not .tmp) under `root`, newest step first.
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& root);
// Renames `tmp` to `final_dir` (an existing `final_dir` is removed first) and fsyncs the parent.
void CommitDirectory(const std::string& tmp, const std::string& final_dir);

// Removes `path` and everything under it (rm -rf; a missing path is fine), by nftw(3) rather
// than std::filesystem::remove_all: a Python wheel's libtorch.so exports its own
// std::filesystem symbols, and its remove_all crashed a binary that resolved to it (H100
// machine, torch 2.11).
void RemoveTree(const std::string& path);

}  // namespace shardtune::exec
