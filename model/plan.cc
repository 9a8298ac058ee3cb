// Plan enums' names (one table per enum, shared by ToString, the CLI and plan JSON), the plan's
// cross-field checks against a world and a model, and the CLI's compact --wrap and
// --checkpointing syntaxes.
#include "model/plan.h"

#include <algorithm>
#include <cstdint>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

using Names = std::vector<std::string>;

// Overloads picked by a null pointer of the enum type; order = declaration order in plan.h.
const Names& Table(ShardingStrategy*) {
  static const Names v = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard",
                          "hybrid_shard_zero2"};
  return v;
}
const Names& Table(DType*) { static const Names v = {"fp32", "bf16", "fp16"}; return v; }
const Names& Table(Checkpointing*) {
  static const Names v = {"none", "full", "selective", "every", "first", "blocks"};
  return v;
}
const Names& Table(Offload*) { static const Names v = {"none", "optimizer", "all"}; return v; }
const Names& Table(BackwardPrefetch*) { static const Names v = {"pre", "post", "none"}; return v; }
const Names& Table(ActivationOffload*) { static const Names v = {"none", "verl_async"}; return v; }
const Names& Table(InStepReference*) {
  static const Names v = {"none", "fsdp2_root", "fsdp1_blocks", "adapters_off"};
  return v;
}
const Names& Table(Optimizer*) { static const Names v = {"adamw", "sgd", "adafactor"}; return v; }
const Names& Table(OptimizerImpl*) {
  static const Names v = {"foreach", "fused", "for_loop"};
  return v;
}
const Names& Table(Attention*) { static const Names v = {"sdpa", "eager"}; return v; }
const Names& Table(SdpaBackend*) {
  static const Names v = {"auto", "flash", "cudnn", "efficient", "math"};
  return v;
}
const Names& Table(LossKernel*) { static const Names v = {"cross_entropy", "fused_linear", "verl_flash_ce", "verl_padded_ce", "verl_fused_torch", "verl_fused_triton", "trl_chunked_nll", "trl_logps"}; return v; }
const Names& Table(Modeling*) { static const Names v = {"hf", "torchtitan"}; return v; }
const Names& Table(CpFsdpMesh*) { static const Names v = {"dp_cp", "dp"}; return v; }
const Names& Table(Role*) { static const Names v = {"train", "infer"}; return v; }
const Names& Table(WrapPolicy::Kind*) {
  static const Names v = {"block", "every", "ranges", "size"};
  return v;
}

template <typename E>
const char* Name(E e) {
  const Names& names = EnumNames<E>();
  auto i = static_cast<size_t>(e);
  SHARDTUNE_CHECK(i < names.size()) << "enum value " << i << " has no name";
  return names[i].c_str();
}

// Collects "where:/key: expected ..., got ..." messages.
class ProblemList {
 public:
  explicit ProblemList(const std::string& where) : where_(where) {}
  void Expect(bool ok, const std::string& key, const std::string& expected, int64_t got) {
    if (!ok) Add(key, expected, std::to_string(got));
  }
  void Add(const std::string& key, const std::string& expected, const std::string& got) {
    out_.push_back(where_ + ":/" + key + ": expected " + expected + ", got " + got);
  }
  std::vector<std::string> Take() { return std::move(out_); }

 private:
  std::string where_;
  std::vector<std::string> out_;
};

std::string RangeText(const std::pair<int, int>& r) {
  return "[" + std::to_string(r.first) + ", " + std::to_string(r.second) + "]";
}

void CheckRanges(const std::vector<std::pair<int, int>>& ranges, int num_layers, ProblemList* p) {
  if (ranges.empty()) {
    p->Add("wrap/ranges", "at least one [first, last] block range", "none");
    return;
  }
  int next = 0;  // the block the next range must start at: contiguous, in order, from 0
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto& r = ranges[i];
    std::string key = "wrap/ranges/" + std::to_string(i);
    if (r.first != next || r.second < r.first || r.second >= num_layers) {
      p->Add(key,
             "a range [" + std::to_string(next) + ", last] with last in [" +
                 std::to_string(next) + ", " + std::to_string(num_layers - 1) +
                 "] (ranges cover blocks 0.." + std::to_string(num_layers - 1) +
                 " in order, without gaps or overlaps)",
             RangeText(r));
      return;
    }
    next = r.second + 1;
  }
  if (next != num_layers) {
    p->Add("wrap/ranges", "ranges ending at block " + std::to_string(num_layers - 1),
           "ranges ending at block " + std::to_string(next - 1));
  }
}

void CheckWrap(const WrapPolicy& w, int num_layers, ProblemList* p) {
  if (w.sub_block_units && w.kind != WrapPolicy::Kind::kBlock) {
    p->Add("wrap/sub_block_units", "a block wrap (sub-block units split each block)",
           WrapSpecToString(w));
  }
  switch (w.kind) {
    case WrapPolicy::Kind::kBlock: break;
    case WrapPolicy::Kind::kEveryK:
      p->Expect(w.every_k >= 1, "wrap/every_k", "integer >= 1", w.every_k);
      break;
    case WrapPolicy::Kind::kRanges: CheckRanges(w.ranges, num_layers, p); break;
    case WrapPolicy::Kind::kSize:
      p->Expect(w.min_num_params >= 1, "wrap/min_num_params", "integer >= 1", w.min_num_params);
      break;
  }
}

