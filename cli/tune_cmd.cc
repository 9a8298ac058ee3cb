// `shardtune tune`: request validation, the search, and its report.
#include "cli/tune_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "cli/job_args.h"
#include "cli/report_words.h"
#include "cli/tune_measure.h"
#include "planner/search_json.h"
#include "model/activations.h"
#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/errors.h"
#include "model/plan_json.h"
#include "model/presets.h"
#include "model/text.h"
#include "model/trainable.h"
#include "planner/configs/export.h"
#include "planner/offload_advisor.h"
#include "planner/pareto_plot.h"
#include "planner/search.h"
#include "profiles/cluster.h"
#include "profiles/cluster_presets.h"
#include "simulator/feature_savings.h"
#include "simulator/job_phases.h"
#include "simulator/memory_plot.h"
#include "simulator/memory_report_json.h"
#include "simulator/profile_json.h"
#include "simulator/trace_json.h"

namespace shardtune::cli {
namespace {

// The cp degrees to search: --cp N fixes one, --cp-sizes 1,2,4 lists them, neither: the default
// (planner DefaultCpSizes). Each given value must suit the model, world and sequence length.
std::vector<int> CpSizesOf(const TuneArgs& a, const model::Plan& given,
                           const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                           const planner::SearchRequest& req) {
  std::vector<int> sizes;
  std::string where = "--cp";
  if (FlagGiven(a.plan, "--cp")) sizes = {given.cp};
  if (a.plan.app && a.plan.app->count("--cp-sizes") > 0) {
    where = "--cp-sizes";
    sizes.clear();
    for (const std::string& item : model::SplitCommas(a.cp_sizes)) {
      if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos ||
          item.size() > 6) {
        throw InputError(
            "--cp-sizes: expected a comma-separated list of integers >= 1 (e.g. 1,2,4,8), got \"" +
            a.cp_sizes + "\"");
      }
      sizes.push_back(std::stoi(item));
    }
  }
  if (sizes.empty()) return {};
  std::vector<std::string> problems;
  int world = c.world_size();
  for (int cp : sizes) {
    model::Plan probe = given;
    probe.cp = cp;
    probe.strategy = model::ShardingStrategy::kFullShard;
    probe.shard_group_size = 0;
    auto add = [&](const std::string& expected) {
      problems.push_back(where + ": expected " + expected + ", got " + std::to_string(cp));
    };
    if (cp < 1 || world % cp != 0) {
      add("a cp >= 1 dividing the world size " + std::to_string(world));
    } else if (req.seq_len % cp != 0) {
      add("a cp dividing --seq-len " + std::to_string(req.seq_len));
    } else {
      for (const auto& p : model::CpProblems(spec, probe, world, c.gpus_per_node, where)) {
        problems.push_back(p);
      }
    }
  }
  ThrowIfProblems(problems);
  return sizes;
}

planner::SearchRequest BuildRequest(const TuneArgs& a, const model::ModelSpec& spec,
                                 const profiles::ClusterSpec& c, std::vector<std::string>* warnings,
                                 std::string* seq_len_note, FromExtras* extras_out) {
  std::vector<std::string> problems;
  planner::SearchRequest req;
  configs::ImportContext from = configs::MakeImportContext(spec, c);
  std::string seq_from;
  FromExtras extras;
  model::Plan given = BuildPlan(a.plan, &from, warnings, &seq_from, &extras);
  *extras_out = extras;
  if (extras.value_head) {
    problems.push_back(PlanSource(a.plan) +
                       ": --from-worker critic: tune searches causal-LM plans; estimate and "
                       "simulate verl's critic");
  }
  *seq_len_note = ApplyDefaultSeqLen(spec.max_seq_len, seq_from, &given);
  int64_t global_batch = a.plan.global_batch;  // --global-batch is one of the shared plan flags
  const bool packed = given.packed_seq_len > 0;
  // With --from and no batch flag, the config's global batch is the one to keep: for packed rows
  // the sequences the config's mini-batch holds (the rows alone do not say).
  if (global_batch == 0 && a.global_batch_tokens == 0 && !a.plan.from_files.empty()) {
    global_batch = packed ? extras.sequences_per_step : given.GlobalBatch(c.world_size());
  }
  if (packed && global_batch == 0 && a.global_batch_tokens == 0) {
    problems.push_back(PlanSource(a.plan) +
                       ": packed micro-batches: expected --global-batch (sequences per optimizer "
                       "step) to search token budgets for, got none");
  }
  req.base = given;
  // Packed plans are searched by their token budget: a row of mb longest sequences' tokens
  // (search.cc PlansForCp), the sequence length being the longest a row holds.
  req.seq_len = packed ? given.packed_seq_len : given.ResolvedSeqLen(spec.max_seq_len);
  if (req.seq_len > spec.SeqLenLimit()) {
    problems.push_back("--seq-len: expected at most " +
                       std::string(spec.positions == model::PositionKind::kLearned
                                       ? "the model's max_seq_len (learned position table) "
                                       : "the rotary cap ") +
                       std::to_string(spec.SeqLenLimit()) + ", got " + std::to_string(req.seq_len));
  } else if (req.seq_len > spec.max_seq_len) {
    warnings->push_back(BeyondTrainedContext(spec, req.seq_len));
  }
  int world = c.world_size();
  if ((global_batch > 0) == (a.global_batch_tokens > 0)) {
    problems.push_back("--global-batch / --global-batch-tokens: expected exactly one of them");
  } else if (a.global_batch_tokens > 0 && a.global_batch_tokens % req.seq_len != 0) {
    problems.push_back("--global-batch-tokens: expected a multiple of --seq-len " + std::to_string(req.seq_len) +
                       ", got " + std::to_string(a.global_batch_tokens));
  }
  req.global_batch = global_batch > 0 ? global_batch : a.global_batch_tokens / std::max<int64_t>(1, req.seq_len);
  if (req.global_batch > 0 && req.global_batch % world != 0) {
    problems.push_back("global batch: expected a multiple of the " + std::to_string(world) +
                       " data-parallel ranks, got " + std::to_string(req.global_batch) + " sequences");
  }
  if (a.objective == "throughput") req.objective = planner::Objective::kThroughput;
  else if (a.objective == "memory") req.objective = planner::Objective::kMemory;
  else if (a.objective == "cost") req.objective = planner::Objective::kCost;
  else problems.push_back("--objective: expected throughput, memory or cost, got \"" + a.objective + "\"");
  if (a.objective == "cost" && a.price_per_gpu_hour <= 0) {
    problems.push_back("--price-per-gpu-hour: expected a price > 0 with --objective cost");
  }
  if (a.top < 1) problems.push_back("--top: expected >= 1, got " + std::to_string(a.top));
  if (!(a.min_tokens_per_s >= 0)) {
    problems.push_back("--min-tokens-per-s: expected >= 0, got " + std::to_string(a.min_tokens_per_s));
  }
  if (FlagGiven(a.plan, "--micro-batch") && req.global_batch % world == 0 &&
      (given.micro_batch < 1 || (req.global_batch / world) % given.micro_batch != 0)) {
    problems.push_back("--micro-batch: expected a divisor of the per-rank batch " +
                       std::to_string(req.global_batch / world) + ", got " + std::to_string(given.micro_batch));
  }
  // Frozen prefixes, LoRA, expert units and tiled MLP pass through the search as base-plan fields.
  for (auto& pr : model::TrainabilityProblems(
           spec, given, req.seq_len, a.plan.plan_file.empty() ? "plan" : a.plan.plan_file)) {
    problems.push_back(pr);
  }
  if (FlagGiven(a.plan, "--grad-accum")) problems.push_back("--grad-accum: follows from --global-batch and --micro-batch in tune; leave it out");
  ThrowIfProblems(problems);
  if (req.objective == planner::Objective::kMemory) req.min_tokens_per_s = a.min_tokens_per_s;
  req.price_per_gpu_hour = a.price_per_gpu_hour;
  req.top_k = a.top;
  // A plan flag given on the command line fixes that dimension of the search.
  if (FlagGiven(a.plan, "--strategy")) req.space.strategies = {given.strategy};
  if (FlagGiven(a.plan, "--shard-group")) req.space.hybrid_shard_groups = {given.shard_group_size};
  if (FlagGiven(a.plan, "--wrap")) req.space.wraps = {given.wrap};
  if (FlagGiven(a.plan, "--micro-batch")) req.space.micro_batches = {given.micro_batch};
  if (packed && a.plan.app && a.plan.app->count("--max-tokens-per-micro-batch") > 0) {
    // The search's rows are whole multiples of the longest sequence (PlansForCp).
    const int64_t row = given.micro_batch * given.seq_len;
    if (row % req.seq_len != 0) {
      throw InputError("--max-tokens-per-micro-batch: expected a multiple of the longest sequence " +
                       std::to_string(req.seq_len) + " for tune (which searches rows of whole "
                       "longest sequences; leave it out to search the budget), got " +
                       std::to_string(row));
    }
    req.space.micro_batches = {static_cast<int>(row / req.seq_len)};
  }
  if (FlagGiven(a.plan, "--checkpointing")) req.space.checkpointing = {given.checkpointing};
  // No config format says first:K (export.cc AddBlockCheckpointNote): the exported winner must be
  // the plan ranked, so the search leaves the refinement out (planner/checkpoint_refine.h).
  if (!a.export_format.empty()) req.refine_block_checkpointing = false;
  if (FlagGiven(a.plan, "--offload")) req.space.offloads = {given.offload};
  if (FlagGiven(a.plan, "--forward-prefetch")) req.space.forward_prefetch = {true};
  if (FlagGiven(a.plan, "--backward-prefetch")) req.space.backward_prefetch = {given.backward_prefetch};
  if (!a.export_format.empty() &&
      configs::ParseExportFormat(a.export_format, "--export") == configs::ExportFormat::kVerl) {
    // Rank only what verl's FSDP2 workers can run (fsdp_workers.py, engine/fsdp.yaml; the
    // export's notes, export_verl.cc VerlNotes): fsdp_size -1 or a divisor (full or hybrid
    // sharding, never none), reshard_after_forward, one unit per decoder layer, whole-block
    // gradient checkpointing, offload_policy (parameters, gradients and optimizer together),
    // FSDP2's own backward prefetch; forward_prefetch is FSDP1's only.
    using S = model::ShardingStrategy;
    if (!FlagGiven(a.plan, "--strategy")) {
      req.space.strategies = {S::kFullShard, S::kShardGradOp, S::kHybridShard, S::kHybridShardZero2};
    }
    if (!FlagGiven(a.plan, "--wrap")) req.space.wraps = {model::WrapPolicy{}};
    if (!FlagGiven(a.plan, "--checkpointing")) {
      req.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kFull};
    }
    if (!FlagGiven(a.plan, "--offload")) req.space.offloads = {model::Offload::kNone, model::Offload::kAll};
    if (!FlagGiven(a.plan, "--forward-prefetch")) req.space.forward_prefetch = {false};
    if (!FlagGiven(a.plan, "--backward-prefetch")) {
      req.space.backward_prefetch = {model::BackwardPrefetch::kPre};
    }
    warnings->push_back(
        "--export verl: searched only plans verl's FSDP2 workers run; verl lacks no_shard, "
        "embedding / head / every:K / non-uniform units, selective and every:K checkpointing, "
        "optimizer-only offload, forward prefetch (FSDP1 only) and a backward-prefetch setting");
  }
  req.space.cp_sizes = CpSizesOf(a, given, spec, c, req);
  if (FlagGiven(a.plan, "--ep")) {
    ThrowIfProblems(model::EpProblems(spec, given, "--ep"));
    req.space.ep_sizes = {given.ep};
  }
  if (a.plan.app && a.plan.app->count("--loss-kernels") > 0) {
    if (FlagGiven(a.plan, "--loss-kernel")) {
      throw InputError("--loss-kernels: leave out --loss-kernel (it fixes the one --loss-kernels searches)");
    }
    req.space.loss_kernels.clear();
    for (const std::string& item : model::SplitCommas(a.loss_kernels)) {
      auto k = model::ParseEnum<model::LossKernel>(item, "--loss-kernels");
      if (std::find(req.space.loss_kernels.begin(), req.space.loss_kernels.end(), k) ==
          req.space.loss_kernels.end()) {
        req.space.loss_kernels.push_back(k);
      }
    }
  }
  sim::Profile prof = LoadJobProfile(a.profile, c);
  req.options.memory.constants = prof.memory;
  req.options.costs = prof.costs;
  return req;
}

