// Sharded checkpoints of the trainer: each rank writes its flat shards, optimizer state and
// RNG state; rank 0 writes the manifest and commits the folder; resume picks the newest
// complete checkpoint on rank 0 and broadcasts its step.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "executor/errors.h"
#include "executor/train/trainer.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace fs = std::filesystem;
namespace {

std::string RankFile(int rank) {
  std::string d = std::to_string(rank);
  return "rank" + std::string(d.size() < 5 ? 5 - d.size() : 0, '0') + d + ".bin";
}

// A tensor streamed into the file: a contiguous CPU tensor from its own memory, anything else
// (a CUDA shard) copied to the host first, one tensor at a time.
BlobSource TensorSource(std::string name, const at::Tensor& t) {
  BlobSource b;
  b.name = std::move(name);
  b.size_bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  b.write = [t](const BlobEmit& emit) {
    at::Tensor c = t.device().is_cpu() && t.is_contiguous() ? t : t.contiguous().cpu();
    emit(c.data_ptr(), c.nbytes());
  };
  return b;
}

std::string Bytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Reads blob `e` of `f` into `t`: straight into its memory when it is a contiguous CPU tensor,
// else through one host staging tensor of its size.
void Fill(const at::Tensor& t, const BlobFile& f, const BlobEntry& e, const std::string& where) {
  if (e.size_bytes != static_cast<int64_t>(t.nbytes())) {
    throw BackendError(where + ": " + std::to_string(e.size_bytes) + " bytes, expected " +
                       std::to_string(t.nbytes()));
  }
  at::NoGradGuard no_grad;
  if (t.device().is_cpu() && t.is_contiguous()) {
    f.ReadInto(e, t.data_ptr());
    return;
  }
  at::Tensor c = at::empty(t.sizes(), t.options().device(at::kCPU));
  f.ReadInto(e, c.data_ptr());
  t.copy_(c);
}

// "" when rank 0's file of the checkpoint at `step` was written by this plan and model (the same
// units with the same shard sizes, global batch and optimizer state), else what differs.
std::string PlanMismatch(const std::string& file, int64_t step, const std::vector<FlatParam*>& units,
                         int64_t global_batch, bool has_adam_state) {
  nlohmann::json meta;
  bool has_adam = false;
  try {
    BlobFile f(file);  // reads the table and the metadata only
    for (const BlobEntry& e : f.entries()) {
      if (e.name == "meta") meta = nlohmann::json::parse(f.Read(e), nullptr, /*allow_exceptions=*/false);
      if (e.name.rfind("exp_avg/", 0) == 0) has_adam = true;
    }
  } catch (const BackendError& e) {
    return e.what();
  }
  if (!meta.is_object() || !meta.contains("units") || !meta["units"].is_array() ||
      !meta.contains("next_sequence") || !meta["next_sequence"].is_number_integer()) {
    return "its metadata is unreadable";
  }
  const nlohmann::json& saved = meta["units"];
  if (saved.size() != units.size()) {
    return std::to_string(saved.size()) + " FSDP units, this run has " +
           std::to_string(units.size());
  }
  for (size_t i = 0; i < units.size(); ++i) {
    const nlohmann::json& u = saved[i];
    if (!u.is_object() || u.value("name", "") != units[i]->name() ||
        u.value("shard_numel", int64_t{-1}) != units[i]->shard_numel()) {
      return "unit " + std::to_string(i) + " is " + u.dump() + ", this run's is " +
             units[i]->name() + " with " + std::to_string(units[i]->shard_numel()) +
             " elements per shard";
    }
    // Checkpoints written before shards recorded their dtype hold fp32 shards.
    std::string dtype = c10::toString(units[i]->shard().scalar_type());
    std::string saved_dtype = u.value("dtype", std::string("Float"));
    if (saved_dtype != dtype) {
      return "unit " + std::to_string(i) + " (" + units[i]->name() + ") holds " + saved_dtype +
             " shards, this run's are " + dtype + " (frozen_dtype)";
    }
  }
  const int64_t batch = step > 0 ? meta["next_sequence"].get<int64_t>() / step : 0;
  if (batch != global_batch) {
    return "a global batch of " + std::to_string(batch) + " sequences, this run has " +
           std::to_string(global_batch);
  }
  if (has_adam != has_adam_state) {
    return has_adam ? "AdamW state, this run's optimizer keeps none"
                    : "no AdamW state, this run's optimizer needs it";
  }
  return "";
}

}  // namespace