void CheckShardGroup(const Plan& plan, int world, int gpus_per_node, ProblemList* p) {
  world = plan.FsdpWorld(world);  // cp_fsdp_mesh dp: FSDP sees world / cp ranks
  int g = plan.shard_group_size;
  std::string strategy = ToString(plan.strategy);
  if (g < 0) {
    p->Expect(false, "shard_group_size", "integer >= 0 (0: the strategy's default)", g);
    return;
  }
  if (plan.strategy == ShardingStrategy::kNoShard) {
    p->Expect(g <= 1, "shard_group_size", "0 or 1 for no_shard (nothing is sharded)", g);
    return;
  }
  if (!plan.Hybrid()) {
    p->Expect(g == 0 || g == world, "shard_group_size",
              "0 or the world size " + std::to_string(world) + " for " + strategy +
                  " (use hybrid_shard to shard over fewer ranks)",
              g);
    return;
  }
  int resolved = plan.ResolvedShardGroup(world, gpus_per_node);
  // A hybrid shard group equal to the world is allowed: one replica, FULL_SHARD's layout.
  p->Expect(resolved >= 1 && resolved <= world && world % resolved == 0, "shard_group_size",
            "a divisor of the world size " + std::to_string(world) + " for " + strategy +
                " (shard groups tile the world)",
            resolved);
}

bool ParseCount(const std::string& s, int64_t* out) {
  if (s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  const std::optional<int64_t> v = ParseInt64(s);
  if (!v) return false;
  *out = *v;
  return true;
}

[[noreturn]] void BadSpec(const std::string& where, const std::string& expected,
                          const std::string& text, const std::string& hint) {
  throw InputError(where + ": expected " + expected + ", got \"" + text + "\"" +
                   DidYouMean(hint));
}

// "0-7,8-31" -> {{0, 7}, {8, 31}}; false on any syntax error.
bool ParseRanges(const std::string& s, std::vector<std::pair<int, int>>* out) {
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos
                                                                    : comma - start);
    size_t dash = item.find('-');
    int64_t a = 0, b = 0;
    if (dash == std::string::npos) {
      if (!ParseCount(item, &a)) return false;
      b = a;  // "5" is the one-block range [5, 5]
    } else if (!ParseCount(item.substr(0, dash), &a) || !ParseCount(item.substr(dash + 1), &b)) {
      return false;
    }
    if (a > INT32_MAX || b > INT32_MAX) return false;
    out->emplace_back(static_cast<int>(a), static_cast<int>(b));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

// "100M" -> 100'000'000: decimal suffixes K, M, B (as parameter counts are quoted).
bool ParseParamCount(std::string s, int64_t* out) {
  int64_t scale = 1;
  if (!s.empty()) {
    char c = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    if (c == 'K') scale = 1'000;
    if (c == 'M') scale = 1'000'000;
    if (c == 'B') scale = 1'000'000'000;
    if (scale > 1) s.pop_back();
  }
  int64_t n = 0;
  if (!ParseCount(s, &n) || n > INT64_MAX / scale) return false;
  *out = n * scale;
  return true;
}

}  // namespace

template <typename E>
const std::vector<std::string>& EnumNames() {
  return Table(static_cast<E*>(nullptr));
}

template <typename E>
E ParseEnum(const std::string& text, const std::string& where) {
  const Names& names = EnumNames<E>();
  auto it = std::find(names.begin(), names.end(), text);
  if (it == names.end()) {
    BadSpec(where, "one of " + Join(names, ", "), text, ClosestName(text, names));
  }
  return static_cast<E>(it - names.begin());
}

template const Names& EnumNames<ShardingStrategy>();
template const Names& EnumNames<DType>();
template const Names& EnumNames<Checkpointing>();
template const Names& EnumNames<Offload>();
template const Names& EnumNames<ActivationOffload>();
template const Names& EnumNames<InStepReference>();
template const Names& EnumNames<BackwardPrefetch>();
template const Names& EnumNames<Optimizer>();
template const Names& EnumNames<OptimizerImpl>();
template const Names& EnumNames<Attention>();
template const Names& EnumNames<SdpaBackend>();
template const Names& EnumNames<LossKernel>();
template const Names& EnumNames<Modeling>();
template const Names& EnumNames<CpFsdpMesh>();
template const Names& EnumNames<Role>();
template const Names& EnumNames<WrapPolicy::Kind>();
template ShardingStrategy ParseEnum<ShardingStrategy>(const std::string&, const std::string&);
template DType ParseEnum<DType>(const std::string&, const std::string&);
template Checkpointing ParseEnum<Checkpointing>(const std::string&, const std::string&);
template Offload ParseEnum<Offload>(const std::string&, const std::string&);
template ActivationOffload ParseEnum<ActivationOffload>(const std::string&, const std::string&);
template InStepReference ParseEnum<InStepReference>(const std::string&, const std::string&);
template BackwardPrefetch ParseEnum<BackwardPrefetch>(const std::string&, const std::string&);
template Optimizer ParseEnum<Optimizer>(const std::string&, const std::string&);
template OptimizerImpl ParseEnum<OptimizerImpl>(const std::string&, const std::string&);
template Attention ParseEnum<Attention>(const std::string&, const std::string&);
template SdpaBackend ParseEnum<SdpaBackend>(const std::string&, const std::string&);
template LossKernel ParseEnum<LossKernel>(const std::string&, const std::string&);
template Modeling ParseEnum<Modeling>(const std::string&, const std::string&);
template CpFsdpMesh ParseEnum<CpFsdpMesh>(const std::string&, const std::string&);
template Role ParseEnum<Role>(const std::string&, const std::string&);
template WrapPolicy::Kind ParseEnum<WrapPolicy::Kind>(const std::string&, const std::string&);

