// `shardtune run`: flags -> exec::RunOptions, validation, launcher or one rank, progress lines.
// No Torch headers here: the executor's entry points are plain C++.
#include "cli/run_cmd.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <sstream>
#include <vector>

#include "cli/format.h"
#include "cli/job_args.h"
#include "cli/exec_forward.h"
#include "cli/run_preflight.h"
#include "executor/train/checkpoint.h"
#include "executor/errors.h"
#include "executor/train/launcher.h"
#include "executor/rank_env.h"
#include "executor/train/run.h"
#include "model/errors.h"
#include "model/packing.h"
#include "model/presets.h"
#include "planner/configs/import.h"

extern char** environ;

namespace shardtune::cli {
namespace {


// Test-only hook of the watchdog's tests: SHARDTUNE_TEST_STALL="RANK:SECONDS:PHASE" makes rank
// RANK sleep SECONDS when it enters PHASE (a PhaseName, e.g. "steady step"). Malformed: ignored.
void ApplyTestStall(exec::RunOptions* o) {
  const char* v = std::getenv("SHARDTUNE_TEST_STALL");
  if (v == nullptr) return;
  std::string s = v;
  size_t a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
  if (b == std::string::npos) return;
  try {
    o->test_stall_rank = std::stoi(s.substr(0, a));
    o->test_stall_s = std::stod(s.substr(a + 1, b - a - 1));
    o->test_stall_phase = s.substr(b + 1);
  } catch (const std::exception&) {
    o->test_stall_phase.clear();
  }
}

// --global-batch fixes grad-accum = global / (micro-batch x data-parallel ranks). A packed plan
// (rows of a token budget) takes it as the sequences per step (a --from config's own when not
// given); its grad_accum becomes the rows a rank needs when every sequence is the longest (the
// most verl's rule makes, model/packing.h), which the estimate of the run judges.
void ApplyGlobalBatch(const RunArgs& a, int dp, const FromExtras& extras, model::Plan* plan,
                      int64_t* sequences_per_step) {
  int64_t gb = a.plan.global_batch;
  if (gb <= 0) {
    if (FlagGiven(a.plan, "--global-batch")) {
      throw InputError("--global-batch: expected an integer >= 1, got " + std::to_string(gb));
    }
    if (plan->packed_seq_len <= 0) return;
    gb = extras.sequences_per_step;
    if (gb <= 0) {
      throw InputError("--global-batch: packed rows of " + std::to_string(plan->seq_len) +
                       " tokens: expected the sequences per optimizer step, got none");
    }
  }
  if (plan->packed_seq_len > 0) {
    if (gb % dp != 0) {
      throw InputError("--global-batch: expected a multiple of the " + std::to_string(dp) +
                       " data-parallel ranks (each takes an equal share of the sequences), got " +
                       std::to_string(gb));
    }
    const int64_t per_rank = gb / dp, longest = plan->packed_seq_len;
    *sequences_per_step = gb;
    plan->grad_accum = static_cast<int>(model::PackedRowsAtLongest(per_rank, longest, plan->seq_len));
    return;
  }
  int64_t per = static_cast<int64_t>(plan->micro_batch) * dp;
  std::string shape =
      std::to_string(plan->micro_batch) + " x " + std::to_string(dp) + " = " + std::to_string(per);
  if (plan->micro_batch < 1 || gb % per != 0) {
    throw InputError("--global-batch: expected a multiple of micro-batch x data-parallel ranks = " +
                     shape + ", got " + std::to_string(gb));
  }
  int accum = static_cast<int>(gb / per);
  if (FlagGiven(a.plan, "--grad-accum") && plan->grad_accum != accum) {
    throw InputError("--global-batch: " + std::to_string(gb) + " sequences = " + shape + " x " +
                     std::to_string(accum) + " micro-batches, but --grad-accum is " +
                     std::to_string(plan->grad_accum));
  }
  plan->grad_accum = accum;
}

exec::RunOptions MakeOptions(const RunArgs& a, int world, int local_world, std::ostream* warn) {
  exec::RunOptions o = a.options;
  {
    configs::ImportContext w;
    w.world_size = o.emulate_world > 0 ? o.emulate_world : world;
    w.gpus_per_node = o.emulate_world > 0 ? 0 : local_world;
    w.world_flag = o.emulate_world > 0 ? "--emulate-world" : "--nproc";
    std::vector<std::string> model_warnings;
    JobModel jm = ResolveJobModel(a.model, a.plan, w, &model_warnings);
    o.spec = jm.spec;
    if (warn != nullptr) {
      for (const std::string& m : model_warnings) *warn << "warning: " << m << "\n";
      if (!jm.from.empty()) *warn << "note: model " << o.spec.name << ", " << jm.from << "\n";
    }
  }
  // --from: the trainer config is read against this run's world (the emulated one with
  // --emulate-world) and its ranks per node, as estimate reads it against --cluster.
  configs::ImportContext from =
      o.emulate_world > 0
          ? configs::MakeImportContext(o.spec, o.emulate_world, 0, "--emulate-world")
          : configs::MakeImportContext(o.spec, world, local_world, "--nproc");
  std::vector<std::string> warnings;
  std::string seq_from;
  FromExtras extras;
  o.plan = exec::AsExecuted(BuildPlan(a.plan, &from, &warnings, &seq_from, &extras));
  if (extras.value_head) {
    throw InputError(PlanSource(a.plan) +
                     ": --from-worker critic: expected a causal LM worker (the executor trains "
                     "LM heads), got verl's critic with a value head; estimate and simulate it");
  }
  ApplyImages(a.plan, o.spec, &o.plan, &warnings);
  ApplyDefaultSeqLen(o.spec.max_seq_len, seq_from, &o.plan);
  // Beyond the trained context: allowed up to the same limit as estimate, simulate and tune
  // (ModelSpec::SeqLenLimit: rotary positions extend, a learned table does not), with their warning.
  if (o.plan.seq_len > o.spec.max_seq_len && o.plan.seq_len <= o.spec.SeqLenLimit()) {
    warnings.push_back(BeyondTrainedContext(o.spec, o.plan.seq_len));
  }
  if (warn != nullptr) {
    for (const std::string& w : warnings) *warn << "warning: " << w << "\n";
  }
  if (!a.plan.plan_file.empty()) o.plan_name = a.plan.plan_file;
  ApplyGlobalBatch(a, o.plan.DataParallel(o.emulate_world > 0 ? o.emulate_world : world), extras,
                   &o.plan, &o.sequences_per_step);
  o.lengths = model::SequenceLengths::Parse(
      a.lengths, "--lengths", o.plan.AttentionSeqLen(o.plan.ResolvedSeqLen(o.spec.max_seq_len)));
  o.steps = a.steps;
  o.lr_schedule = exec::ParseLrSchedule(a.lr_schedule, "--lr-schedule");
  o.trace = !a.no_trace;
  o.checkpoints = !a.no_checkpoints;
  if (a.on_nonfinite == "skip") {
    o.on_nonfinite = exec::OnNonFinite::kSkip;
  }
  o.device = a.device == "auto" ? (exec::CudaRunsAvailable() ? "cuda" : "cpu") : a.device;
  ApplyTestStall(&o);
  return o;
}

void PrintStep(const exec::StepLog& s, std::ostream& out) {
  std::ostringstream line;
  line << "step " << s.step << "/" << s.steps << "  loss " << std::fixed << std::setprecision(4)
       << s.loss << "  lr " << std::scientific << std::setprecision(2) << s.lr << std::fixed
       << "  grad_norm " << std::setprecision(3) << s.grad_norm << "  " << std::setprecision(0)
       << s.tokens_per_s << " tokens/s  " << std::setprecision(3) << s.time_s << " s  peak "
       << FormatBytes(Bytes::Of(s.tracked_peak_bytes));
  out << line.str() << std::endl;
}

}  // namespace

void AddRunCommand(CLI::App* app, RunArgs* a) {
  CLI::App* run = app->add_subcommand("run", kRunCommandHelp);
  run->add_option("--model", a->model,
                  "Preset, shardtune.model JSON or HF config.json (default tiny-llama)");
  run->add_option("--steps", a->steps, "Optimizer steps to reach (a resumed run continues)");
  run->add_option("--out", a->options.out_dir,
                  "Output folder: measurements.json, trace.json, checkpoints/");
  run->add_option("--nproc", a->nproc, "Local ranks to launch (default 1)");
  run->add_option("--seed", a->options.seed, "Seed of the initialization and synthetic data");
  run->add_option("--data", a->options.data_path,
                  "Text file read as byte-level tokens (default: synthetic)");
  run->add_option("--lengths", a->lengths,
                  "uniform:MIN-MAX: sequence lengths drawn evenly in [MIN, MAX], padded (labels "
                  "ignored) or packed whole into --max-tokens-per-micro-batch rows (default: every "
                  "sequence --seq-len long)");
  run->add_option("--device", a->device,
                  "auto|cpu|cuda: where the ranks run (auto: cuda when built with a CUDA LibTorch "
                  "and a GPU is visible; each rank uses GPU LOCAL_RANK and NCCL)");
  run->add_option("--emulate-world", a->options.emulate_world,
                  "Run rank 0 of a world of N in this one process (Emulated collectives)");
  run->add_option("--lr", a->options.lr, "Peak learning rate (default 1e-3)");
  run->add_option("--lr-schedule", a->lr_schedule, "cosine|wsd|constant (after linear warmup)");
  run->add_option("--warmup-steps", a->options.warmup_steps, "Warmup steps (default steps / 10)");
  run->add_option("--weight-decay", a->options.weight_decay, "AdamW weight decay (default 0.01)");
  run->add_option("--max-grad-norm", a->options.max_grad_norm,
                  "Global-norm clipping; 0 disables (default 1)");
  run->add_option("--checkpoint-every", a->options.checkpoint_every,
                  "Steps between checkpoints (0: at the end)");
  run->add_option("--threads", a->options.threads,
                  "Intra-op threads per rank (default cores / ranks)");
  run->add_option("--timeout", a->options.timeout_s,
                  "Rendezvous and collective timeout in seconds (default 60)");
  run->add_option("--watchdog-timeout", a->options.watchdog_timeout_s,
                  "A rank with no progress for this many seconds names its phase and exits "
                  "with code 3 (default 600; 0: no watchdog)");
  run->add_flag("--export-full-state-dict", a->options.export_full_state_dict,
                "After the last step, write OUT/model.safetensors: the full fp32 parameters "
                "gathered to rank 0 under Hugging Face names");
  run->add_flag("--no-trace", a->no_trace, "Do not write trace.json");
  run->add_flag("--no-preflight", a->no_preflight,
                "Start the ranks without first checking that every phase of the plan fits this "
                "machine's available memory (CPU: RAM shared by the ranks; CUDA: each GPU's free "
                "memory) and that its checkpoints fit the free space under --out");
  run->add_flag("--torch-profile", a->options.torch_profile,
                "Rank 0 records the steps after the first with the PyTorch profiler (CPU and "
                "CUDA activities) and writes OUT/torch_trace.json, the Chrome trace "
                "`shardtune calibrate --trace` reads");
  run->add_option("--keep-checkpoints", a->options.keep_checkpoints,
                  "Keep only the newest K complete checkpoints; an older one is deleted after "
                  "the new one is complete (HF save_total_limit, torchtitan keep_latest_k, verl "
                  "max_ckpt_to_keep; default 0: keep all)");
  run->add_flag("--no-checkpoints", a->no_checkpoints,
                "Write no checkpoints (benchmark runs; nothing to resume from)");
  run->add_option("--on-nonfinite", a->on_nonfinite,
                  "stop|skip: a step whose loss or gradient norm is NaN/inf stops the run "
                  "(default; the last checkpoint is kept) or has its update skipped")
      ->check(CLI::IsMember({"stop", "skip"}));
  AddPlanFlags(run, &a->plan);
  AddFromFlags(run, &a->plan);
}

int LaunchThisProgramAsRanks(int nproc, std::ostream& err) {
  exec::LaunchOptions lo;
  lo.nproc = nproc;
  lo.argv = OwnArgv();
  lo.environment = EnvironmentList();
  exec::LaunchResult r = exec::LaunchLocalRanks(lo);
  for (int port : r.taken_ports) {
    WriteLine(err, "note: ", "MASTER_PORT " + std::to_string(port) +
                                 " was taken before rank 0 listened on it (another process bound it after the "
                                 "launcher found it free)");
  }
  if (r.exit_code == 0) return 0;
  WriteLine(err, "error: ", r.message);
  return r.exit_code == 1 || r.exit_code == 70 ? r.exit_code : 3;
}

int RunRun(const RunArgs& a, std::ostream& out, std::ostream& err) {
  exec::RankEnv env = exec::RankEnvFromVariables(EnvironmentMap());
  if (!env.launched && a.nproc < 1) {
    throw InputError("--nproc: expected an integer >= 1, got " + std::to_string(a.nproc));
  }
  int world = env.launched ? env.world_size : a.nproc;
  int local_world = env.launched ? env.local_world_size : a.nproc;
  // Warnings from --from once, from the launching process (each rank re-reads the file quietly).
  exec::RunOptions o = MakeOptions(a, world, local_world, env.launched ? nullptr : &err);
  exec::ValidateRun(o, world);
  if (o.plan.attention == model::Attention::kSdpa && !exec::SdpaRunsAvailable()) {
    // What runs is what the measurements say: validate and calibrate then compare the eager
    // path's memory and time with their predictions, not SDPA's.
    if (!env.launched) {
      WriteLine(err, "note: ",
                "--attention sdpa: this LibTorch has no scaled_dot_product_attention (it is older "
                "than 2.0); the run uses eager attention and records plan attention eager");
    }
    o.plan.attention = model::Attention::kEager;
  }
  const bool host_optimizer = o.device == "cpu" || o.plan.offload != model::Offload::kNone;
  if (o.plan.optimizer == model::Optimizer::kAdamW && host_optimizer) {
    // AdamW on host shards is one pass per element (executor/kernels/host_adamw.h): the fused
    // update's traffic, whatever --optimizer-impl asked, and the measurements record it so
    // (validate and calibrate then compare it with the fused update's time and memory).
    o.plan.optimizer_impl = model::OptimizerImpl::kFused;
  } else if (o.plan.optimizer_impl == model::OptimizerImpl::kFused && o.plan.optimizer == model::Optimizer::kAdamW &&
             !exec::FusedAdamWRunsAvailable(o.device)) {
    // As for attention: the measurements record the optimizer that ran.
    if (!env.launched) {
      WriteLine(err, "note: ",
                "--optimizer-impl fused: run's fused AdamW on the GPU (CUDA, LibTorch >= 2.1) "
                "is not enabled until its GPU equivalence test passes; this run updates the "
                "shards op by op and records foreach");
    }
    o.plan.optimizer_impl = model::OptimizerImpl::kForeach;
  }
  if (!env.launched) {
    if (a.no_preflight) {
      WriteLine(err, "warning: ",
                "--no-preflight: the plan is not checked against this machine's memory and disk "
                "before the ranks start");
    } else {
      PreflightRequest q;
      q.spec = o.spec;
      q.plan = o.plan;
      q.world = o.emulate_world > 0 ? o.emulate_world : world;
      // The trainer cuts rows by verl's rule, whose largest can exceed the budget (job_args.h).
      std::string raised = RaisePackedRowToLargest(o.sequences_per_step, q.world, &q.plan);
      if (!raised.empty()) WriteLine(err, "note: pre-flight: ", raised);
      q.local_processes = o.emulate_world > 0 ? 1 : local_world;
      q.cuda = o.device == "cuda";
      q.checkpoints = o.checkpoints;
      q.steps = o.steps;
      q.checkpoint_every = o.checkpoint_every;
      q.keep_checkpoints = o.keep_checkpoints;
      q.out_dir = o.out_dir;
      auto existing = exec::ListCheckpoints((std::filesystem::path(o.out_dir) / "checkpoints").string());
      q.resume_step = existing.empty() ? 0 : existing.front().first;
      PreflightResult pf = CheckRunFitsThisMachine(q);
      for (const std::string& w : pf.warnings) WriteLine(err, "warning: ", w);
      if (!pf.error.empty()) throw InputError(pf.error);
      for (const std::string& n : pf.notes) WriteLine(err, "note: ", n);
    }
  }
  if (!env.launched && a.nproc > 1) return LaunchThisProgramAsRanks(a.nproc, err);
  exec::RunCallbacks cb;
  cb.on_step = [&out](const exec::StepLog& s) { PrintStep(s, out); };
  cb.on_message = [&err](const std::string& m) { WriteLine(err, "", m); };
  // From the watchdog's thread while this rank is stuck: nothing to unwind, so leave at once
  // with the backend exit code (the launcher then stops the other ranks).
  cb.on_stall = [&err](const std::string& m) {
    WriteLine(err, "error: ", m);
    std::_Exit(3);
  };
  exec::RunSummary s = exec::RunRank(o, env, cb);
  if (!env.launched || env.rank == 0) {
    if (!s.measurements_path.empty()) out << "wrote " << s.measurements_path << "\n";
    if (!s.trace_path.empty()) out << "wrote " << s.trace_path << "\n";
    if (!s.torch_trace_path.empty()) out << "wrote " << s.torch_trace_path << "\n";
    if (!s.state_dict_path.empty()) out << "wrote " << s.state_dict_path << "\n";
  }
  return 0;
}

}  // namespace shardtune::cli
