// Shared job inputs: resolution and joint validation.
#include "cli/job_args.h"

#include <algorithm>

#include "model/activations.h"
#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/errors.h"
#include "model/packing.h"
#include "model/plan_json.h"
#include "model/presets.h"
#include "model/trainable.h"
#include "simulator/job_phases.h"
#include "simulator/profile_json.h"
#include "model/text.h"

namespace shardtune::cli {
namespace {

sim::ModelLoad ParseLoad(const std::string& s) {
  if (s == "every-rank") return sim::ModelLoad::kEveryRank;
  if (s == "rank0") return sim::ModelLoad::kRank0;
  if (s == "meta") return sim::ModelLoad::kMeta;
  throw InputError("--model-load: expected every-rank, rank0 or meta, got \"" + s + "\"");
}

// "64GiB", "512MiB", "1.5TiB", "1000000" (bytes); binary units (capacities, README.md
// "Conventions").
Bytes ParseHostLimit(const std::string& s) {
  const std::string where = "--host-memory-limit";
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw InputError(where + ": expected a size like 64GiB, got \"" + s + "\"");
  }
  std::string unit = s.substr(pos);
  double mult = unit.empty() || unit == "B" ? 1.0 : unit == "KiB" ? 1024.0 : unit == "MiB" ? kMiB
                : unit == "GiB" ? kGiB : unit == "TiB" ? kGiB * 1024.0 : -1.0;
  if (mult < 0) throw InputError(where + ": unknown unit \"" + unit + "\" in \"" + s + "\" (use B, KiB, MiB, GiB or TiB)");
  if (!(v >= 0)) throw InputError(where + ": expected a size >= 0, got \"" + s + "\"");
  return Bytes::Of(static_cast<int64_t>(v * mult));
}

}  // namespace

std::string BeyondTrainedContext(const model::ModelSpec& spec, int64_t seq_len) {
  return "--seq-len " + std::to_string(seq_len) + " is beyond " + spec.name +
         "'s max_seq_len (max_position_embeddings) " + std::to_string(spec.max_seq_len) +
         ": rotary positions extend to it, but the model was not trained that long (a long-context "
         "variant or rope scaling is the usual choice); memory and time are estimated as asked";
}

namespace {

// The GPUs of `c` a worker on `world` of them uses (a config's device_mapping on part of the
// pool): whole nodes when it spans several, else one node holding `world` of its GPUs (its host,
// shared with the pool's other workers, stays the node's). REQUIRES: world divides c's world.
profiles::ClusterSpec WorkerCluster(const profiles::ClusterSpec& c, int world) {
  profiles::ClusterSpec w = c;
  if (world % c.gpus_per_node == 0) {
    w.num_nodes = world / c.gpus_per_node;
  } else {
    w.num_nodes = 1;
    w.gpus_per_node = world;
  }
  if (w.num_nodes == 1) w.nics_per_node = 0;  // profiles/cluster.h: one node has no NICs
  w.name = c.name + " (" + std::to_string(world) + " of its GPUs)";
  return w;
}

// --global-batch sets grad_accum. A packed plan's counts sequences: its rows per rank are those verl's
// rule makes when every sequence is the longest (model/packing.h PackedRowsAtLongest), as `run`
// and `tune` take them. A --grad-accum that says otherwise is an error.
// Unpacked, without --grad-accum: grad_accum = global / (micro-batch x data-parallel ranks), as
// `run` takes it (a global batch that does not divide is Validate's error).
void ApplyGlobalBatch(const PlanFlags& flags, int world, model::Plan* plan) {
  if (flags.global_batch <= 0) return;
  const int64_t dp = plan->DataParallel(world);
  if (plan->packed_seq_len <= 0) {
    const int64_t per = static_cast<int64_t>(plan->micro_batch) * dp;
    if (!FlagGiven(flags, "--grad-accum") && per >= 1 && flags.global_batch % per == 0) {
      plan->grad_accum = static_cast<int>(flags.global_batch / per);
    }
    return;
  }
  if (dp < 1 || flags.global_batch % dp != 0 || plan->seq_len < 1) return;  // Validate says why
  const int64_t rows = model::PackedRowsAtLongest(flags.global_batch / dp, plan->packed_seq_len,
                                                  static_cast<int64_t>(plan->micro_batch) * plan->seq_len);
  if (FlagGiven(flags, "--grad-accum") && plan->grad_accum != rows) {
    throw InputError("--grad-accum " + std::to_string(plan->grad_accum) + ": --global-batch " +
                     std::to_string(flags.global_batch) + " packed sequences of up to " +
                     std::to_string(plan->packed_seq_len) + " tokens fill " + std::to_string(rows) +
                     " rows of " + std::to_string(plan->seq_len) + " per rank; expected " +
                     std::to_string(rows) + " or no --grad-accum");
  }
  plan->grad_accum = static_cast<int>(rows);
}

}  // namespace