const char* ToString(ShardingStrategy s) { return Name(s); }
const char* ToString(DType d) { return Name(d); }
const char* ToString(Checkpointing c) { return Name(c); }
const char* ToString(Offload o) { return Name(o); }
const char* ToString(ActivationOffload a) { return Name(a); }
const char* ToString(InStepReference r) { return Name(r); }
const char* ToString(BackwardPrefetch b) { return Name(b); }
const char* ToString(Optimizer o) { return Name(o); }
const char* ToString(OptimizerImpl o) { return Name(o); }
const char* ToString(Attention a) { return Name(a); }
const char* ToString(SdpaBackend b) { return Name(b); }
const char* ToString(LossKernel k) { return Name(k); }
const char* ToString(Modeling m) { return Name(m); }
const char* ToString(CpFsdpMesh m) { return Name(m); }
const char* ToString(Role r) { return Name(r); }
const char* ToString(WrapPolicy::Kind k) { return Name(k); }

int64_t BytesPerElement(DType d) {
  switch (d) {
    case DType::kFp32: return 4;
    case DType::kBf16: return 2;
    case DType::kFp16: return 2;
  }
  SHARDTUNE_CHECK(false) << "unknown DType " << static_cast<int>(d);
  return 0;
}

bool StrategyReshardsAfterForward(ShardingStrategy s) {
  return s == ShardingStrategy::kFullShard || s == ShardingStrategy::kHybridShard;
}

int Plan::FsdpWorld(int world) const {
  return cp > 1 && cp_fsdp_mesh == CpFsdpMesh::kDp && world % cp == 0 ? world / cp : world;
}

int Plan::ResolvedShardGroup(int world, int gpus_per_node) const {
  if (strategy == ShardingStrategy::kNoShard) return 1;
  world = FsdpWorld(world);
  if (shard_group_size > 0) return shard_group_size;
  if (Hybrid() && gpus_per_node > 0) return std::min(gpus_per_node, world);
  return world;
}