// The pinned host bytes per host (a node, or a compute tray where an NVLink domain spans several:
// ClusterSpec::GpusPerHost) that verl's activation offload of `p` holds during training: each
// GPU's copies of one micro-batch's offloaded blocks, in the CachingHostAllocator's power-of-two
// blocks (sim::MemoryReport::activation_offload_pinned), times the host's GPUs. 0 without it.
// The search judges the GPU only; the refinement checked these against the host's RAM.
Bytes PinnedActivationsPerHost(const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                               const sim::MemoryOptions& options, const model::Plan& p) {
  if (p.activation_offload == model::ActivationOffload::kNone) return Bytes();
  sim::MemoryOptions mo = options;
  mo.allocator_replay = false;
  mo.host_estimate = false;
  sim::ModelCache cache;  // EstimateMemoryReport leaves out the repeated micro-batches
  return sim::EstimateMemoryReport(spec, c, p, mo, &cache).activation_offload_pinned * c.GpusPerHost();
}

void PrintTable(const TuneArgs& a, const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                const planner::SearchRequest& req, const planner::SearchResult& r,
                const std::vector<Bytes>& pinned_per_host,
                const std::string& seq_len_note, const std::string& model_from,
                const std::string& allocator_line, const std::string& notes, std::ostream& out) {
  out << "shardtune tune: " << spec.name << (model_from.empty() ? "" : " (" + model_from + ")")
      << " on " << c.name << ", global batch " << req.global_batch << " x "
      << req.seq_len << " tokens, objective " << a.objective << "; " << seq_len_note << "\n";
  // The NIC layout the cluster assumed (a shorthand's -ib400 is one NIC per GPU, /node one per
  // node): NCCL's channels across nodes follow it.
  const std::string nics = profiles::DescribeNics(c);
  if (!nics.empty()) out << "network: " << nics << "; collectives priced by NCCL's model\n";
  out << "allocator: " << allocator_line << "\n";
  out << "searched " << r.enumerated << " plans in " << std::fixed << std::setprecision(2) << r.search_s
      << " s on " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ": "
      << r.pruned_by_memory_bound << " ruled out by the memory lower bound, " << r.memory_checked
      << " checked for memory, " << r.pruned_by_time_bound << " ruled out by a time lower bound ("
      << r.pruned_before_walk << " before any walk), "
      << r.simulated << " simulated, " << r.replayed << " replayed through the caching allocator";
  // RefineBlockCheckpointing: checkpointing plans narrowed to the first K blocks that must rerun.
  if (r.refined_checkpointing > 0) {
    out << "; " << r.refined_checkpointing << " checkpointing plan" << (r.refined_checkpointing == 1 ? "" : "s")
        << (r.refined_block_policies == 0
                ? " narrowed to the fewest leading blocks that must rerun (first:K)"
                : " narrowed block by block (first:K, or each block kept, rerun whole or op-level SAC with its own "
                  "save set)");
  }
  out << "\n\n";
  if (r.top.empty()) {
    out << r.advice_if_none << "\n";
  } else {
    out << "Top plans\n";
    for (size_t i = 0; i < r.top.size(); ++i) {
      const auto& t = r.top[i];
      out << "  " << i + 1 << ". " << std::setprecision(0) << t.tokens_per_s << " tokens/s, MFU "
          << std::setprecision(1) << 100 * t.mfu << "%, step " << std::setprecision(3) << t.step_time_s
          << " s, needs " << FormatBytes(t.required) << " of " << FormatBytes(t.capacity) << "\n     " << t.key << "\n"
          << "     flags: " << planner::PlanAsFlags(t.plan) << "\n";
      if (model::ExplicitSacSave(t.plan) || t.plan.checkpointing == model::Checkpointing::kBlocks) {
        out << "     activations: " << BlockPolicyLine(spec, t.plan) << "\n";
      }
      if (i < pinned_per_host.size() && pinned_per_host[i].count() > 0) {
        const int g = c.GpusPerHost();
        out << "     host: " << FormatBytes(pinned_per_host[i]) << " of pinned activation copies per "
            << (c.HostsPerNode() > 1 ? "host" : "node") << " (its " << g << " GPU" << (g == 1 ? "" : "s")
            << "), beside " << FormatBytes(req.options.memory.constants.host_process_baseline * g)
            << " for the processes, of " << FormatBytes(c.HostMemoryPerHost()) << "\n";
      }
      if (!t.why_not_best.empty()) out << "     why not #1: " << t.why_not_best << "\n";
    }
    out << "\nPareto front of the simulated plans (less memory, or more throughput, than every other)\n";
    for (const auto& p : r.pareto) {
      out << "  " << std::setw(10) << FormatBytes(p.required) << std::setw(12) << std::setprecision(0)
          << p.tokens_per_s << " tokens/s  " << p.key << "\n";
    }
  }
  out << notes;
  bool any_cp = false, any_ep = false;
  for (const auto& v : r.cp_verdicts) {
    any_cp |= v.cp > 1;
    any_ep |= v.ep > 1;
  }
  if (any_cp || any_ep) {
    out << (any_cp && any_ep ? "\nUlysses context and expert parallelism: which (cp, ep) layouts fit\n"
            : any_ep         ? "\nExpert parallelism: which ep sizes fit\n"
                             : "\nUlysses context parallelism: which cp sizes fit\n");
    for (const auto& v : r.cp_verdicts) out << "  " << v.why << "\n";
  }
  out << "\nWhy the others lost\n";
  for (const auto& x : r.rejected) {
    out << "  " << std::setw(6) << x.count << "  " << x.reason << "\n          e.g. " << x.example << "\n";
  }
}