std::string RaisePackedRowToLargest(int64_t sequences_per_step, int world, model::Plan* plan) {
  if (plan->packed_seq_len <= 0 || sequences_per_step <= 0 || plan->micro_batch != 1) return "";
  const int64_t dp = plan->DataParallel(world);
  if (dp < 1 || sequences_per_step % dp != 0 || plan->seq_len < 1) return "";
  const int64_t n = sequences_per_step / dp, budget = plan->seq_len, longest = plan->packed_seq_len;
  const int64_t largest = model::LargestPackedRowAtLongest(n, longest, budget);
  if (largest <= budget) return "";
  const int64_t rows = model::PackedRowsAtLongest(n, longest, budget);
  plan->seq_len = largest;
  return "packed rows: verl's rearrange_micro_batches balances its micro-batches, it does not cap "
         "them at the budget: " + std::to_string(n) + " sequences of up to " + std::to_string(longest) +
         " tokens per rank under " + std::to_string(budget) + " make " + std::to_string(rows) +
         " micro-batches of up to " + std::to_string(largest / longest) + " sequences, " +
         std::to_string(largest) + " tokens, and the job is judged at that row (sequences of mixed "
         "lengths can make a larger one: the rows are balanced on workload, not tokens)";
}

namespace {

void Validate(const Job& job, const PlanFlags& flags) {
  const auto& cluster = job.cluster;
  const auto& plan = job.plan;
  std::vector<std::string> problems =
      JobProblems(job.spec, cluster, plan, PlanSource(flags));
  if (flags.global_batch > 0 && plan.packed_seq_len > 0) {
    // Packed rows: the sequences per step, shared equally by the data-parallel ranks
    // (ApplyGlobalBatch set grad_accum from it).
    int64_t dp = plan.DataParallel(cluster.world_size());
    if (flags.global_batch % dp != 0) {
      problems.push_back("--global-batch: expected a multiple of the " + std::to_string(dp) +
                         " data-parallel ranks (each takes an equal share of the packed sequences), got " +
                         std::to_string(flags.global_batch));
    }
  } else if (flags.global_batch > 0) {
    int64_t dp = plan.DataParallel(cluster.world_size());
    int64_t got = plan.GlobalBatch(cluster.world_size());  // micro x accum x (world / cp)
    if (got != flags.global_batch) {
      problems.push_back("--global-batch: expected micro-batch x grad-accum x data-parallel ranks = " +
                         std::to_string(plan.micro_batch) + " x " + std::to_string(plan.grad_accum) +
                         " x " + std::to_string(dp) + " = " + std::to_string(got) + ", got " +
                         std::to_string(flags.global_batch));
    }
  }
  ThrowIfProblems(problems);
}

}  // namespace