std::vector<std::string> Plan::Problems(const std::string& where, int world, int gpus_per_node,
                                        int num_layers, int64_t max_seq_len) const {
  ProblemList p(where);
  p.Expect(world >= 1, "world", "integer >= 1 (ranks)", world);
  p.Expect(micro_batch >= 1, "micro_batch", "integer >= 1", micro_batch);
  p.Expect(grad_accum >= 1, "grad_accum", "integer >= 1", grad_accum);
  if (packed_seq_len > 0) {
    // A packed row may be longer than any sequence: positions restart per sequence, so the
    // model's limit bounds the longest packed sequence.
    p.Expect(seq_len >= 1, "seq_len", "integer >= 1 (the packed row's tokens)", seq_len);
    p.Expect(packed_seq_len <= max_seq_len, "packed_seq_len",
             "integer in [1, " + std::to_string(max_seq_len) +
                 "] (the model's sequence limit: the plan's longest packed sequence is too long for this model)",
             packed_seq_len);
  } else {
    p.Expect(seq_len >= 0 && seq_len <= max_seq_len, "seq_len",
             "integer in [1, " + std::to_string(max_seq_len) +
                 "] (the model's sequence limit; 0: its maximum; hint: --seq-len overrides a plan's)",
             seq_len);
  }
  p.Expect(cp >= 1 && (world < 1 || world % cp == 0), "cp",
           "an integer >= 1 dividing the world size " + std::to_string(world) +
               " (Ulysses groups tile the world)",
           cp);
  p.Expect(packed_seq_len >= 0 && (seq_len <= 0 || packed_seq_len <= seq_len), "packed_seq_len",
           "integer in [0, seq_len] (the longest packed sequence; 0: not packed)", packed_seq_len);
  if (cp >= 1 && seq_len > 0) {
    p.Expect(seq_len % cp == 0, "cp",
             "a divisor of seq_len " + std::to_string(seq_len) + " (each rank holds seq_len / cp tokens)",
             cp);
  }
  p.Expect(ep >= 1, "expert_parallel_degree", "integer >= 1 (1: no expert parallelism)", ep);
  if (ep > 1 && world >= 1 && cp >= 1 && world % cp == 0) {
    // torchtitan ParallelDims._validate: ep borrows its ranks from dp_shard x cp, so the FSDP
    // shard group holds whole EP groups.
    int shard = ResolvedShardGroup(world, gpus_per_node);
    p.Expect(shard >= 1 && shard % ep == 0, "expert_parallel_degree",
             "a divisor of the FSDP shard group " + std::to_string(shard) +
                 " (torchtitan takes the EP ranks from dp_shard x cp; --ep, --shard-group)",
             ep);
  }
  p.Expect(tiled_mlp_shards >= 1, "tiled_mlp_shards", "integer >= 1 (1: off)", tiled_mlp_shards);
  p.Expect(lora.rank >= 0, "lora/rank", "integer >= 0 (0: no LoRA)", lora.rank);
  if (lora.enabled() && lora.targets.empty()) {
    p.Add("lora/targets", "at least one projection name (e.g. q_proj, v_proj)", "none");
  }
  for (size_t i = 0; i < frozen_prefixes.size(); ++i) {
    if (frozen_prefixes[i].empty()) {
      p.Add("frozen_prefixes/" + std::to_string(i), "a non-empty module name prefix", "\"\"");
    }
  }
  if (loss_kernel == LossKernel::kFusedLinear || IsVerlFusedHead(loss_kernel) ||
      loss_kernel == LossKernel::kTrlChunkedNll) {
    for (const Conflict& c : FusedLossConflicts()) p.Add(c.key, c.expected, c.got);
  }
  p.Expect(response_len >= 0, "response_len", "integer >= 0", response_len);
  p.Expect(images >= 0 && images <= 100000, "images", "integer in [0, 100000] (per sequence)", images);
  {
    const int64_t width = packed_seq_len > 0 ? packed_seq_len : seq_len;
    const bool in_range = image_tokens >= (images > 0 ? images : 0) && (images > 0 || image_tokens == 0) &&
                          (width <= 0 || image_tokens <= width);
    p.Expect(in_range, "image_tokens",
             images > 0 ? "integer in [images = " + std::to_string(images) + ", " +
                              (width > 0 ? std::to_string(width) : std::string("seq_len")) +
                              "] (an image is at least one of the sequence's tokens)"
                        : std::string("0 without images"),
             image_tokens);
  }
  if (loss_kernel == LossKernel::kVerlPaddedCe) {
    const int64_t width = packed_seq_len > 0 ? packed_seq_len : seq_len;
    if (response_len < 1 || (width > 0 && response_len > width)) {
      p.Add("response_len",
            "the response positions of each padded sequence with loss_kernel verl_padded_ce, "
            "from 1 to its width " + (width > 0 ? std::to_string(width) : std::string("seq_len")),
            std::to_string(response_len));
    }
    if (cp > 1) {
      p.Add("cp", "1 with loss_kernel verl_padded_ce (verl's Ulysses path packs the tokens: "
                  "use_remove_padding)", std::to_string(cp));
    }
  }
  if (world >= 1 && cp >= 1 && world % cp == 0) CheckShardGroup(*this, world, gpus_per_node, &p);
  CheckWrap(wrap, num_layers, &p);
  p.Expect(checkpoint_every_k >= 1, "checkpoint_every_k", "integer >= 1", checkpoint_every_k);
  if (checkpointing == Checkpointing::kFirstK) {
    p.Expect(checkpoint_first_k >= 1 && (num_layers <= 0 || checkpoint_first_k <= num_layers), "checkpoint_first_k",
             num_layers > 0 ? "integer from 1 to the model's " + std::to_string(num_layers) + " blocks"
                            : std::string("integer >= 1"),
             checkpoint_first_k);
  }
  if (checkpointing == Checkpointing::kBlocks) {
    if (auto bad = BlockRunProblem(checkpoint_blocks, num_layers)) p.Add("checkpoint_blocks", bad->first, bad->second);
  }
  if (checkpoint_rest_selective && checkpointing != Checkpointing::kFirstK) {
    p.Add("checkpoint_rest", "\"none\" unless checkpointing is \"first\" (first:K+selective)",
          "\"selective\" with checkpointing \"" + CheckpointingSpecToString(*this) + "\"");
  }
  p.Expect(max_inflight_allgathers >= 1, "max_inflight_allgathers", "integer >= 1",
           max_inflight_allgathers);
  // verl offloads by FSDP layer (activation_offload.py get_layers: the fully_shard children), and
  // wraps every decoder layer (fsdp_utils.py apply_fsdp2): one unit per block.
  if (activation_offload_blocks != 0) {
    p.Expect(activation_offload == ActivationOffload::kVerlAsync && activation_offload_blocks >= 1 &&
                 (num_layers <= 0 || activation_offload_blocks < num_layers),
             "activation_offload_blocks",
             "with activation_offload verl_async, an integer from 1 to " +
                 (num_layers > 0 ? std::to_string(num_layers - 1) + " (the model's blocks less the last)"
                                 : std::string("the model's blocks less one")),
             activation_offload_blocks);
  }
  if (activation_offload != ActivationOffload::kNone && wrap.kind != WrapPolicy::Kind::kBlock) {
    p.Add("activation_offload", "none unless wrap is block (verl offloads one FSDP layer, a block, at a time)",
          std::string(ToString(activation_offload)) + " with wrap " + WrapSpecToString(wrap));
  }
  // TRL's reference forward runs inside a training step; without PEFT adapters there is nothing
  // to turn off (trl DPOTrainer: ref_model None and no PEFT model creates a copy).
  if (reference != InStepReference::kNone && !Trains()) {
    p.Add("reference", "none for role infer (a reference forward runs inside a training step)", ToString(reference));
  }
  if (reference == InStepReference::kAdaptersOff && !lora.enabled()) {
    p.Add("reference", "fsdp2_root or fsdp1_blocks without LoRA adapters to turn off (adapters_off needs lora)",
          ToString(reference));
  }
  return p.Take();
}