struct NodeResult {
  int nodes = 0;
  bool searched = false;  // false: the global batch does not divide over this many GPUs
  bool fits = false;
  double tokens_per_s = 0;
  std::string key;
};

// The same search on the first 1..N nodes of the cluster (same GPUs, links and NICs per node);
// stops at the fewest nodes whose best plan fits and reaches the throughput floor.
std::vector<NodeResult> SearchNodes(const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                                    const planner::SearchRequest& req, double floor_tokens_per_s) {
  std::vector<NodeResult> out;
  for (int k = 1; k <= c.num_nodes; ++k) {
    NodeResult n;
    n.nodes = k;
    profiles::ClusterSpec sub = c;
    sub.num_nodes = k;
    sub.name = std::to_string(k) + "x" + std::to_string(c.gpus_per_node) + "x" + c.gpu.name;
    if (req.global_batch % sub.world_size() == 0) {
      n.searched = true;
      planner::SearchRequest r = req;
      r.space.hybrid_shard_groups.clear();  // groups depend on the world size
      planner::SearchResult res = planner::SearchPlans(spec, sub, r);
      if (!res.top.empty()) {
        n.fits = true;
        n.tokens_per_s = res.top.front().tokens_per_s;
        n.key = res.top.front().key;
      }
    }
    out.push_back(n);
    if (n.fits && n.tokens_per_s >= floor_tokens_per_s) break;
  }
  return out;
}

}  // namespace

