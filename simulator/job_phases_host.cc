// Sizes the job phases need (per parameter, per state tensor) and host RAM per node per phase,
// pinned (CPU offload: FSDP2 CPUOffloadPolicy(pin_memory=True)) and pageable apart.
#include <algorithm>

#include "model/module_tree.h"
#include "model/trainable.h"
#include "simulator/job_phases_internal.h"
#include "simulator/step_walk.h"

namespace shardtune::sim::internal {

JobSizes ComputeSizes(const model::ModelSpec& spec, const model::Plan& plan, int n,
                      const MemoryOptions& o) {
  JobSizes z;
  int64_t em = model::BytesPerElement(plan.master_dtype);
  int64_t ef = model::BytesPerElement(plan.FrozenDtype());  // frozen ones: as they were loaded
  int64_t ec = o.checkpoint_dtype_bytes;
  int64_t largest_numel = 0;
  // The executor's load, unit by unit (executor/fsdp/flat_param.cc): a full padded fp32 buffer, the
  // shard cloned from it in its dtype, the gathered buffer in the param dtype (freed at once);
  // unit i's peak is the shards built before it plus its own.
  const int64_t param_bytes = model::BytesPerElement(plan.param_dtype);
  int64_t executor_shards = 0, executor_worst_cpu = 0, executor_worst_device = 0;
  for (const auto& u :
       model::ApplyTrainability(spec, plan, model::BuildFsdpUnits(spec, plan.wrap, plan.ep))) {
    {
      const model::ExecutorFlatUnit f = model::ExecutorFlatUnitOf(u, plan, n);
      const int64_t shard = f.shard_numel * (f.trains ? em : ef);
      const int64_t cpu = executor_shards + f.padded_numel * 4 + shard + f.padded_numel * param_bytes;
      const int64_t device = executor_shards + shard + f.padded_numel * param_bytes;
      if (cpu > executor_worst_cpu) {
        executor_worst_cpu = cpu;
        z.executor_load_unit = u.name;
      }
      executor_worst_device = std::max(executor_worst_device, device);
      z.executor_largest_unit_fp32_bytes = std::max(z.executor_largest_unit_fp32_bytes, f.padded_numel * 4);
      executor_shards += shard;
    }
    int64_t unit_bytes = 0;
    // Expert parallelism: the unit holds this rank's E / ep experts; the full tensor (what a
    // full state dict gathers) spans the ep ranks' slices.
    const int64_t copies = u.expert_parallel ? plan.ep : 1;
    for (const auto& prm : u.params) {
      bool trains = prm.requires_grad && plan.Trains();
      int64_t ep = trains || prm.lora_adapter ? em : ef;
      int64_t full_padded = prm.GatheredNumel(n) * copies * ep;
      z.shard_numel += prm.PaddedShardNumel(n);
      ++z.param_tensors;
      z.parameters += prm.numel() * copies;
      z.full_master_bytes += prm.numel() * copies * ep;
      unit_bytes += prm.numel() * copies * ep;
      z.param_full_master_bytes.push_back(full_padded);
      if (trains) {
        z.trainable_parameters += prm.numel() * copies;
        z.trainable_shard_numel += prm.PaddedShardNumel(n);
      }
      // Optimizer state tensors per parameter, each shaped like it (torch/optim/adam.py
      // _init_group: exp_avg, exp_avg_sq; sgd.py: momentum_buffer); Adafactor's factored row
      // and column moments for matrices (torch/optim/_adafactor.py), a full one for vectors.
      // Frozen parameters have none (torch.optim only gets requires_grad parameters).
      int states = !trains ? 0 : plan.optimizer == model::Optimizer::kAdamW ? 2
                               : plan.optimizer == model::Optimizer::kSgd   ? 1
                                                                            : 0;
      for (int k = 0; k < states; ++k) z.state_full_bytes.push_back(full_padded);
      if (trains && plan.optimizer == model::Optimizer::kAdafactor) {
        z.state_full_bytes.push_back(prm.inner > 1 ? (prm.dim0 + prm.inner) * em : full_padded);
      }
      if (full_padded > z.largest_tensor_full_bytes) {
        z.largest_tensor_full_bytes = full_padded;
        z.largest_tensor_name = prm.name;
      }
      z.largest_shard_item_bytes =
          std::max(z.largest_shard_item_bytes, prm.PaddedShardNumel(n) * ep);
      if (prm.numel() > largest_numel) {
        largest_numel = prm.numel();
        z.largest_param_numel = largest_numel;
        z.largest_param_name = prm.name;
        z.largest_param_full_ckpt_bytes = prm.numel() * ec;
        z.largest_param_shard_ckpt_bytes = prm.PaddedShardNumel(n) * ec;
        z.largest_param_master_bytes = prm.numel() * ep;
      }
    }
    if (unit_bytes > z.largest_unit_full_bytes) {
      z.largest_unit_full_bytes = unit_bytes;
      z.largest_unit_name = u.name;
    }
  }
  z.executor_load_excess_cpu_bytes = std::max<int64_t>(0, executor_worst_cpu - executor_shards);
  z.executor_load_excess_device_bytes = std::max<int64_t>(0, executor_worst_device - executor_shards);
  for (int64_t b : z.param_full_master_bytes) z.full_state_bytes += b;
  for (int64_t b : z.state_full_bytes) z.full_state_bytes += b;
  z.full_ckpt_bytes = z.parameters * ec;
  return z;
}

namespace {

struct HostAt {
  std::string moment;
  std::vector<std::pair<std::string, Bytes>> pinned, pageable;
};

// torch/nn/modules/module.py Module._apply converts parameter by parameter, so casting a loaded
// model holds the larger of the two full copies plus, at most, the largest parameter in the
// smaller dtype. Without a cast: the full copy in the checkpoint's dtype.
int64_t LoadedCopyBytes(const JobSizes& z, const MemoryOptions& o, int64_t master_bytes_per_elem) {
  if (o.checkpoint_dtype_bytes == master_bytes_per_elem) return z.full_ckpt_bytes;
  int64_t smaller = std::min<int64_t>(o.checkpoint_dtype_bytes, master_bytes_per_elem);
  return std::max(z.full_ckpt_bytes, z.full_master_bytes) + z.largest_param_numel * smaller;
}

// The full state dict as rank 0 holds it on the host: gathered tensors narrowed to their real
// size before .to("cpu") (unpadded): the model plus one copy per optimizer state tensor.
int64_t FullStateHostBytes(const JobSizes& z, const model::Plan& plan, int64_t em) {
  int64_t states = plan.optimizer == model::Optimizer::kAdamW ? 2 : plan.optimizer == model::Optimizer::kSgd ? 1 : 0;
  int64_t factored = 0;
  if (plan.optimizer == model::Optimizer::kAdafactor) {
    for (size_t i = 0; i < z.state_full_bytes.size(); ++i) factored += z.state_full_bytes[i];
  }
  return z.full_master_bytes + z.trainable_parameters * em * states + factored;
}

HostAt HostOf(JobPhase ph, const model::Plan& plan, const JobSizes& z, const MemoryOptions& o, int g,
              Bytes activation_pinned) {
  HostAt h;
  int64_t em = model::BytesPerElement(plan.master_dtype);
  Bytes baseline = o.constants.host_process_baseline * g;
  h.pageable.push_back({"training processes (baseline)", baseline});
  if (plan.offload != model::Offload::kNone) {
    int64_t per_param = plan.optimizer == model::Optimizer::kAdamW ? 16 : plan.optimizer == model::Optimizer::kSgd ? 12 : 8;
    if (ph == JobPhase::kLoad) per_param = em;  // only the parameter shards exist yet
    // Frozen shards offload their parameters only, in the dtype they were loaded in.
    int64_t frozen = z.shard_numel - z.trainable_shard_numel;
    int64_t ef = model::BytesPerElement(plan.FrozenDtype());
    h.pinned.push_back({"offloaded shards (pinned)",
                        Bytes::Of((z.trainable_shard_numel * per_param + frozen * ef) * g)});
  }
  // Activation offload's pinned copies: allocated by the first forward, then kept by the
  // CachingHostAllocator's free lists (never returned before empty_cache) for the rest of the job;
  // model load and a resume come before any forward.
  if (activation_pinned.count() > 0 && ph != JobPhase::kLoad && ph != JobPhase::kResume) {
    h.pinned.push_back({"offloaded activations (pinned, power-of-two blocks)", activation_pinned * g});
  }
  int64_t loaded = LoadedCopyBytes(z, o, em);
  switch (ph) {
    case JobPhase::kLoad:
      if (o.model_load == ModelLoad::kEveryRank) {
        h.moment = "every rank holds the full model in RAM";
        h.pageable.push_back({"full model copy per rank (from_pretrained, cast)", Bytes::Of(loaded * g)});
      } else if (o.model_load == ModelLoad::kExecutor) {
        h.moment = "every rank initialises one unit in full fp32 at a time";
        h.pageable.push_back({"one unit in full fp32 per rank (executor init)",
                              Bytes::Of(z.executor_largest_unit_fp32_bytes * g)});
      } else if (o.model_load == ModelLoad::kRank0) {
        h.moment = "rank 0 holds the full model in RAM";
        h.pageable.push_back({"full model copy on rank 0", Bytes::Of(loaded)});
      } else {
        h.moment = "DCP reads one shard item per rank at a time";
        h.pageable.push_back({"DCP read buffers (one shard item per rank)",
                              Bytes::Of(z.largest_shard_item_bytes * o.checkpoint_dtype_bytes / em * g)});
      }
      break;
    case JobPhase::kStep0: case JobPhase::kSteady:
      h.moment = "training";
      break;
    case JobPhase::kSave:
      if (o.checkpoint_format == CheckpointFormat::kFullCpuOffload) {
        h.moment = "rank 0 holds the full state dict in RAM";
        h.pageable.push_back({"full state dict on rank 0", Bytes::Of(FullStateHostBytes(z, plan, em))});
      } else if (o.checkpoint_format == CheckpointFormat::kFull) {
        // torch.save of CUDA tensors copies each storage to the host as it writes it.
        h.moment = "torch.save copies one gathered tensor at a time";
        h.pageable.push_back({"torch.save staging (largest tensor)", Bytes::Of(z.largest_tensor_full_bytes)});
      } else {
        h.moment = "DCP writes one shard item per rank at a time";
        h.pageable.push_back({"DCP write staging (one shard item per rank)", Bytes::Of(z.largest_shard_item_bytes * g)});
      }
      break;
    case JobPhase::kResume:
      if (o.checkpoint_format == CheckpointFormat::kSharded) {
        h.moment = "DCP reads one shard item per rank at a time";
        h.pageable.push_back({"DCP read buffers (one shard item per rank)", Bytes::Of(z.largest_shard_item_bytes * g)});
      } else {
        h.moment = "rank 0 loads the consolidated checkpoint into RAM";
        h.pageable.push_back({"full state dict on rank 0 (torch.load)", Bytes::Of(FullStateHostBytes(z, plan, em))});
      }
      break;
  }
  return h;
}

}  // namespace

void AddHostMemory(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                   const model::Plan& plan, const MemoryReport& report, const JobSizes& z,
                   const MemoryOptions& o, JobPhases* out) {
  (void)spec;
  // Host RAM is judged per host: the node's on a node of one host, a compute tray's where an
  // NVLink domain spans hosts (GB200 NVL72; ClusterSpec::gpus_per_host).
  Bytes limit = cluster.HostMemoryPerHost();
  if (o.host_memory_limit.count() > 0 && o.host_memory_limit < limit) limit = o.host_memory_limit;
  out->host_limit = limit;
  out->host_scope = cluster.HostsPerNode() > 1 ? "host" : "node";
  for (auto& ph : out->phases) {
    HostAt h;
    if (cluster.cpu_only) {
      // CPU ranks (shardtune's executor over Gloo) hold everything in host RAM: the node holds
      // every local rank's tensors and process (the per-rank figure judged above) and the
      // launcher. Their checkpoint I/O streams from and into the tensors (executor/train/checkpoint.h
      // WriteBlobsAtomically, BlobFile::ReadInto): no staging copy beside them.
      const int g = cluster.gpus_per_node;
      h.moment = std::string(ToString(ph.phase)) + " on every CPU rank";
      h.pageable.push_back({std::to_string(g) + " CPU rank" + (g == 1 ? "" : "s") +
                                " (each: tensors + process)",
                            ph.required * g});
      if (g > 1) h.pageable.push_back({"launcher (shardtune run)", o.constants.cpu_launcher});
    } else {
      h = HostOf(ph.phase, plan, z, o, cluster.GpusPerHost(), report.activation_offload_pinned);
    }
    ph.host_moment = h.moment;
    ph.host_pinned = Bytes();
    ph.host_pageable = Bytes();
    ph.host_breakdown.clear();
    for (const auto& kv : h.pinned) {
      ph.host_pinned += kv.second;
      ph.host_breakdown.push_back(kv);
    }
    for (const auto& kv : h.pageable) {
      ph.host_pageable += kv.second;
      ph.host_breakdown.push_back(kv);
    }
    ph.host_total = ph.host_pinned + ph.host_pageable;
    ph.host_fits = ph.host_total <= limit;
  }
}

}  // namespace shardtune::sim::internal