Plan Plan::ReferencePlan() const {
  SHARDTUNE_CHECK(reference != InStepReference::kNone) << "no reference forward in this plan";
  Plan r = *this;
  r.role = Role::kInfer;
  r.reference = InStepReference::kNone;
  r.activation_offload = ActivationOffload::kNone;
  r.checkpointing = Checkpointing::kNone;
  r.checkpoint_rest_selective = false;
  r.keep_logits = false;
  r.master_dtype = FrozenDtype();
  r.frozen_dtype = FrozenDtype();
  r.grad_accum = 1;
  if (reference == InStepReference::kAdaptersOff) return r;  // the policy's units, adapters included
  // A copy loaded from the model's path (trl DPOTrainer: create_model_from_path): no adapters, no
  // frozen prefixes (all of it is frozen).
  r.lora = LoraSpec{};
  r.frozen_prefixes.clear();
  r.reshard_after_forward = true;
  r.forward_prefetch = false;
  WrapPolicy w;
  if (reference == InStepReference::kFsdp2Root) {
    w.kind = WrapPolicy::Kind::kSize;  // no module reaches it: everything in the root's unit
    w.min_num_params = INT64_MAX;
  }
  r.wrap = w;
  return r;
}

std::vector<Plan::Conflict> Plan::FusedLossConflicts() const {
  std::vector<Conflict> out;
  const std::string kernel = ToString(loss_kernel);
  if (keep_logits) {
    out.push_back({"keep_logits", "false with loss_kernel " + kernel + " (it never holds the logits)", "true"});
  }
  // verl's fused heads run under no_grad too (compute_log_prob, the reference): forward returns
  // the log-probs. Liger's fused loss computes gradients in forward: a training head only.
  if (role == Role::kInfer && (loss_kernel == LossKernel::kFusedLinear || loss_kernel == LossKernel::kTrlChunkedNll)) {
    out.push_back({"loss_kernel", "cross_entropy for role infer (forward only returns the logits)", kernel});
  }
  // The fused heads multiply by the lm_head weight itself (Liger's and verl's take
  // self.lm_head.weight), so an adapter on lm_head would not be applied.
  for (size_t i = 0; i < lora.targets.size(); ++i) {
    if (lora.enabled() && lora.targets[i] == "lm_head") {
      out.push_back({"lora/targets/" + std::to_string(i),
                     "no lm_head adapter with loss_kernel " + kernel + " (use cross_entropy)",
                     "\"lm_head\""});
    }
  }
  return out;
}

WrapPolicy ParseWrapSpec(const std::string& text, const std::string& where) {
  const std::string expected = "block, every:K, ranges:A-B,C-D,... or size:N[K|M|B]";
  size_t colon = text.find(':');
  std::string kind = text.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : text.substr(colon + 1);
  WrapPolicy w;
  int64_t n = 0;
  if (kind == "block" && colon == std::string::npos) {
    w.kind = WrapPolicy::Kind::kBlock;
  } else if (kind == "every" && ParseCount(arg, &n) && n >= 1 && n <= INT32_MAX) {
    w.kind = WrapPolicy::Kind::kEveryK;
    w.every_k = static_cast<int>(n);
  } else if (kind == "ranges" && ParseRanges(arg, &w.ranges)) {
    w.kind = WrapPolicy::Kind::kRanges;
  } else if (kind == "size" && ParseParamCount(arg, &n) && n >= 1) {
    w.kind = WrapPolicy::Kind::kSize;
    w.min_num_params = n;
  } else {
    BadSpec(where, expected, text, ClosestName(kind, EnumNames<WrapPolicy::Kind>()));
  }
  return w;
}