void AddTuneCommand(CLI::App* app, TuneArgs* a) {
  CLI::App* sub = app->add_subcommand("tune", "Search FSDP plans and rank them for a cluster");
  sub->add_option("--model", a->model, "Preset name, shardtune.model JSON or HF config.json")->capture_default_str();
  sub->add_option("--cluster", a->cluster, "Shorthand or cluster JSON")->capture_default_str();
  sub->add_option("--global-batch-tokens", a->global_batch_tokens, "Tokens per optimizer step, whole job");
  sub->add_option("--objective", a->objective, "throughput|memory|cost")->capture_default_str();
  sub->add_option("--min-tokens-per-s", a->min_tokens_per_s, "Throughput floor for --objective memory and --search-nodes");
  sub->add_option("--price-per-gpu-hour", a->price_per_gpu_hour, "Dollars per GPU-hour for --objective cost");
  sub->add_option("--top", a->top, "How many plans to rank")->capture_default_str();
  sub->add_option("--out", a->out, "Write the winning plan (shardtune.plan JSON)");
  sub->add_option("--plot", a->plot,
                  "Draw memory against tokens/s of the Pareto front and the top plans, the winner "
                  "marked, to FILE.svg or FILE.html (self-contained)");
  sub->add_option("--export", a->export_format,
                  "Also print the winner as accelerate|torchtitan|hf-trainer|deepspeed|roll|verl config");
  sub->add_option("--profile", a->profile, "Calibrated profile JSON")->check(CLI::ExistingFile);
  sub->add_flag("--search-nodes", a->search_nodes,
                "Also search 1..N nodes for the fewest that fit (and reach --min-tokens-per-s)");
  sub->add_flag("--json", a->json, "Print one JSON document and nothing else");
  // Read back from the parsed subcommand (CpSizesOf), like --measure.
  sub->add_option(
      "--cp-sizes", a->cp_sizes,
      "Ulysses cp degrees to search, e.g. 1,2,4,8 (default: every valid one in a node)");
  sub->add_option("--loss-kernels", a->loss_kernels,
                  "Loss kernels to search, e.g. cross_entropy,fused_linear (default: the plan's, "
                  "cross_entropy unless --loss-kernel)");
  sub->add_option("--allocator", a->allocator,
                  "default|expandable_segments|both: the caching allocator the plans are judged under "
                  "(PYTORCH_CUDA_ALLOC_CONF); both searches each and answers with the better")
      ->capture_default_str();
  sub->add_option("--jobs", a->jobs,
                  "Threads evaluating plans (default: every core; the answer is the same for any N)");
  sub->add_option("--measure", a->measure, "Run the top N plans with the executor (CPU ranks on cpu:N; on a GPU cluster this machine's GPU, emulating rank 0 of its world), calibrate, re-rank");
  sub->add_option("--measure-steps", a->measure_steps, "Steps per measured run (default 4; the first is left out)");
  sub->add_option("--measure-dir", a->measure_dir, "Folder for the measured runs and the fitted profile (default: new /tmp folder)");
  AddPlanFlags(sub, &a->plan);
  AddFromFlags(sub, &a->plan);
}