void ApplyImagePixels(const PlanFlags& flags, const model::ModelSpec& spec, model::Plan* plan) {
  if (flags.image_pixels.empty()) return;
  const std::string& t = flags.image_pixels;
  const size_t x = t.find_first_of("xX");
  // Whole numbers of at most 6 digits, >= 1.
  auto whole = [](const std::string& v) {
    return v.size() <= 6 && v.find_first_not_of("0123456789") == std::string::npos &&
           model::ParseInt64(v).value_or(0) >= 1;
  };
  if (x == std::string::npos || !whole(t.substr(0, x)) || !whole(t.substr(x + 1))) {
    throw InputError("--image-pixels: expected WIDTHxHEIGHT in pixels (e.g. 1280x720), got \"" + t + "\"");
  }
  if (!spec.vision.enabled()) {
    throw InputError("--image-pixels: expected a vision-language model, got " + spec.name +
                     " (a text model: no vision tower)");
  }
  if (FlagGiven(flags, "--image-tokens")) {
    throw InputError("--image-pixels: expected either it or --image-tokens, got both");
  }
  const model::ImageTokens one =
      model::TokensForImage(spec.vision, *model::ParseInt64(t.substr(0, x)), *model::ParseInt64(t.substr(x + 1)));
  if (plan->images == 0) plan->images = 1;
  plan->image_tokens = one.tokens * plan->images;
}

void ApplyImages(const PlanFlags& flags, const model::ModelSpec& spec, model::Plan* plan,
                 std::vector<std::string>* warnings) {
  ApplyImagePixels(flags, spec, plan);
  // Text-only batches: the tower never runs, so its parameters get no gradient and AdamW no
  // state for them (model::VisionTowerIdle; ApplyTrainability marks them).
  if (!model::VisionTowerIdle(spec, *plan)) return;
  warnings->push_back("--images: none given, so the batches are text only: the " +
                      std::string(model::ToString(spec.vision.kind)) +
                      " vision tower does not run (its parameters stay sharded, with no "
                      "gradient or optimizer state); give --images with --image-tokens or "
                      "--image-pixels for image batches");
}

std::vector<std::string> JobProblems(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                     const model::Plan& plan, const std::string& plan_where,
                                     bool executor_run) {
  std::vector<std::string> problems = spec.Problems("--model " + spec.name);
  for (auto& p : cluster.Problems("--cluster")) problems.push_back(p);
  for (auto& p : plan.Problems(plan_where, cluster.world_size(), cluster.gpus_per_node,
                               spec.num_layers, spec.SeqLenLimit())) {
    problems.push_back(p);
  }
  // Ulysses cp against the model's heads and the FSDP mesh (model/context_parallel.h).
  for (auto& p :
       model::CpProblems(spec, plan, cluster.world_size(), cluster.gpus_per_node, plan_where)) {
    problems.push_back(p);
  }
  // Expert parallelism against the model's experts and model code (model/expert_parallel.h).
  for (auto& p : model::EpProblems(spec, plan, plan_where)) problems.push_back(p);
  // Liger-Kernel's module patches against the model they are modelled for (model/activations.h).
  for (auto& p : model::LigerProblems(spec, plan, plan_where)) problems.push_back(p);
  for (auto& p : model::VisionProblems(spec, plan, plan_where)) problems.push_back(p);
  for (auto& p : model::OpSacProblems(spec, plan, plan_where)) problems.push_back(p);
  // CPU ranks keep their activations in host RAM already: verl's offload would copy RAM to RAM.
  if (cluster.cpu_only && !executor_run && plan.activation_offload != model::ActivationOffload::kNone) {
    problems.push_back(plan_where + ":/activation_offload: expected none on CPU ranks (" + cluster.name +
                       ": their activations are in host RAM already), got " + model::ActivationOffloadSpecToString(plan));
  }
  if (spec.Problems("").empty()) {  // the model's names and shapes are needed for these checks
    for (auto& p : model::TrainabilityProblems(spec, plan, plan.ResolvedSeqLen(spec.max_seq_len),
                                               plan_where)) {
      problems.push_back(p);
    }
  }
  return problems;
}

sim::Profile LoadJobProfile(const std::string& profile_flag, const profiles::ClusterSpec& cluster) {
  sim::Profile prof = sim::JobProfile(profile_flag, cluster.gpu);
  if (std::string why = sim::ProfileDeviceMismatch(prof, cluster); !why.empty()) {
    throw InputError("--profile " + profile_flag + ": " + why +
                     ": its kernel times would time that hardware with another device's speed; "
                     "hint: probe the cluster's device (shardtune probe) or leave --profile out");
  }
  return prof;
}