std::string WrapSpecToString(const WrapPolicy& w) {
  switch (w.kind) {
    case WrapPolicy::Kind::kBlock: return "block";
    case WrapPolicy::Kind::kEveryK: return "every:" + std::to_string(w.every_k);
    case WrapPolicy::Kind::kRanges: {  // built in one string: the planner's keys call this often
      std::string out = "ranges:";
      for (size_t i = 0; i < w.ranges.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(w.ranges[i].first);
        out += '-';
        out += std::to_string(w.ranges[i].second);
      }
      return out;
    }
    case WrapPolicy::Kind::kSize: {
      int64_t n = w.min_num_params;
      if (n != 0 && n % 1'000'000'000 == 0) return "size:" + std::to_string(n / 1'000'000'000) + "B";
      if (n != 0 && n % 1'000'000 == 0) return "size:" + std::to_string(n / 1'000'000) + "M";
      if (n != 0 && n % 1'000 == 0) return "size:" + std::to_string(n / 1'000) + "K";
      return "size:" + std::to_string(n);
    }
  }
  return "block";
}

namespace {

// "wq+wv+sdpa" -> its SacSave; "none" is the empty set. False on an unknown or repeated name
// (*bad: the name).
bool ParseSacSave(const std::string& text, SacSave* out, std::string* bad) {
  *out = 0;
  if (text == "none") return true;
  for (const std::string& name : Split(text, '+')) {
    int bit = -1;
    for (int i = 0; i < kSacOps; ++i) {
      if (name == kSacOpNames[i]) bit = i;
    }
    if (bit < 0 || (*out & (SacSave{1} << bit)) != 0) {
      *bad = name;
      return false;
    }
    *out |= SacSave{1} << bit;
  }
  return true;
}

[[noreturn]] void BadSacSave(const std::string& where, const std::string& bad, const std::string& text) {
  std::vector<std::string> names(std::begin(kSacOpNames), std::end(kSacOpNames));
  throw InputError(where + ": expected op names from " + Join(names, ", ") +
                   " joined by '+' (each once) or none after sac:, got \"" + bad + "\" in \"" + text + "\"" +
                   DidYouMean(ClosestName(bad, names)));
}

const std::string kCheckpointingExpected =
    "none, full, selective, every:K, first:K, first:K+selective (K >= 1), sac:OPS (OPS: names from "
    "wq, wk, wv, wo, w1, w3, w2, sdpa joined by '+', or none) or blocks:A-B=POLICY,... (POLICY: "
    "full, none, selective or sac:OPS)";

// One "A-B=POLICY" run of blocks:RUNS.
BlockRun ParseBlockRun(const std::string& item, const std::string& where, const std::string& text) {
  const size_t eq = item.find('=');
  std::vector<std::pair<int, int>> range;
  if (eq == std::string::npos || !ParseRanges(item.substr(0, eq), &range) || range.size() != 1) {
    BadSpec(where, kCheckpointingExpected, text, "");
  }
  BlockRun r;
  r.first = range[0].first;
  r.last = range[0].second;
  const std::string policy = item.substr(eq + 1);
  if (policy == "full") {
    r.kind = BlockRun::Kind::kFull;
  } else if (policy == "none") {
    r.kind = BlockRun::Kind::kKeep;
  } else if (policy == "selective") {
    r.kind = BlockRun::Kind::kSac;
  } else if (policy.rfind("sac:", 0) == 0) {
    r.kind = BlockRun::Kind::kSac;
    std::string bad;
    if (!ParseSacSave(policy.substr(4), &r.save, &bad)) {
      BadSacSave(where, bad, text);
    }
  } else {
    BadSpec(where, kCheckpointingExpected, text, ClosestName(policy, {"full", "none", "selective"}));
  }
  return r;
}

}  // namespace

void ParseCheckpointingSpec(const std::string& text, const std::string& where, Plan* plan) {
  const std::string& expected = kCheckpointingExpected;
  size_t colon = text.find(':');
  std::string kind = text.substr(0, colon);
  int64_t k = 0;
  if (kind == "sac" && colon != std::string::npos) {
    SacSave save = 0;
    std::string bad;
    if (!ParseSacSave(text.substr(colon + 1), &save, &bad)) {
      BadSacSave(where, bad, text);
    }
    plan->checkpointing = Checkpointing::kSelective;
    plan->checkpoint_rest_selective = false;
    plan->sac_save = save;
    return;
  }
  if (kind == "blocks" && colon != std::string::npos) {
    std::vector<BlockRun> runs;
    for (const std::string& item : SplitCommas(text.substr(colon + 1))) runs.push_back(ParseBlockRun(item, where, text));
    // Order and coverage need the model's depth: Plan::Problems (BlockRunProblem).
    plan->checkpointing = Checkpointing::kBlocks;
    plan->checkpoint_rest_selective = false;
    plan->checkpoint_blocks = std::move(runs);
    return;
  }
  if ((kind == "every" || kind == "first") && colon != std::string::npos) {
    std::string count = text.substr(colon + 1);
    const std::string rest = "+selective";
    const bool rest_selective =
        kind == "first" && count.size() > rest.size() && count.compare(count.size() - rest.size(), rest.size(), rest) == 0;
    if (rest_selective) count.resize(count.size() - rest.size());
    if (!ParseCount(count, &k) || k < 1 || k > INT32_MAX) {
      BadSpec(where, expected, text, "");
    }
    plan->checkpoint_rest_selective = rest_selective;
    if (kind == "every") {
      plan->checkpointing = Checkpointing::kEveryK;
      plan->checkpoint_every_k = static_cast<int>(k);
    } else {
      plan->checkpointing = Checkpointing::kFirstK;
      plan->checkpoint_first_k = static_cast<int>(k);
    }
    return;
  }
  const Names plain = {"none", "full", "selective"};
  if (colon != std::string::npos || std::find(plain.begin(), plain.end(), kind) == plain.end()) {
    BadSpec(where, expected, text, ClosestName(kind, {"none", "full", "selective", "every", "first", "sac", "blocks"}));
  }
  plan->checkpointing = ParseEnum<Checkpointing>(kind, where);
  plan->checkpoint_rest_selective = false;
  if (plan->checkpointing == Checkpointing::kSelective) plan->sac_save = kTorchtitanSacSave;
}