namespace {
// The --measure options (plans 0: not asked for).
int IntegerFlag(const std::string& flag, const std::string& text) {
  const std::optional<int64_t> value = model::ParseInt64(text);
  if (!value || *value < INT32_MIN || *value > INT32_MAX) {
    throw InputError(flag + ": expected an integer, got \"" + text + "\"");
  }
  return static_cast<int>(*value);
}

MeasureOptions MeasureOptionsOf(const TuneArgs& a) {
  MeasureOptions m;
  if (!a.plan.app || a.plan.app->count("--measure") == 0) return m;
  m.plans = IntegerFlag("--measure", a.measure);
  if (m.plans < 1) throw InputError("--measure: expected a number of plans >= 1, got " + std::to_string(m.plans));
  if (a.plan.app->count("--measure-steps") > 0) m.steps = IntegerFlag("--measure-steps", a.measure_steps);
  if (a.plan.app->count("--measure-dir") > 0) m.dir = a.measure_dir;
  m.model_arg = a.model;
  return m;
}
}  // namespace

namespace {

// Everything `tune` computed: the search and what the flags asked for beside it.
struct TuneRun {
  model::ModelSpec spec;
  profiles::ClusterSpec cluster;
  planner::SearchRequest req;
  planner::SearchResult result;
  MeasureOptions measure;
  MeasureResult measured;
  std::vector<NodeResult> nodes;
  configs::ExportResult exported;
  bool features = false;  // the winner freezes or adapts parameters: savings against a full fine-tune
  sim::FeatureSavings savings;
  sim::MemoryReport best_memory;
  // Per plan of result.top: the pinned host bytes per host its activation offload holds (every
  // GPU of the host: PinnedActivationsPerHost), 0 without activation offload.
  std::vector<Bytes> pinned_per_host;
  std::vector<std::string> warnings;
  // --allocator both (the allocator the result was searched under is req.options.memory's), and
  // then the other allocator's winner.
  bool both_allocators = false;
  struct OtherAllocator {
    sim::AllocatorMode allocator = sim::AllocatorMode::kDefault;
    bool found = false;  // a plan fits under it
    planner::Candidate winner;
  } other;
  // Under the default allocator: the fastest plan, faster than #1, that lost only to the caching
  // allocator's fragmentation (its replay runs out of memory; expandable segments fit it).
  struct Fragmentation {
    bool found = false;
    std::string key, flags;
    double step_time_s = 0;
    Bytes default_required, expandable_required, capacity;
  } fragmentation;
  std::string seq_len_note;  // which sequence length and why (ApplyDefaultSeqLen)
  std::string model_arg;     // --model, or the model a --from config named (JobModel)
  std::string model_from;    // JobModel::from
  FromExtras from;           // what the --from configs said beside the plan (verl's split, n)
  // Packed plans (a token budget): the largest budget the winner's plan fits at, and its step.
  struct TokenBudget {
    bool evaluated = false;
    int64_t row_tokens = 0;  // the winner's rows (a multiple of the longest sequence)
    int64_t max_tokens = 0;  // the most a row can hold and fit (LargestFittingMicroBatchTokens)
    int cp = 1;
    int rows_at_max = 0;     // micro-batches per step at it, every sequence the longest
    double step_s_at_max = 0, tokens_per_s_at_max = 0;
    Bytes required_at_max;
  } budget;
};

// The winner's largest fitting token budget and its step time: the exact capacity between the
// searched multiples of the longest sequence (verl users' "largest ppo_max_token_len_per_gpu
// that fits", otherwise found by running until OOM). Rows per step: the per-rank sequences at
// the longest length over the budget, rounded up (seqlen_balancing.py ceil(tokens / budget));
// throughput counts the sequences' tokens, not the rows' room.
TuneRun::TokenBudget WinnerTokenBudget(const TuneRun& t) {
  TuneRun::TokenBudget b;
  if (t.result.top.empty() || t.req.base.packed_seq_len <= 0) return b;
  const model::Plan& best = t.result.top.front().plan;
  b.evaluated = true;
  b.row_tokens = static_cast<int64_t>(best.micro_batch) * best.seq_len;
  // From the winner's rows (they fit), to a multiple of kBudgetGranularityTokens.
  constexpr int64_t kBudgetGranularityTokens = 256;
  planner::TokenCapacity cap = planner::LargestFittingMicroBatchTokens(
      t.spec, t.cluster, best, t.req.options.memory, 0, b.row_tokens, kBudgetGranularityTokens);
  b.max_tokens = cap.max_tokens;
  b.required_at_max = cap.required_at_max;
  b.cp = std::max(1, best.cp);
  if (cap.max_tokens <= 0) return b;
  const int64_t longest = t.req.seq_len;
  const int64_t per_rank_tokens =
      t.req.global_batch * b.cp / t.cluster.world_size() * longest;
  model::Plan at = planner::PackedRowPlan(best, cap.max_tokens, longest);
  at.grad_accum = static_cast<int>((per_rank_tokens + cap.max_tokens - 1) / cap.max_tokens);
  b.rows_at_max = at.grad_accum;
  sim::SimOptions o = t.req.options;
  o.steady_step_only = true;  // the step time only, as the search simulates its plans
  sim::SimReport r = sim::SimulateStep(t.spec, t.cluster, at, o);
  b.step_s_at_max = r.step_time.count();
  b.tokens_per_s_at_max =
      b.step_s_at_max > 0 ? static_cast<double>(t.req.global_batch * longest) / b.step_s_at_max : 0;
  return b;
}

// The key that sets the token budget in the verl trainer the config came from: the engine SFT
// trainer's data.max_token_len_per_gpu, else the PPO actor's (import_verl.cc).
void PrintTokenBudget(const TuneRun::TokenBudget& b, double winner_step_s,
                      configs::VerlTrainer verl_trainer, std::ostream& out) {
  if (!b.evaluated) return;
  out << "\nToken budget (packed micro-batches)\n";
  if (b.max_tokens <= 0) {
    out << "  the winner's plan does not fit even one longest sequence per micro-batch\n";
    return;
  }
  out << std::fixed << std::setprecision(3) << "  the winner's rows hold " << b.row_tokens
      << " tokens (" << winner_step_s << " s per step); the largest that fits holds "
      << b.max_tokens << " (" << FormatBytes(b.required_at_max) << " required), " << b.rows_at_max
      << " micro-batches and " << b.step_s_at_max << " s per step there ("
      << std::setprecision(0) << b.tokens_per_s_at_max
      << " tokens/s): verl "
      << (verl_trainer == configs::VerlTrainer::kSftEngine ? "data.max_token_len_per_gpu=" : "ppo_max_token_len_per_gpu=")
      << b.max_tokens / b.cp << "\n";
}

// The best objective of a search's top list (its #1 may be a safer near-tie, not the fastest).
double BestObjective(const planner::SearchResult& r) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& c : r.top) best = std::min(best, c.objective);
  return best;
}