void AddJobFlags(CLI::App* sub, JobArgs* a) {
  sub->add_option("--model", a->model, "Preset name, shardtune.model JSON or HF config.json")
      ->capture_default_str();
  sub->add_option("--cluster", a->cluster, "Shorthand (8xH100, 2x8xA100-80G, 16x8xH100-ib400), node preset (4xp5, 2xdgx-h100: shardtune gpus) or cluster JSON")
      ->capture_default_str();
  sub->add_option("--model-load", a->model_load, "every-rank|rank0|meta: how weights reach the ranks")
      ->capture_default_str();
  sub->add_option("--load-dtype", a->load_dtype, "Dtype of the pretrained weights read at load: bf16|fp16|fp32")
      ->capture_default_str();
  sub->add_option("--checkpoint-format", a->checkpoint_format,
                  "none|sharded|full|full_cpu_offload: how checkpoints are saved and resumed")
      ->capture_default_str();
  sub->add_option("--allocator", a->allocator, "default|expandable_segments (PYTORCH_CUDA_ALLOC_CONF)")
      ->capture_default_str();
  sub->add_option("--host-memory-limit", a->host_memory_limit, "cgroup limit on host RAM per node, e.g. 64GiB");
  sub->add_flag("--no-grad-clip", a->no_grad_clip, "No clip_grad_norm_ before the optimizer step");
  sub->add_option("--moe-capacity-factor,--moe-imbalance", a->moe_capacity_factor,
                  "MoE: the busiest expert's tokens as a multiple of the balanced top_k x tokens / "
                  "experts (load imbalance; default 1.0: balanced)")
      ->capture_default_str();
  sub->add_option("--profile", a->profile, "Calibrated profile JSON (shardtune.profile)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--json", a->json, "Print one JSON document and nothing else");
  sub->add_flag("--timeline", a->timeline, "Print the memory timeline phase by phase");
  sub->add_flag("--explain", a->explain,
                "Also say how each figure is judged (the allocator replay, the allowances)");
  AddPlanFlags(sub, &a->plan);
  AddFromFlags(sub, &a->plan);
}