void ParseActivationOffloadSpec(const std::string& text, const std::string& where, Plan* plan) {
  int64_t k = 0;
  if (text.rfind("first:", 0) == 0) {
    if (!ParseCount(text.substr(6), &k) || k < 1 || k > INT32_MAX) {
      BadSpec(where, "none, verl_async or first:K (K >= 1: the first K blocks)", text, "");
    }
    plan->activation_offload = ActivationOffload::kVerlAsync;
    plan->activation_offload_blocks = static_cast<int>(k);
    return;
  }
  plan->activation_offload = ParseEnum<ActivationOffload>(text, where);
  plan->activation_offload_blocks = 0;
}

int ActivationOffloadedBlocks(const Plan& plan, int num_layers) {
  if (plan.activation_offload != ActivationOffload::kVerlAsync || num_layers < 3) return 0;
  return plan.activation_offload_blocks > 0 ? std::min(plan.activation_offload_blocks, num_layers - 1)
                                            : num_layers - 1;
}

std::string ActivationOffloadSpecToString(const Plan& plan) {
  if (plan.activation_offload == ActivationOffload::kVerlAsync && plan.activation_offload_blocks > 0) {
    return "first:" + std::to_string(plan.activation_offload_blocks);
  }
  return ToString(plan.activation_offload);
}

std::string SacSaveToString(SacSave save) {
  if (save == kTorchtitanSacSave) return "selective";
  std::string out;
  for (int i = 0; i < kSacOps; ++i) {
    if ((save & (SacSave{1} << i)) == 0) continue;
    if (!out.empty()) out += '+';
    out += kSacOpNames[i];
  }
  return out.empty() ? "none" : out;
}

std::string BlockRunsToString(const std::vector<BlockRun>& runs) {
  std::string out;
  for (const BlockRun& r : runs) {
    if (!out.empty()) out += ',';
    out += std::to_string(r.first);
    if (r.last != r.first) out += "-" + std::to_string(r.last);
    out += '=';
    switch (r.kind) {
      case BlockRun::Kind::kKeep: out += "none"; break;
      case BlockRun::Kind::kFull: out += "full"; break;
      case BlockRun::Kind::kSac:
        out += r.save == kTorchtitanSacSave ? std::string("selective") : "sac:" + SacSaveToString(r.save);
        break;
    }
  }
  return out;
}

std::optional<std::pair<std::string, std::string>> BlockRunProblem(const std::vector<BlockRun>& runs,
                                                                   int num_layers) {
  const std::string text = "\"" + BlockRunsToString(runs) + "\"";
  if (runs.empty()) return std::make_pair(std::string("runs covering the text blocks"), std::string("none"));
  int next = 0;
  for (const BlockRun& r : runs) {
    if (r.first != next || r.last < r.first) {
      return std::make_pair("runs in order from block 0 without gaps or overlaps (the next starting at block " +
                                std::to_string(next) + ")",
                            text);
    }
    next = r.last + 1;
  }
  if (num_layers > 0 && next != num_layers) {
    return std::make_pair("runs ending at the model's last block " + std::to_string(num_layers - 1), text);
  }
  return std::nullopt;
}

std::string CheckpointingSpecToString(const Plan& plan) {
  if (plan.checkpointing == Checkpointing::kEveryK) {
    return "every:" + std::to_string(plan.checkpoint_every_k);
  }
  if (plan.checkpointing == Checkpointing::kFirstK) {
    return "first:" + std::to_string(plan.checkpoint_first_k) + (plan.checkpoint_rest_selective ? "+selective" : "");
  }
  if (plan.checkpointing == Checkpointing::kSelective && plan.sac_save != kTorchtitanSacSave) {
    return "sac:" + SacSaveToString(plan.sac_save);
  }
  if (plan.checkpointing == Checkpointing::kBlocks) return "blocks:" + BlockRunsToString(plan.checkpoint_blocks);
  return ToString(plan.checkpointing);
}

namespace {
// The kBlocks run of text block `in_stack` (nullptr for a block no run covers).
const BlockRun* RunOf(const Plan& plan, int in_stack) {
  for (const BlockRun& r : plan.checkpoint_blocks) {
    if (in_stack >= r.first && in_stack <= r.last) return &r;
  }
  return nullptr;
}
}  // namespace