// --allocator both: the same search under expandable segments. It answers only when its best is
// better than the default's by more than the time model's tie tolerance (planner::
// kRankTolerance; within it the default, one knob fewer, is the safer plan); the other
// allocator's winner is kept for the answer either way.
void SearchTheOtherAllocator(TuneRun* t, const std::function<void(int64_t, int64_t)>& progress) {
  planner::SearchRequest e = t->req;
  e.options.memory.allocator = sim::AllocatorMode::kExpandableSegments;
  planner::SearchResult re = planner::SearchPlans(t->spec, t->cluster, e, progress);
  const bool expandable_wins =
      !re.top.empty() && (t->result.top.empty() ||
                          BestObjective(re) * (1.0 + planner::kRankTolerance) < BestObjective(t->result));
  if (expandable_wins) {
    t->other.allocator = sim::AllocatorMode::kDefault;
    t->other.found = !t->result.top.empty();
    if (t->other.found) t->other.winner = t->result.top.front();
    t->result = std::move(re);
    t->req = e;
  } else {
    t->other.allocator = sim::AllocatorMode::kExpandableSegments;
    t->other.found = !re.top.empty();
    if (t->other.found) t->other.winner = re.top.front();
  }
}

// Under the default allocator, the fastest layout winner the caching-allocator replay ran out of
// memory (CpVerdict::best_replay_out_of_memory) that is faster than #1 (or the only plan), judged
// again with expandable segments: when it fits there, it lost only to fragmentation.
TuneRun::Fragmentation LostToFragmentation(const TuneRun& t) {
  TuneRun::Fragmentation f;
  if (t.req.objective == planner::Objective::kMemory) return f;
  const planner::CpVerdict* best = nullptr;
  for (const auto& v : t.result.cp_verdicts) {
    if (!v.best_replay_out_of_memory || v.best_step_time_s <= 0) continue;
    if (!t.result.top.empty() && v.best_step_time_s >= t.result.top.front().step_time_s) continue;
    if (best == nullptr || v.best_step_time_s < best->best_step_time_s) best = &v;
  }
  if (best == nullptr) return f;
  sim::MemoryOptions o = t.req.options.memory;
  o.allocator = sim::AllocatorMode::kExpandableSegments;
  const sim::MemoryReport m = sim::EstimateMemory(t.spec, t.cluster, best->best_plan, o);
  if (!m.fits) return f;
  f.found = true;
  f.key = best->best_key;
  f.flags = planner::PlanAsFlags(best->best_plan);
  f.step_time_s = best->best_step_time_s;
  f.default_required = best->best_replay_required;
  f.expandable_required = m.required;
  f.capacity = m.capacity;
  return f;
}

