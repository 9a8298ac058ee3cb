// Reading and writing "shardtune.plan" JSON. Enum names come from plan.cc's tables (EnumNames),
// so the JSON, the CLI and ToString() spell every value the same way.
#include "model/plan_json.h"

#include <climits>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

constexpr int64_t kIntMin = INT_MIN;
constexpr int64_t kIntMax = INT_MAX;

template <typename E>
E OptEnum(StrictReader* r, const std::string& key, E def) {
  std::string s = r->OptionalEnum(key, ToString(def), EnumNames<E>());
  return ParseEnum<E>(s, r->Where(key));
}

int OptInt(StrictReader* r, const std::string& key, int def) {
  return static_cast<int>(r->OptionalInt(key, def, kIntMin, kIntMax));
}

// Rejects a key that only means something under another setting (a likely mistake).
void RejectUnless(StrictReader* r, bool allowed, const std::string& key,
                  const std::string& only_with) {
  if (!allowed && r->Has(key)) {
    throw InputError(r->Where(key) + ": only allowed with " + only_with);
  }
}

std::vector<std::pair<int, int>> ReadRanges(const nlohmann::json& v, const std::string& where) {
  const std::string expected = "[first, last] block indices (integers >= 0)";
  if (!v.is_array()) throw InputError(where + ": expected an array of " + expected + ", got " +
                                      Describe(v));
  std::vector<std::pair<int, int>> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& r = v[i];
    bool ok = r.is_array() && r.size() == 2;
    for (size_t k = 0; ok && k < 2; ++k) {
      ok = r[k].is_number_integer() && r[k].get<int64_t>() >= 0 && r[k].get<int64_t>() <= kIntMax;
    }
    if (!ok) {
      throw InputError(where + "/" + std::to_string(i) + ": expected " + expected + ", got " +
                       Describe(r));
    }
    out.emplace_back(r[0].get<int>(), r[1].get<int>());
  }
  return out;
}

WrapPolicy ReadWrap(StrictReader* r) {
  WrapPolicy w;
  w.kind = OptEnum(r, "policy", WrapPolicy::Kind::kBlock);
  RejectUnless(r, w.kind == WrapPolicy::Kind::kEveryK, "every_k", "\"policy\": \"every\"");
  RejectUnless(r, w.kind == WrapPolicy::Kind::kRanges, "ranges", "\"policy\": \"ranges\"");
  RejectUnless(r, w.kind == WrapPolicy::Kind::kSize, "min_num_params", "\"policy\": \"size\"");
  switch (w.kind) {
    case WrapPolicy::Kind::kBlock: break;
    case WrapPolicy::Kind::kEveryK:
      w.every_k = static_cast<int>(r->RequiredInt("every_k", kIntMin, kIntMax));
      break;
    case WrapPolicy::Kind::kRanges:
      w.ranges = ReadRanges(r->RequiredValue("ranges"), r->Where("ranges"));
      break;
    case WrapPolicy::Kind::kSize:
      w.min_num_params = r->RequiredInt("min_num_params", INT64_MIN, INT64_MAX);
      break;
  }
  w.embedding_unit = r->OptionalBool("embedding_unit", w.embedding_unit);
  w.head_unit = r->OptionalBool("head_unit", w.head_unit);
  w.expert_units = r->OptionalBool("expert_units", w.expert_units);
  w.sub_block_units = r->OptionalBool("sub_block_units", w.sub_block_units);
  r->Finish();
  return w;
}

void ReadPrecisionAndComm(StrictReader* r, Plan* p) {
  p->offload = OptEnum(r, "offload", p->offload);
  p->activation_offload = OptEnum(r, "activation_offload", p->activation_offload);
  RejectUnless(r, p->activation_offload == ActivationOffload::kVerlAsync, "activation_offload_blocks",
               "\"activation_offload\": \"verl_async\"");
  p->activation_offload_blocks = OptInt(r, "activation_offload_blocks", p->activation_offload_blocks);
  p->param_dtype = OptEnum(r, "param_dtype", p->param_dtype);
  p->reduce_dtype = OptEnum(r, "reduce_dtype", p->reduce_dtype);
  p->master_dtype = OptEnum(r, "master_dtype", p->master_dtype);
  if (r->Has("frozen_dtype")) p->frozen_dtype = OptEnum(r, "frozen_dtype", p->FrozenDtype());
  p->reshard_after_forward =
      r->OptionalBool("reshard_after_forward", StrategyReshardsAfterForward(p->strategy));
  p->forward_prefetch = r->OptionalBool("forward_prefetch", p->forward_prefetch);
  p->backward_prefetch = OptEnum(r, "backward_prefetch", p->backward_prefetch);
  p->max_inflight_allgathers = OptInt(r, "max_inflight_allgathers", p->max_inflight_allgathers);
}