bool BlockCheckpointed(const Plan& plan, int block, int vision_blocks) {
  // Each stack (the tower's, the text model's) counts its blocks from 0.
  const int in_stack = block < vision_blocks ? block : block - vision_blocks;
  switch (plan.checkpointing) {
    case Checkpointing::kNone: return false;
    case Checkpointing::kFull: return true;
    case Checkpointing::kSelective: return false;
    case Checkpointing::kEveryK: return in_stack % std::max(1, plan.checkpoint_every_k) == 0;
    case Checkpointing::kFirstK: return in_stack < plan.checkpoint_first_k;
    case Checkpointing::kBlocks: {
      // The runs name text blocks; a VL tower's blocks keep theirs.
      if (block < vision_blocks) return false;
      const BlockRun* r = RunOf(plan, in_stack);
      return r != nullptr && r->kind == BlockRun::Kind::kFull;
    }
  }
  return false;
}

bool BlockSelective(const Plan& plan, int block, int vision_blocks) {
  if (plan.checkpointing == Checkpointing::kSelective) return true;
  if (plan.checkpointing == Checkpointing::kBlocks) {
    if (block < vision_blocks) return false;
    const BlockRun* r = RunOf(plan, block - vision_blocks);
    return r != nullptr && r->kind == BlockRun::Kind::kSac;
  }
  return plan.checkpointing == Checkpointing::kFirstK && plan.checkpoint_rest_selective &&
         !BlockCheckpointed(plan, block, vision_blocks);
}

SacSave BlockSacSave(const Plan& plan, int block, int vision_blocks) {
  if (plan.checkpointing == Checkpointing::kBlocks && block >= vision_blocks) {
    const BlockRun* r = RunOf(plan, block - vision_blocks);
    if (r != nullptr) return r->save;
  }
  return plan.sac_save;
}

bool ExplicitSacSave(const Plan& plan) {
  if (plan.checkpointing == Checkpointing::kBlocks) {
    for (const BlockRun& r : plan.checkpoint_blocks) {
      if (r.kind == BlockRun::Kind::kSac && r.save != kTorchtitanSacSave) return true;
    }
    return false;
  }
  return (plan.checkpointing == Checkpointing::kSelective || plan.checkpoint_rest_selective) &&
         plan.sac_save != kTorchtitanSacSave;
}

bool AnySelectiveBlock(const Plan& plan) {
  if (plan.checkpointing == Checkpointing::kSelective || plan.checkpoint_rest_selective) return true;
  if (plan.checkpointing != Checkpointing::kBlocks) return false;
  for (const BlockRun& r : plan.checkpoint_blocks) {
    if (r.kind == BlockRun::Kind::kSac) return true;
  }
  return false;
}

namespace {
std::string DescribeRun(BlockRun::Kind kind, SacSave save) {
  switch (kind) {
    case BlockRun::Kind::kKeep: return "keep every activation";
    case BlockRun::Kind::kFull: return "rerun whole in backward";
    case BlockRun::Kind::kSac: break;
  }
  if (save == kTorchtitanSacSave) return "selective recompute (the model's own rule)";
  std::vector<std::string> kept, rerun;
  for (int i = 0; i < kSacOps; ++i) ((save >> i & 1U) != 0 ? kept : rerun).push_back(kSacOpNames[i]);
  if (kept.empty()) return "op-SAC keeps the block input only, reruns every op";
  if (rerun.empty()) return "op-SAC keeps every op output, reruns the elementwise ops";
  return "op-SAC keeps " + Join(kept, ", ") + ", reruns " + Join(rerun, ", ") + " and the elementwise ops";
}
}  // namespace

std::string DescribeBlockPolicy(const Plan& plan) {
  if (plan.checkpointing != Checkpointing::kBlocks) return "every block: " + DescribeRun(BlockRun::Kind::kSac, plan.sac_save);
  // The blocks whose saved tensors verl's handler copies to the host say so; a run that
  // straddles the last of them is told as two.
  const int offloaded =
      plan.checkpoint_blocks.empty() ? 0 : ActivationOffloadedBlocks(plan, plan.checkpoint_blocks.back().last + 1);
  std::vector<std::string> parts;
  const auto add = [&parts](int first, int last, const std::string& what) {
    parts.push_back((first == last ? "block " + std::to_string(first)
                                   : "blocks " + std::to_string(first) + "-" + std::to_string(last)) +
                    ": " + what);
  };
  for (const BlockRun& r : plan.checkpoint_blocks) {
    const std::string what = DescribeRun(r.kind, r.save);
    if (r.first < offloaded) {
      add(r.first, std::min(r.last, offloaded - 1), what + ", offloaded to pinned host memory");
      if (r.last >= offloaded) add(offloaded, r.last, what);
    } else {
      add(r.first, r.last, what);
    }
  }
  return Join(parts, "; ");
}

}  // namespace shardtune::model