Job ResolveJob(const JobArgs& a) {
  Job job;
  job.cluster = profiles::LoadCluster(a.cluster);
  configs::ImportContext world;
  world.world_size = job.cluster.world_size();
  world.gpus_per_node = job.cluster.gpus_per_node;
  world.allow_subset_world = true;
  JobModel jm = ResolveJobModel(a.model, a.plan, world, &job.warnings);
  job.spec = jm.spec;
  job.model_from = jm.from;
  configs::ImportContext from = configs::MakeImportContext(job.spec, job.cluster);
  from.allow_subset_world = true;
  std::string seq_from;
  job.plan = BuildPlan(a.plan, &from, &job.warnings, &seq_from, &job.from);
  if (job.from.world_size > 0 && job.from.world_size < job.cluster.world_size()) {
    job.cluster = WorkerCluster(job.cluster, job.from.world_size);
  }
  if (job.from.value_head) {  // verl's critic (--from-worker critic)
    job.spec.value_head = true;
    job.spec.name += " (value head)";
  }
  ApplyImages(a.plan, job.spec, &job.plan, &job.warnings);
  job.seq_len_note = ApplyDefaultSeqLen(job.spec.max_seq_len, seq_from, &job.plan);
  ApplyGlobalBatch(a.plan, job.cluster.world_size(), &job.plan);
  Validate(job, a.plan);
  {
    job.sequences_per_step = a.plan.global_batch > 0 ? a.plan.global_batch
                             : job.plan.Trains()     ? job.from.sequences_per_step
                                                     : 0;
    const int64_t budget = job.plan.seq_len;
    if (job.plan.packed_seq_len > 0) job.packed_budget = budget;
    std::string raised =
        RaisePackedRowToLargest(job.sequences_per_step, job.cluster.world_size(), &job.plan);
    if (!raised.empty()) {
      job.warnings.push_back(raised);
      job.seq_len_note = "packed rows of up to " + std::to_string(job.plan.seq_len) +
                         " tokens (verl's largest under the budget " + std::to_string(budget) +
                         ") holding sequences of up to " + std::to_string(job.plan.packed_seq_len) +
                         " tokens";
    }
  }
  // The longest sequence (a packed row's may hold several).
  const int64_t longest = job.plan.AttentionSeqLen(job.SeqLen());
  if (longest > job.spec.max_seq_len) job.warnings.push_back(BeyondTrainedContext(job.spec, longest));
  job.options.memory.model_load = ParseLoad(a.model_load);
  if (job.from.rank0_load_unless_tied && !(a.plan.app && a.plan.app->count("--model-load") > 0)) {
    // The config's framework loads as it does (ImportResult::rank0_load_unless_tied).
    job.options.memory.model_load =
        job.spec.tied_embeddings ? sim::ModelLoad::kEveryRank : sim::ModelLoad::kRank0;
  }
  job.options.memory.checkpoint_dtype_bytes = static_cast<int>(
      model::BytesPerElement(model::ParseEnum<model::DType>(a.load_dtype, "--load-dtype")));
  job.options.memory.checkpoint_format = sim::ParseCheckpointFormat(a.checkpoint_format, "--checkpoint-format");
  job.options.memory.allocator = sim::ParseAllocatorMode(a.allocator, "--allocator");
  if (!a.host_memory_limit.empty()) job.options.memory.host_memory_limit = ParseHostLimit(a.host_memory_limit);
  job.options.memory.clip_grad_norm = !a.no_grad_clip;
  if (!(a.moe_capacity_factor > 0)) {
    throw InputError("--moe-capacity-factor: expected a number > 0 (1.0: balanced load), got " +
                     std::to_string(a.moe_capacity_factor));
  }
  job.options.memory.moe_capacity_factor = a.moe_capacity_factor;
  sim::Profile prof = LoadJobProfile(a.profile, job.cluster);
  job.options.memory.constants = prof.memory;
  job.options.costs = prof.costs;
  if (!a.profile.empty()) {
    job.timed_by = "--profile " + a.profile;
    if (prof.has_provenance && !prof.provenance.device.empty()) {
      job.timed_by += " (probed on " + prof.provenance.device +
                      (prof.provenance.date.empty() ? "" : ", " + prof.provenance.date) + ")";
    }
  } else if (const sim::Profile* c = sim::CatalogProfile(job.cluster.gpu)) {
    job.timed_by = "the " + job.cluster.gpu.name + " catalog profile (probed" +
                   (c->provenance.date.empty() ? "" : " " + c->provenance.date) + ")";
  } else {
    job.timed_by = "datasheet peaks x the cost model's default efficiencies";
  }
  return job;
}

nlohmann::ordered_json JobHeaderJson(const Job& job, const std::string& schema) {
  nlohmann::ordered_json j;
  j["schema"] = schema;
  j["schema_version"] = 1;
  j["model"] = {{"name", job.spec.name}, {"parameters", model::ParameterCount(job.spec)},
                {"source", job.spec.source}};
  if (!job.model_from.empty()) j["model"]["named_in"] = job.model_from;
  j["cluster"] = {{"name", job.cluster.name}, {"world_size", job.cluster.world_size()},
                  {"gpu", job.cluster.gpu.name},
                  {"usable_memory_bytes", job.cluster.gpu.usable_memory.count()}};
  if (!job.cluster.machine.empty()) {
    j["cluster"]["machine"] = job.cluster.machine;
    j["cluster"]["host_memory_bytes_per_node"] = job.cluster.host_memory_per_node.count();
    j["cluster"]["cpu_cores_per_node"] = job.cluster.cpu_cores_per_node;
    // Only where an NVLink domain spans hosts (GB200 NVL72), so other answers keep their bytes.
    if (job.cluster.gpus_per_host > 0) j["cluster"]["gpus_per_host"] = job.cluster.gpus_per_host;
  }
  j["plan"] = model::PlanToJson(job.plan);
  // The values used, not the plan's "0: the default" (issue #49): the sequence length and the
  // shard group as resolved on this cluster. Both are valid plan values that rebuild the plan.
  j["plan"]["seq_len"] = job.SeqLen();
  j["plan"]["shard_group_size"] =
      job.plan.ResolvedShardGroup(job.cluster.world_size(), job.cluster.gpus_per_node);
  j["seq_len_source"] = job.seq_len_note;
  return j;
}

}  // namespace shardtune::cli