std::string Trainer::CheckpointRoot() const {
  return (fs::path(ctx_.options.out_dir) / "checkpoints").string();
}

std::vector<BlobSource> Trainer::StateSources(int64_t step) const {
  std::vector<FlatParam*> units = runtime_->units();
  nlohmann::ordered_json meta{{"step", step},
                              {"next_sequence", step * global_batch()},
                              {"seed", ctx_.options.seed},
                              {"optimizer_step", optimizer_->step()},
                              {"rank", ctx_.rank},
                              {"world_size", ctx_.world_size},
                              {"shard_group_size", runtime_->groups().shard->size()}};
  meta["units"] = nlohmann::ordered_json::array();
  for (FlatParam* u : units) {
    meta["units"].push_back({{"name", u->name()},
                             {"shard_numel", u->shard_numel()},
                             {"dtype", c10::toString(u->shard().scalar_type())},
                             {"trainable", u->trainable()}});
  }
  std::vector<BlobSource> blobs{BlobOfBytes("meta", meta.dump())};
  for (size_t i = 0; i < units.size(); ++i) {
    std::string n = std::to_string(i);
    blobs.push_back(TensorSource("param/" + n, units[i]->shard()));  // frozen ones too
    int o = opt_index_[i];
    if (optimizer_->keeps_state() && o >= 0) {  // frozen: no optimizer state
      blobs.push_back(TensorSource("exp_avg/" + n, optimizer_->exp_avg()[static_cast<size_t>(o)]));
      blobs.push_back(TensorSource("exp_avg_sq/" + n, optimizer_->exp_avg_sq()[static_cast<size_t>(o)]));
    }
  }
  // torchtitan's expert_bias buffers (persistent in its state dict: moe.py register_buffer).
  const at::Tensor& bias = runtime_->transformer().expert_bias();
  if (bias.defined()) blobs.push_back(TensorSource("moe/expert_bias", bias));
  blobs.push_back(BlobOfBytes("rng/torch_cpu", Bytes(at::detail::getDefaultCPUGenerator().get_state())));
  return blobs;
}

