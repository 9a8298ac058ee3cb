// Checkpoint files: blob encoding, atomic writes, manifests and their verification.
#include "executor/checkpoint.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "executor/errors.h"

namespace shardtune::exec {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[] = "SHTCKPT1";
constexpr const char* kManifestSchema = "shardtune.checkpoint";

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetU64(const std::string& in, size_t* pos, const std::string& where) {
  if (*pos + 8 > in.size()) throw BackendError(where + ": truncated");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[*pos + static_cast<size_t>(i)]))
         << (8 * i);
  *pos += 8;
  return v;
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " \"" + path + "\": " + std::strerror(errno);
}

void FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw BackendError(Errno("checkpoint: cannot open", path));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw BackendError(Errno("checkpoint: fsync failed for", path));
}

std::string Hex(uint64_t v) {
  std::ostringstream o;
  o << std::hex << v;
  return o.str();
}

}  // namespace

FileDigest DigestOf(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64 (Fowler, Noll, Vo)
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return {static_cast<int64_t>(bytes.size()), h};
}

std::string EncodeBlobs(const std::vector<Blob>& blobs) {
  std::string out(kMagic, 8);
  PutU64(&out, blobs.size());
  for (const Blob& b : blobs) {
    PutU64(&out, b.name.size());
    out += b.name;
    PutU64(&out, b.bytes.size());
    out += b.bytes;
  }
  return out;
}

std::vector<Blob> DecodeBlobs(const std::string& in, const std::string& where) {
  if (in.size() < 8 || in.compare(0, 8, kMagic, 8) != 0)
    throw BackendError(where + ": not a shardtune checkpoint file");
  size_t pos = 8;
  uint64_t n = GetU64(in, &pos, where);
  std::vector<Blob> blobs;
  for (uint64_t i = 0; i < n; ++i) {
    Blob b;
    uint64_t len = GetU64(in, &pos, where);
    if (pos + len > in.size()) throw BackendError(where + ": truncated");
    b.name = in.substr(pos, len);
    pos += len;
    len = GetU64(in, &pos, where);
    if (pos + len > in.size()) throw BackendError(where + ": truncated");
    b.bytes = in.substr(pos, len);
    pos += len;
    blobs.push_back(std::move(b));
  }
  if (pos != in.size()) throw BackendError(where + ": trailing bytes");
  return blobs;
}

FileDigest WriteFileAtomically(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw BackendError(Errno("checkpoint: cannot create", tmp));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      ::close(fd);
      throw BackendError(Errno("checkpoint: write failed for", tmp));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw BackendError(Errno("checkpoint: fsync failed for", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw BackendError(Errno("checkpoint: cannot rename to", path));
  FsyncPath(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
  return DigestOf(bytes);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BackendError(Errno("checkpoint: cannot read", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string CheckpointDirName(int64_t step) {
  std::string digits = std::to_string(step);
  return "step_" + std::string(digits.size() < 8 ? 8 - digits.size() : 0, '0') + digits;
}

void WriteManifest(const std::string& dir, const CheckpointManifest& m) {
  nlohmann::ordered_json j;
  j["schema"] = kManifestSchema;
  j["schema_version"] = 1;
  j["step"] = m.step;
  j["world_size"] = m.world_size;
  j["shard_group_size"] = m.shard_group_size;
  j["model"] = m.model;
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& [name, d] : m.files) {
    j["files"].push_back(
        {{"name", name}, {"size_bytes", d.size_bytes}, {"fnv1a64", Hex(d.fnv1a64)}});
  }
  WriteFileAtomically((fs::path(dir) / "manifest.json").string(), j.dump(2) + "\n");
}

std::string VerifyCheckpoint(const std::string& dir, CheckpointManifest* m) {
  std::string text;
  try {
    text = ReadWholeFile((fs::path(dir) / "manifest.json").string());
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("schema") != kManifestSchema || j.at("schema_version") != 1) {
      return "manifest.json: expected schema shardtune.checkpoint version 1";
    }
    m->step = j.at("step").get<int64_t>();
    m->world_size = j.at("world_size").get<int>();
    m->shard_group_size = j.at("shard_group_size").get<int>();
    m->model = j.at("model").get<std::string>();
    m->files.clear();
    for (const auto& f : j.at("files")) {
      FileDigest d{f.at("size_bytes").get<int64_t>(),
                   std::stoull(f.at("fnv1a64").get<std::string>(), nullptr, 16)};
      m->files.emplace_back(f.at("name").get<std::string>(), d);
    }
  } catch (const std::exception& e) {
    return std::string("manifest.json: ") + e.what();
  }
  for (const auto& [name, want] : m->files) {
    std::string bytes;
    try {
      bytes = ReadWholeFile((fs::path(dir) / name).string());
    } catch (const BackendError&) {
      return name + ": missing";
    }
    FileDigest got = DigestOf(bytes);
    if (got.size_bytes != want.size_bytes) {
      return name + ": " + std::to_string(got.size_bytes) + " bytes, manifest says " +
             std::to_string(want.size_bytes);
    }
    if (got.fnv1a64 != want.fnv1a64) return name + ": checksum mismatch";
  }
  return "";
}

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step_", 0) != 0) continue;
    std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    out.emplace_back(std::stoll(digits), e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

void CommitDirectory(const std::string& tmp, const std::string& final_dir) {
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    std::string old = final_dir + ".old";
    RemoveTree(old);
    fs::rename(final_dir, old, ec);
    if (ec)
      throw BackendError("checkpoint: cannot move aside \"" + final_dir + "\": " + ec.message());
    RemoveTree(old);
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    throw BackendError(Errno("checkpoint: cannot rename to", final_dir));
  }
  FsyncPath(fs::path(final_dir).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

namespace {
int RemoveEntry(const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }
}  // namespace

void RemoveTree(const std::string& path) {
  // FTW_DEPTH: children before their directory; FTW_PHYS: do not follow symbolic links.
  ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace shardtune::exec