void ReadComputeChoices(StrictReader* r, Plan* p) {
  p->optimizer = OptEnum(r, "optimizer", p->optimizer);
  p->optimizer_impl = OptEnum(r, "optimizer_impl", p->optimizer_impl);
  p->attention = OptEnum(r, "attention", p->attention);
  p->sdpa_backend = OptEnum(r, "sdpa_backend", p->sdpa_backend);
  p->modeling = OptEnum(r, "modeling", p->modeling);
  p->loss_fp32_upcast = r->OptionalBool("loss_fp32_upcast", p->loss_fp32_upcast);
  p->keep_logits = r->OptionalBool("keep_logits", p->keep_logits);
  p->loss_kernel = OptEnum(r, "loss_kernel", p->loss_kernel);
  p->reference = OptEnum(r, "reference", p->reference);
  p->response_len = r->OptionalInt("response_len", p->response_len, INT64_MIN, INT64_MAX);
  p->entropy_from_logits = r->OptionalBool("entropy_from_logits", p->entropy_from_logits);
  p->padding_mask = r->OptionalBool("padding_mask", p->padding_mask);
  if (r->Has("liger")) {
    StrictReader l = r->RequiredObject("liger");
    p->liger.rms_norm = l.OptionalBool("rms_norm", false);
    p->liger.swiglu = l.OptionalBool("swiglu", false);
    p->liger.rope = l.OptionalBool("rope", false);
    l.Finish();
  }
}