void Trainer::LoadState(const std::string& file, int64_t step) {
  BlobFile f(file);
  auto get = [&](const std::string& name) -> const BlobEntry& {
    const BlobEntry* e = f.Find(name);
    if (e == nullptr) throw BackendError(file + ": no \"" + name + "\" in the checkpoint");
    return *e;
  };
  nlohmann::json meta = nlohmann::json::parse(f.Read(get("meta")));
  std::vector<FlatParam*> units = runtime_->units();
  // The state a fresh process has not created yet (lazy AdamW), filled from the file below:
  // the resume phase holds the whole state plus one staging tensor at a time.
  optimizer_->EnsureState();
  if (meta.at("step").get<int64_t>() != step || meta.at("units").size() != units.size() ||
      meta.at("next_sequence").get<int64_t>() != step * global_batch()) {
    throw BackendError(file + ": its step, units or global batch differ from this run's");
  }
  for (size_t i = 0; i < units.size(); ++i) {
    std::string n = std::to_string(i), where = file + ": unit " + units[i]->name();
    Fill(units[i]->shard(), f, get("param/" + n), where);
    int o = opt_index_[i];
    if (optimizer_->keeps_state() && o >= 0) {
      auto k = static_cast<size_t>(o);
      Fill(optimizer_->exp_avg()[k], f, get("exp_avg/" + n), where + " exp_avg");
      Fill(optimizer_->exp_avg_sq()[k], f, get("exp_avg_sq/" + n), where + " exp_avg_sq");
    }
  }
  at::Tensor& bias = runtime_->mutable_transformer().mutable_expert_bias();
  if (bias.defined()) Fill(bias, f, get("moe/expert_bias"), file + ": moe expert_bias");
  runtime_->RefreshDeviceShards();
  optimizer_->set_step(meta.at("optimizer_step").get<int64_t>());
  const std::string rng = f.Read(get("rng/torch_cpu"));
  at::Tensor state = at::empty({static_cast<int64_t>(rng.size())}, at::kByte);
  std::memcpy(state.data_ptr(), rng.data(), rng.size());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void Trainer::SaveCheckpoint(int64_t step) {
  double t0 = MonotonicSeconds();
  Communicator& world = *ctx_.groups.world;
  std::string root = CheckpointRoot(), name = CheckpointDirName(step);
  std::string tmp = root + "/" + name + ".tmp", final_dir = root + "/" + name;
  if (ctx_.rank == 0) {
    std::error_code ec;
    RemoveTree(tmp);
    fs::create_directories(tmp, ec);
    if (ec) throw BackendError("checkpoint: cannot create \"" + tmp + "\": " + ec.message());
  }
  world.Barrier();
  optimizer_->EnsureState();  // a run whose every update was skipped so far (--on-nonfinite skip)
  FileDigest d = WriteBlobsAtomically(tmp + "/" + RankFile(ctx_.rank), StateSources(step));
  // Every rank's [size, checksum] to rank 0, which writes the manifest.
  at::Tensor mine = at::tensor({d.size_bytes, static_cast<int64_t>(d.fnv1a64)}, at::kLong);
  at::Tensor all = at::zeros({2 * world.size()}, at::kLong);
  if (world.size() > 1) {
    world.AllGather(mine, all)->Wait();
  } else {
    all.copy_(mine);
  }
  if (ctx_.rank == 0) {
    CheckpointManifest m;
    m.step = step;
    m.world_size = ctx_.world_size;
    m.shard_group_size = runtime_->groups().shard->size();
    m.model = ctx_.options.spec.name;
    for (int r = 0; r < world.size(); ++r) {
      m.files.emplace_back(RankFile(r),
                           FileDigest{all[2 * r].item<int64_t>(),
                                      static_cast<uint64_t>(all[2 * r + 1].item<int64_t>())});
    }
    WriteManifest(tmp, m);
    CommitDirectory(tmp, final_dir);
  }
  world.Barrier();
  ctx_.recorder->Add({"checkpoint", "checkpoint", Lane::kStep, t0, MonotonicSeconds() - t0});
  Message("saved checkpoint " + final_dir);
  if (ctx_.rank == 0) PruneCheckpoints(step);
}

void Trainer::RemovePartialCheckpoints() const {
  for (const std::string& dir : ListPartialCheckpoints(CheckpointRoot())) {
    RemoveTree(dir);
    std::error_code ec;
    if (fs::exists(dir, ec)) {
      Message("warning: cannot remove the partial checkpoint " + dir + " (a save that did not finish)");
    } else {
      Message("removed " + dir + ": a partial checkpoint a save that did not finish left (complete "
              "checkpoints are never touched)");
    }
  }
}

void Trainer::PruneCheckpoints(int64_t kept_step) const {
  const int keep = ctx_.options.keep_checkpoints;
  if (keep <= 0) return;
  // Newest first; the one just committed is complete, so deleting older ones loses nothing new.
  int kept = 0;
  for (const auto& [step, dir] : ListCheckpoints(CheckpointRoot())) {
    if (step == kept_step || kept < keep) {
      ++kept;
      continue;
    }
    RemoveTree(dir);
    Message("removed checkpoint " + dir + " (--keep-checkpoints " + std::to_string(keep) + ")");
  }
}

// Rank 0 picks the newest checkpoint whose manifest reads and whose files have the manifest's
// sizes (a stat each), and checks it was written for this world and plan; then every rank
// verifies its own file's checksum at once (each reads one rank's file, not rank 0 all of them:
// rank 0 alone digesting two 2.8 GiB files outlasted the other ranks' 60 s collective timeout,
// 2026-11-28, qwen2.5-0.5b on 2 CPU ranks) and a corrupted one sends rank 0 to the next older.
int64_t Trainer::Resume() {
  if (ctx_.rank == 0) RemovePartialCheckpoints();
  Communicator& world = *ctx_.groups.world;
  std::vector<std::pair<int64_t, std::string>> candidates;
  if (ctx_.rank == 0) candidates = ListCheckpoints(CheckpointRoot());
  size_t next = 0;
  for (;;) {
    int64_t chosen = 0;
    std::string reject;
    if (ctx_.rank == 0) {
      for (; next < candidates.size(); ++next) {
        const auto& [step, dir] = candidates[next];
        CheckpointManifest m;
        std::string problem = CheckManifestAndSizes(dir, &m);
        if (problem.empty() && m.step != step)
          problem = "manifest.json: step " + std::to_string(m.step);
        if (!problem.empty()) {
          Message("checkpoint " + dir + " is incomplete or corrupted (" + problem + "); skipping it");
          continue;
        }
        int shard = runtime_->groups().shard->size();
        if (m.world_size != ctx_.world_size || m.shard_group_size != shard) {
          reject = "--out: checkpoint " + dir + " was written by " + std::to_string(m.world_size) +
                   " ranks with shard group " + std::to_string(m.shard_group_size) +
                   ", this run has " + std::to_string(ctx_.world_size) + " with shard group " +
                   std::to_string(shard) +
                   " (resharding a checkpoint is not supported; hint: use another --out)";
          chosen = -1;
        } else if (std::string diff = PlanMismatch(dir + "/" + RankFile(0), step, runtime_->units(),
                                                   global_batch(), optimizer_->keeps_state());
                   !diff.empty()) {
          reject = "--out: checkpoint " + dir + " was written for another plan or model (" + diff +
                   "; hint: use another --out, or the plan and model that wrote it)";
          chosen = -1;
        } else {
          chosen = step;
        }
        ++next;
        break;
      }
    }
    at::Tensor t = at::full({1}, chosen, at::kLong);
    if (world.size() > 1) world.Broadcast(t, 0)->Wait();
    chosen = t.item<int64_t>();
    if (chosen < 0)
      throw InputError(ctx_.rank == 0 ? reject : "--out: rank 0 rejected the checkpoint");
    if (chosen == 0) return 0;
    const std::string dir = CheckpointRoot() + "/" + CheckpointDirName(chosen);
    CheckpointManifest m;
    std::string problem = ReadManifest(dir, &m);
    if (problem.empty()) problem = VerifyRankFile(dir, m, RankFile(ctx_.rank));
    at::Tensor bad = at::full({1}, problem.empty() ? 0L : 1L, at::kLong);
    at::Tensor all = at::zeros({world.size()}, at::kLong);
    if (world.size() > 1) {
      world.AllGather(bad, all)->Wait();
    } else {
      all.copy_(bad);
    }
    if (all.sum().item<int64_t>() == 0) {
      LoadState(dir + "/" + RankFile(ctx_.rank), chosen);
      Message("resumed from checkpoint " + dir + " (step " + std::to_string(chosen) + ")");
      return chosen;
    }
    if (ctx_.rank == 0) {
      std::string which;
      for (int r = 0; r < world.size(); ++r) {
        if (all[r].item<int64_t>() != 0) which += (which.empty() ? "" : ", ") + RankFile(r);
      }
      Message("checkpoint " + dir + " is incomplete or corrupted (" +
              (problem.empty() ? which + ": checksum mismatch" : problem) + "); skipping it");
    }
  }
}

}  // namespace shardtune::exec