// The search (with a progress bar on a terminal), then --measure, --search-nodes, --out, --plot
// and --export on its result.
TuneRun RunTuneSearch(const TuneArgs& a, std::ostream& err) {
  TuneRun t;
  t.cluster = profiles::LoadCluster(a.cluster);
  configs::ImportContext world;
  world.world_size = t.cluster.world_size();
  world.gpus_per_node = t.cluster.gpus_per_node;
  JobModel jm = ResolveJobModel(a.model, a.plan, world, &t.warnings);
  t.spec = jm.spec;
  t.model_arg = jm.arg;
  t.model_from = jm.from;
  t.req = BuildRequest(a, t.spec, t.cluster, &t.warnings, &t.seq_len_note, &t.from);
  configs::ExportFormat format{};
  if (!a.export_format.empty()) format = configs::ParseExportFormat(a.export_format, "--export");
  bool bar = !a.json && ::isatty(2);
  auto start = std::chrono::steady_clock::now();
  auto progress = [&](int64_t done, int64_t total) {
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!bar || el < 1.0) return;
    int width = 30, filled = static_cast<int>(width * done / std::max<int64_t>(1, total));
    err << "\r[" << std::string(static_cast<size_t>(filled), '#') << std::string(static_cast<size_t>(width - filled), ' ')
        << "] " << done << "/" << total << " plans" << (done == total ? "\n" : "") << std::flush;
  };
  t.measure = MeasureOptionsOf(a);
  t.measure.model_arg = t.model_arg;
  if (!a.jobs.empty()) {
    t.req.jobs = IntegerFlag("--jobs", a.jobs);
    if (t.req.jobs < 1 || t.req.jobs > 1024) {
      throw InputError("--jobs: expected a number of threads from 1 to 1024, got " + a.jobs);
    }
  }
  if (!a.plot.empty()) sim::CheckPlotName(a.plot, "--plot");
  if (a.allocator == "both") {
    t.both_allocators = true;
  } else if (a.allocator == "default" || a.allocator == "expandable_segments") {
    t.req.options.memory.allocator = sim::ParseAllocatorMode(a.allocator, "--allocator");
  } else {
    throw InputError("--allocator: expected default, expandable_segments or both, got \"" +
                     model::EscapeControls(a.allocator) + "\"");
  }
  t.result = planner::SearchPlans(t.spec, t.cluster, t.req, progress);
  if (t.both_allocators) SearchTheOtherAllocator(&t, progress);
  if (!t.both_allocators && t.req.options.memory.allocator == sim::AllocatorMode::kDefault) {
    t.fragmentation = LostToFragmentation(t);
  }
  const planner::SearchResult& r = t.result;
  for (const planner::Candidate& c : r.top) {
    t.pinned_per_host.push_back(PinnedActivationsPerHost(t.spec, t.cluster, t.req.options.memory, c.plan));
  }
  if (t.measure.plans > 0 && !r.top.empty()) t.measured = MeasureTopPlans(t.spec, t.cluster, t.req, r, t.measure);
  if (a.search_nodes) t.nodes = SearchNodes(t.spec, t.cluster, t.req, a.min_tokens_per_s);
  if (!a.out.empty() && !r.top.empty()) {
    sim::WriteFileAtomically(a.out, model::PlanToJson(r.top.front().plan).dump(2) + "\n");
    WriteLine(err, "wrote ", a.out);
  }
  if (!a.plot.empty()) {
    std::string title = "shardtune tune: " + t.spec.name + " on " + t.cluster.name;
    sim::WritePlotDocument(a.plot, "--plot", planner::ParetoPlotSvg(r, title), title);
    WriteLine(err, "wrote ", a.plot);
  }
  if (!a.export_format.empty() && !r.top.empty()) {
    const model::Plan& best = r.top.front().plan;
    configs::ExportContext ctx = configs::MakeExportContext(t.spec, t.cluster, best);
    ctx.verl_prompt_length = t.from.prompt_length;  // kept from a verl config tuned
    ctx.verl_response_length = t.from.response_length;
    ctx.verl_rollout_n = t.from.rollout_n;
    ctx.verl_trainer = t.from.verl_trainer;
    t.exported = configs::ExportPlan(best, ctx, format);
    if (t.req.options.memory.allocator == sim::AllocatorMode::kExpandableSegments) {
      t.exported.notes.push_back(
          "the plan was judged with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: set it in the job's "
          "environment (the launcher's, or the Ray runtime_env env_vars for verl and ROLL)");
    }
  }
  t.budget = WinnerTokenBudget(t);
  t.features = !r.top.empty() && sim::UsesFeatures(r.top.front().plan);
  if (t.features) {
    const model::Plan& best = r.top.front().plan;
    t.best_memory = sim::EstimateMemory(t.spec, t.cluster, best, t.req.options.memory);
    t.savings = sim::CompareWithFullFinetune(t.spec, t.cluster, best, t.req.options.memory, t.best_memory);
  }
  return t;
}

// How the plans were judged: the allocator mode and, with --allocator both, that both were.
std::string AllocatorLine(const TuneRun& t) {
  std::string line = t.req.options.memory.allocator == sim::AllocatorMode::kDefault
                         ? "default (PyTorch's caching allocator, its blocks and segments replayed)"
                         : "expandable_segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)";
  if (t.both_allocators) line += "; both were searched and this one answers (--allocator both)";
  return line;
}

std::string StepVs(double step_s, const TuneRun& t) {
  if (t.result.top.empty()) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, ", %+.1f%% vs #1", 100.0 * (step_s / t.result.top.front().step_time_s - 1.0));
  return buf;
}

void PrintAllocatorNotes(const TuneRun& t, std::ostream& out) {
  if (t.both_allocators) {
    out << "\nThe other allocator (" << sim::ToString(t.other.allocator) << ")\n  ";
    if (!t.other.found) {
      out << "no plan fits under it\n";
    } else {
      const planner::Candidate& w = t.other.winner;
      out << "best: " << std::fixed << std::setprecision(0) << w.tokens_per_s << " tokens/s, step "
          << std::setprecision(3) << w.step_time_s << " s" << StepVs(w.step_time_s, t) << ", needs "
          << FormatBytes(w.required) << " of " << FormatBytes(w.capacity) << "\n     " << w.key << "\n";
    }
  }
  const TuneRun::Fragmentation& f = t.fragmentation;
  if (!f.found) return;
  out << "\nLost only to the caching allocator's fragmentation\n  " << f.key << "\n     step " << std::fixed
      << std::setprecision(3) << f.step_time_s << " s" << StepVs(f.step_time_s, t) << ": the default allocator's replay "
      << "needs " << FormatBytes(f.default_required) << " of " << FormatBytes(f.capacity)
      << " (its cached blocks), expandable segments " << FormatBytes(f.expandable_required)
      << ", which fits.\n     With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the job's environment "
      << "it runs; tune --allocator expandable_segments (or both) ranks it.\n     flags: " << f.flags << "\n";
}

void PrintTune(const TuneArgs& a, const TuneRun& t, std::ostream& out, std::ostream& err) {
  for (const auto& w : t.warnings) WriteLine(err, "warning: ", w);
  std::ostringstream notes;
  PrintAllocatorNotes(t, notes);
  PrintTable(a, t.spec, t.cluster, t.req, t.result, t.pinned_per_host, t.seq_len_note, t.model_from,
             AllocatorLine(t), notes.str(), out);
  if (!t.result.top.empty()) {
    PrintTokenBudget(t.budget, t.result.top.front().step_time_s, t.from.verl_trainer, out);
  }
  if (t.features) PrintFeatureSavings(t.savings, t.best_memory, out);  // for the #1 plan
  if (!t.nodes.empty()) out << "\nFewest nodes (same global batch)\n";
  for (const auto& n : t.nodes) {
    out << "  " << n.nodes << " node(s): "
        << (!n.searched ? std::string("global batch does not divide over these GPUs")
            : !n.fits  ? std::string("no plan fits")
                       : std::to_string(static_cast<long long>(n.tokens_per_s)) + " tokens/s with " + n.key)
        << "\n";
  }
  if (t.measure.plans > 0) {
    for (const auto& w : t.measured.warnings) WriteLine(err, "warning: ", w);
    PrintMeasureResult(t.measured, out);
  }
  if (!t.exported.text.empty()) out << "\nThe winner as " << a.export_format << " config:\n" << t.exported.text;
  for (const auto& n : t.exported.notes) err << "note: " << n << "\n";
}

