// Checkpoint files: blob encoding, atomic writes, manifests and their verification.
#include "executor/train/checkpoint.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
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

void Fnv1a64::Update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = h_;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  h_ = h;
}

FileDigest DigestOf(const std::string& bytes) {
  Fnv1a64 h;
  h.Update(bytes.data(), bytes.size());
  return {static_cast<int64_t>(bytes.size()), h.value()};
}

namespace {

// Reads exactly n bytes at `offset` (pread, EINTR retried); false at end of file.
bool ReadAt(int fd, void* dst, size_t n, int64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset) + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw BackendError(Errno("checkpoint: read failed for", path));
    if (r == 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

constexpr size_t kIoPieceBytes = size_t{8} << 20;  // 8 MiB: reads of DigestOfFile, write batching

// Buffers small pieces (headers, names) and writes large ones straight from the caller's memory.
class StreamWriter {
 public:
  StreamWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void Put(const void* data, size_t n) {
    digest_.Update(data, n);
    written_ += static_cast<int64_t>(n);
    if (n >= kIoPieceBytes) {
      Flush();
      WriteAll(data, n);
      return;
    }
    if (buffer_.size() + n > kIoPieceBytes) Flush();
    buffer_.append(static_cast<const char*>(data), n);
  }
  void PutU64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
    Put(b, 8);
  }
  void Flush() {
    WriteAll(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  int64_t written() const { return written_; }
  uint64_t digest() const { return digest_.value(); }

 private:
  void WriteAll(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    size_t done = 0;
    while (done < n) {
      ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw BackendError(Errno("checkpoint: write failed for", path_));
      done += static_cast<size_t>(w);
    }
  }
  int fd_;
  std::string path_;
  std::string buffer_;
  Fnv1a64 digest_;
  int64_t written_ = 0;
};

// Every atomic write: `body` writes path.tmp through a StreamWriter, which is fsynced, renamed to
// `path`, and the folder fsynced; on any failure path.tmp is removed (its space freed) and the
// error names it. Returns the size and digest of what `body` wrote.
FileDigest WriteAtomically(const std::string& path, const std::function<void(StreamWriter&)>& body) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw BackendError(Errno("checkpoint: cannot create", tmp));
  StreamWriter w(fd, tmp);
  try {
    body(w);
    w.Flush();
    if (::fsync(fd) != 0) throw BackendError(Errno("checkpoint: fsync failed for", tmp));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw BackendError(Errno("checkpoint: close failed for", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw BackendError(Errno("checkpoint: cannot rename to", path));
  FsyncPath(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
  return {w.written(), w.digest()};
}

}  // namespace

FileDigest DigestOfFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw BackendError(Errno("checkpoint: cannot read", path));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::string buffer(kIoPieceBytes, '\0');
  Fnv1a64 h;
  int64_t size = 0;
  for (;;) {
    ssize_t r = ::read(fd, buffer.data(), buffer.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ::close(fd);
      throw BackendError(Errno("checkpoint: read failed for", path));
    }
    if (r == 0) break;
    h.Update(buffer.data(), static_cast<size_t>(r));
    size += r;
  }
  ::close(fd);
  return {size, h.value()};
}

BlobSource BlobOfBytes(std::string name, std::string bytes) {
  BlobSource b;
  b.name = std::move(name);
  b.size_bytes = static_cast<int64_t>(bytes.size());
  auto held = std::make_shared<std::string>(std::move(bytes));
  b.write = [held](const BlobEmit& emit) { emit(held->data(), held->size()); };
  return b;
}

FileDigest WriteBlobsAtomically(const std::string& path, const std::vector<BlobSource>& blobs) {
  return WriteAtomically(path, [&](StreamWriter& w) {
    w.Put(kMagic, 8);
    w.PutU64(blobs.size());
    for (const BlobSource& b : blobs) {
      w.PutU64(b.name.size());
      w.Put(b.name.data(), b.name.size());
      w.PutU64(static_cast<uint64_t>(b.size_bytes));
      const int64_t before = w.written();
      b.write([&w](const void* data, size_t n) { w.Put(data, n); });
      if (w.written() - before != b.size_bytes) {
        throw BackendError("checkpoint: blob \"" + b.name + "\" of " + path + ".tmp wrote " +
                           std::to_string(w.written() - before) + " bytes, expected " +
                           std::to_string(b.size_bytes));
      }
    }
  });
}

BlobFile::BlobFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw BackendError(Errno("checkpoint: cannot read", path));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw BackendError(Errno("checkpoint: cannot stat", path));
    const int64_t size = static_cast<int64_t>(st.st_size);
    char magic[8];
    if (!ReadAt(fd_, magic, 8, 0, path) || std::memcmp(magic, kMagic, 8) != 0)
      throw BackendError(path + ": not a shardtune checkpoint file");
    int64_t pos = 8;
    auto u64 = [&]() {
      unsigned char b[8];
      if (!ReadAt(fd_, b, 8, pos, path)) throw BackendError(path + ": truncated");
      pos += 8;
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
      return v;
    };
    const uint64_t n = u64();
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t len = u64();
      if (len > static_cast<uint64_t>(size - pos)) throw BackendError(path + ": truncated");
      BlobEntry e;
      e.name.resize(len);
      if (!ReadAt(fd_, e.name.data(), len, pos, path)) throw BackendError(path + ": truncated");
      pos += static_cast<int64_t>(len);
      const uint64_t bytes = u64();
      if (bytes > static_cast<uint64_t>(size - pos)) throw BackendError(path + ": truncated");
      e.offset = pos;
      e.size_bytes = static_cast<int64_t>(bytes);
      pos += e.size_bytes;
      entries_.push_back(std::move(e));
    }
    if (pos != size) throw BackendError(path + ": trailing bytes");
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

BlobFile::~BlobFile() {
  if (fd_ >= 0) ::close(fd_);
}

const BlobEntry* BlobFile::Find(const std::string& name) const {
  for (const BlobEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void BlobFile::ReadInto(const BlobEntry& e, void* dst) const {
  if (!ReadAt(fd_, dst, static_cast<size_t>(e.size_bytes), e.offset, path_))
    throw BackendError(path_ + ": truncated in \"" + e.name + "\"");
}

std::string BlobFile::Read(const BlobEntry& e) const {
  std::string out(static_cast<size_t>(e.size_bytes), '\0');
  ReadInto(e, out.data());
  return out;
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
  return WriteAtomically(path, [&](StreamWriter& w) { w.Put(bytes.data(), bytes.size()); });
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

std::string ReadManifest(const std::string& dir, CheckpointManifest* m) {
  try {
    std::string text = ReadWholeFile((fs::path(dir) / "manifest.json").string());
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
  return "";
}

namespace {

std::string SizeProblem(const std::string& dir, const std::string& name, const FileDigest& want) {
  std::error_code ec;
  const auto size = fs::file_size(fs::path(dir) / name, ec);
  if (ec) return name + ": missing";
  if (static_cast<int64_t>(size) != want.size_bytes) {
    return name + ": " + std::to_string(size) + " bytes, manifest says " +
           std::to_string(want.size_bytes);
  }
  return "";
}

}  // namespace

std::string CheckManifestAndSizes(const std::string& dir, CheckpointManifest* m) {
  if (std::string p = ReadManifest(dir, m); !p.empty()) return p;
  for (const auto& [name, want] : m->files) {
    if (std::string p = SizeProblem(dir, name, want); !p.empty()) return p;
  }
  return "";
}

std::string VerifyRankFile(const std::string& dir, const CheckpointManifest& m,
                           const std::string& file) {
  for (const auto& [name, want] : m.files) {
    if (name != file) continue;
    if (std::string p = SizeProblem(dir, name, want); !p.empty()) return p;
    FileDigest got;
    try {
      got = DigestOfFile((fs::path(dir) / name).string());
    } catch (const BackendError&) {
      return name + ": missing";
    }
    // The size was checked just above (SizeProblem); a file that changed since fails the digest.
    if (got.size_bytes != want.size_bytes || got.fnv1a64 != want.fnv1a64) return name + ": checksum mismatch";
    return "";
  }
  return file + ": not in manifest.json";
}

std::string VerifyCheckpoint(const std::string& dir, CheckpointManifest* m) {
  if (std::string p = CheckManifestAndSizes(dir, m); !p.empty()) return p;
  for (const auto& f : m->files) {
    if (std::string p = VerifyRankFile(dir, *m, f.first); !p.empty()) return p;
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

std::vector<std::string> ListPartialCheckpoints(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step_", 0) != 0) continue;
    const size_t dot = name.find('.');
    if (dot == std::string::npos) continue;
    const std::string digits = name.substr(5, dot - 5), suffix = name.substr(dot);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (suffix == ".tmp" || suffix == ".old") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
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