std::vector<std::string> ReadStrings(const nlohmann::json& v, const std::string& where,
                                     const std::string& what) {
  if (!v.is_array()) throw InputError(where + ": expected an array of " + what + ", got " + Describe(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty()) {
      throw InputError(where + "/" + std::to_string(i) + ": expected " + what + ", got " +
                       Describe(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

LoraSpec ReadLora(StrictReader* r) {
  LoraSpec l;
  l.rank = static_cast<int>(r->RequiredInt("rank", 0, kIntMax));
  l.alpha = r->OptionalNumber("alpha", l.alpha, 0.0, 1e9);
  if (r->Has("targets")) {
    l.targets = ReadStrings(r->RequiredValue("targets"), r->Where("targets"),
                            "projection names (non-empty strings, e.g. \"q_proj\")");
  }
  l.dtype = OptEnum(r, "dtype", l.dtype);
  // [0, 1): torch.nn.Dropout accepts p = 1, but an adapter that drops every input never trains.
  l.dropout = r->OptionalNumber("dropout", l.dropout, 0.0, 0.999999);
  l.exclude = r->OptionalString("exclude", "");
  r->Finish();
  return l;
}

// Context parallelism, roles, frozen parameters, LoRA, tiled MLP (all optional; schema v1 files
// without them read as a plain full fine-tune).
void ReadTrainableAndParallel(StrictReader* r, Plan* p) {
  p->cp = OptInt(r, "cp", p->cp);
  p->cp_fsdp_mesh = OptEnum(r, "cp_fsdp_mesh", p->cp_fsdp_mesh);
  p->ep = OptInt(r, "expert_parallel_degree", p->ep);
  p->role = OptEnum(r, "role", p->role);
  if (r->Has("frozen_prefixes")) {
    p->frozen_prefixes = ReadStrings(r->RequiredValue("frozen_prefixes"), r->Where("frozen_prefixes"),
                                     "module name prefixes (non-empty strings)");
  }
  if (r->Has("lora")) {
    StrictReader lora = r->RequiredObject("lora");
    p->lora = ReadLora(&lora);
  }
  p->tiled_mlp_shards = OptInt(r, "tiled_mlp_shards", p->tiled_mlp_shards);
}

nlohmann::ordered_json WrapToJson(const WrapPolicy& w) {
  nlohmann::ordered_json j;
  j["policy"] = ToString(w.kind);
  if (w.kind == WrapPolicy::Kind::kEveryK) j["every_k"] = w.every_k;
  if (w.kind == WrapPolicy::Kind::kRanges) {
    nlohmann::ordered_json ranges = nlohmann::ordered_json::array();
    for (const auto& r : w.ranges) ranges.push_back({r.first, r.second});
    j["ranges"] = ranges;
  }
  if (w.kind == WrapPolicy::Kind::kSize) j["min_num_params"] = w.min_num_params;
  j["embedding_unit"] = w.embedding_unit;
  j["head_unit"] = w.head_unit;
  if (w.expert_units) j["expert_units"] = true;
  if (w.sub_block_units) j["sub_block_units"] = true;
  return j;
}

}  // namespace

Plan PlanFromJson(const nlohmann::json& j, const std::string& file) {
  StrictReader r(j, file);
  r.CheckSchema(kPlanSchema, kPlanSchemaVersion);
  Plan p;
  p.strategy = OptEnum(&r, "strategy", p.strategy);
  p.shard_group_size = OptInt(&r, "shard_group_size", p.shard_group_size);
  if (r.Has("wrap")) {
    StrictReader wrap = r.RequiredObject("wrap");
    p.wrap = ReadWrap(&wrap);
  }
  p.micro_batch = OptInt(&r, "micro_batch", p.micro_batch);
  p.seq_len = r.OptionalInt("seq_len", p.seq_len, INT64_MIN, INT64_MAX);
  p.packed_seq_len = r.OptionalInt("packed_seq_len", p.packed_seq_len, INT64_MIN, INT64_MAX);
  p.images = OptInt(&r, "images", p.images);
  p.image_tokens = r.OptionalInt("image_tokens", p.image_tokens, INT64_MIN, INT64_MAX);
  p.grad_accum = OptInt(&r, "grad_accum", p.grad_accum);
  p.no_sync = r.OptionalBool("no_sync", p.no_sync);
  p.checkpointing = OptEnum(&r, "checkpointing", p.checkpointing);
  RejectUnless(&r, p.checkpointing == Checkpointing::kEveryK, "checkpoint_every_k",
               "\"checkpointing\": \"every\"");
  p.checkpoint_every_k = OptInt(&r, "checkpoint_every_k", p.checkpoint_every_k);
  RejectUnless(&r, p.checkpointing == Checkpointing::kFirstK, "checkpoint_first_k",
               "\"checkpointing\": \"first\"");
  p.checkpoint_first_k = OptInt(&r, "checkpoint_first_k", p.checkpoint_first_k);
  // first:K+selective: the blocks after the first k run selective checkpointing.
  RejectUnless(&r, p.checkpointing == Checkpointing::kFirstK, "checkpoint_rest", "\"checkpointing\": \"first\"");
  if (r.Has("checkpoint_rest")) {
    const std::string rest = r.OptionalString("checkpoint_rest", "none");
    if (rest != "none" && rest != "selective") {
      throw InputError(r.Where("checkpoint_rest") + ": expected \"none\" or \"selective\", got \"" +
                       EscapeControls(rest) + "\"");
    }
    p.checkpoint_rest_selective = rest == "selective";
  }
  // Op-level SAC: the save set of selective blocks ("sac:OPS"), the runs of "blocks:RUNS", each
  // in the --checkpointing syntax after its prefix.
  RejectUnless(&r, p.checkpointing == Checkpointing::kSelective || p.checkpointing == Checkpointing::kFirstK,
               "sac_save", "\"checkpointing\": \"selective\" or \"first\"");
  if (r.Has("sac_save")) {
    Plan parsed;
    ParseCheckpointingSpec("sac:" + r.OptionalString("sac_save", ""), r.Where("sac_save"), &parsed);
    p.sac_save = parsed.sac_save;
  }
  RejectUnless(&r, p.checkpointing == Checkpointing::kBlocks, "checkpoint_blocks", "\"checkpointing\": \"blocks\"");
  if (p.checkpointing == Checkpointing::kBlocks) {
    if (!r.Has("checkpoint_blocks")) {
      throw InputError(r.Where("checkpoint_blocks") + ": expected the runs (\"0-3=full,4-31=selective\") with "
                       "\"checkpointing\": \"blocks\", got nothing");
    }
    Plan parsed;
    ParseCheckpointingSpec("blocks:" + r.OptionalString("checkpoint_blocks", ""), r.Where("checkpoint_blocks"),
                           &parsed);
    p.checkpoint_blocks = parsed.checkpoint_blocks;
  }
  p.checkpoint_reentrant = r.OptionalBool("checkpoint_reentrant", p.checkpoint_reentrant);
  ReadPrecisionAndComm(&r, &p);
  ReadComputeChoices(&r, &p);
  ReadTrainableAndParallel(&r, &p);
  r.Finish();
  return p;
}

nlohmann::ordered_json PlanToJson(const Plan& p) {
  nlohmann::ordered_json j;
  j["schema"] = kPlanSchema;
  j["schema_version"] = kPlanSchemaVersion;
  j["strategy"] = ToString(p.strategy);
  j["shard_group_size"] = p.shard_group_size;
  j["wrap"] = WrapToJson(p.wrap);
  j["micro_batch"] = p.micro_batch;
  j["seq_len"] = p.seq_len;
  if (p.packed_seq_len > 0) j["packed_seq_len"] = p.packed_seq_len;
  if (p.images > 0) j["images"] = p.images;
  if (p.image_tokens > 0) j["image_tokens"] = p.image_tokens;
  j["grad_accum"] = p.grad_accum;
  j["no_sync"] = p.no_sync;
  j["checkpointing"] = ToString(p.checkpointing);
  if (p.checkpointing == Checkpointing::kEveryK) j["checkpoint_every_k"] = p.checkpoint_every_k;
  if (p.checkpointing == Checkpointing::kFirstK) j["checkpoint_first_k"] = p.checkpoint_first_k;
  if (p.checkpoint_rest_selective) j["checkpoint_rest"] = "selective";
  if (p.sac_save != kTorchtitanSacSave &&
      (p.checkpointing == Checkpointing::kSelective || p.checkpoint_rest_selective)) {
    j["sac_save"] = SacSaveToString(p.sac_save);
  }
  if (p.checkpointing == Checkpointing::kBlocks) j["checkpoint_blocks"] = BlockRunsToString(p.checkpoint_blocks);
  if (p.checkpoint_reentrant) j["checkpoint_reentrant"] = true;
  j["offload"] = ToString(p.offload);
  if (p.activation_offload != ActivationOffload::kNone) j["activation_offload"] = ToString(p.activation_offload);
  if (p.activation_offload_blocks != 0) j["activation_offload_blocks"] = p.activation_offload_blocks;
  j["param_dtype"] = ToString(p.param_dtype);
  j["reduce_dtype"] = ToString(p.reduce_dtype);
  j["master_dtype"] = ToString(p.master_dtype);
  if (p.frozen_dtype) j["frozen_dtype"] = ToString(*p.frozen_dtype);
  j["reshard_after_forward"] = p.reshard_after_forward;
  j["forward_prefetch"] = p.forward_prefetch;
  j["backward_prefetch"] = ToString(p.backward_prefetch);
  j["max_inflight_allgathers"] = p.max_inflight_allgathers;
  j["optimizer"] = ToString(p.optimizer);
  j["optimizer_impl"] = ToString(p.optimizer_impl);
  j["attention"] = ToString(p.attention);
  if (p.sdpa_backend != SdpaBackend::kAuto) j["sdpa_backend"] = ToString(p.sdpa_backend);
  j["modeling"] = ToString(p.modeling);
  j["loss_fp32_upcast"] = p.loss_fp32_upcast;
  j["keep_logits"] = p.keep_logits;
  j["loss_kernel"] = ToString(p.loss_kernel);
  if (p.reference != InStepReference::kNone) j["reference"] = ToString(p.reference);
  if (p.response_len > 0) j["response_len"] = p.response_len;
  if (p.entropy_from_logits) j["entropy_from_logits"] = true;
  if (p.padding_mask) j["padding_mask"] = true;
  if (p.liger.any()) {
    j["liger"] = {{"rms_norm", p.liger.rms_norm}, {"swiglu", p.liger.swiglu}, {"rope", p.liger.rope}};
  }
  j["cp"] = p.cp;
  j["cp_fsdp_mesh"] = ToString(p.cp_fsdp_mesh);
  j["expert_parallel_degree"] = p.ep;
  j["role"] = ToString(p.role);
  j["frozen_prefixes"] = p.frozen_prefixes;
  if (p.lora.enabled()) {
    j["lora"] = {{"rank", p.lora.rank}, {"alpha", p.lora.alpha}, {"targets", p.lora.targets},
                 {"dtype", ToString(p.lora.dtype)}, {"dropout", p.lora.dropout}};
    if (!p.lora.exclude.empty()) j["lora"]["exclude"] = p.lora.exclude;
  }
  j["tiled_mlp_shards"] = p.tiled_mlp_shards;
  return j;
}

Plan ReadPlanFile(const std::string& path) { return PlanFromJson(ReadJsonFile(path), path); }

}  // namespace shardtune::model