// "shardtune.tune": the request, the search's keys (planner/search_json.h), then what the flags
// added beside the search.
nlohmann::ordered_json TuneJson(const TuneArgs& a, const TuneRun& t) {
  nlohmann::ordered_json j;
  j["schema"] = "shardtune.tune";
  j["schema_version"] = 1;
  j["model"] = {{"name", t.spec.name}, {"parameters", model::ParameterCount(t.spec)}};
  if (!t.model_from.empty()) j["model"]["named_in"] = t.model_from;
  j["cluster"] = {{"name", t.cluster.name}, {"world_size", t.cluster.world_size()}};
  j["global_batch"] = t.req.global_batch;
  j["seq_len"] = t.req.seq_len;
  j["seq_len_source"] = t.seq_len_note;
  j["objective"] = a.objective;
  const char* allocator = sim::ToString(t.req.options.memory.allocator);
  j["allocator"] = allocator;
  j["allocators_searched"] = t.both_allocators ? "both" : allocator;
  planner::AppendSearchResultJson(t.result, &j);
  // Beside each listed plan with activation offload: its pinned host bytes per host.
  for (size_t i = 0; i < t.pinned_per_host.size() && i < j["top"].size(); ++i) {
    if (t.pinned_per_host[i].count() > 0) {
      j["top"][i]["activation_offload_pinned_bytes_per_host"] = t.pinned_per_host[i].count();
    }
  }
  if (t.both_allocators) {
    nlohmann::ordered_json o = {{"allocator", sim::ToString(t.other.allocator)}, {"found", t.other.found}};
    if (t.other.found) {
      o["key"] = t.other.winner.key;
      o["step_time_s"] = t.other.winner.step_time_s;
      o["tokens_per_s"] = t.other.winner.tokens_per_s;
      o["required_bytes"] = t.other.winner.required.count();
    }
    j["other_allocator"] = o;
  }
  if (t.fragmentation.found) {
    const TuneRun::Fragmentation& f = t.fragmentation;
    j["lost_to_fragmentation"] = {{"key", f.key},
                                  {"flags", f.flags},
                                  {"step_time_s", f.step_time_s},
                                  {"default_required_bytes", f.default_required.count()},
                                  {"expandable_segments_required_bytes", f.expandable_required.count()},
                                  {"capacity_bytes", f.capacity.count()}};
  }
  // The shard group as resolved on this cluster, not "0: the default" (issue #49 item 8), as
  // estimate's and simulate's --json give it.
  auto resolve = [&](const std::vector<planner::Candidate>& list, nlohmann::ordered_json& arr) {
    for (size_t i = 0; i < list.size() && i < arr.size(); ++i) {
      arr[i]["plan"]["shard_group_size"] =
          list[i].plan.ResolvedShardGroup(t.cluster.world_size(), t.cluster.gpus_per_node);
    }
  };
  resolve(t.result.top, j["top"]);
  resolve(t.result.pareto, j["pareto"]);
  if (t.features) j["savings_vs_full_finetune"] = sim::FeatureSavingsToJson(t.savings);
  if (t.budget.evaluated) {
    j["token_budget"] = {{"row_tokens", t.budget.row_tokens},
                         {"max_tokens", t.budget.max_tokens},
                         {"required_bytes_at_max", t.budget.required_at_max.count()},
                         {"micro_batches_at_max", t.budget.rows_at_max},
                         {"step_time_s_at_max", t.budget.step_s_at_max},
                         {"tokens_per_s_at_max", t.budget.tokens_per_s_at_max},
                         {"verl_ppo_max_token_len_per_gpu", t.budget.max_tokens / t.budget.cp}};
  }
  j["advice_if_none"] = t.result.advice_if_none;
  j["no_plan_reason"] = t.result.no_plan_reason;
  if (a.search_nodes) {
    nlohmann::ordered_json ns = nlohmann::ordered_json::array();
    for (const auto& n : t.nodes) {
      ns.push_back({{"nodes", n.nodes}, {"searched", n.searched}, {"fits", n.fits},
                    {"tokens_per_s", n.tokens_per_s}, {"key", n.key}});
    }
    j["node_search"] = ns;
  }
  if (!a.export_format.empty()) {
    j["export"] = {{"format", a.export_format}, {"text", t.exported.text}, {"notes", t.exported.notes}};
  }
  if (t.measure.plans > 0) j["measured"] = MeasureResultJson(t.measured);
  j["warnings"] = t.warnings;
  return j;
}

}  // namespace

int RunTune(const TuneArgs& a, std::ostream& out, std::ostream& err) {
  TuneRun t = RunTuneSearch(a, err);
  if (!a.json) {
    PrintTune(a, t, out, err);
  } else {
    out << TuneJson(a, t).dump(2) << "\n";
  }
  if (!t.result.top.empty()) return 0;
  // The search answered, and its answer is that nothing fits: a failure for scripts.
  if (!a.out.empty()) WriteLine(err, "note: ", "--out " + a.out + " not written: no plan fits");
  return kExitNoPlan;
}

}  // namespace shardtune::cli
