// Frozen parameters, LoRA adapters and inference roles applied to FSDP units; their checks
// against the model (the plan-local ones are in Plan::Problems).
#include "model/trainable.h"

#include <algorithm>
#include <functional>
#include <regex>
#include <set>

#include "model/errors.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string LastComponent(const std::string& module) {
  auto dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

// Leaves that are Linear or Conv1D: what PEFT's target_modules can name.
void CollectProjections(const ModuleNode& m, std::vector<const ModuleNode*>* out) {
  if ((m.type == "Linear" || m.type == "Conv1D") && !m.params.empty()) out->push_back(&m);
  for (const auto& c : m.children) CollectProjections(c, out);
}

// A frozen prefix as the parameter name it means: HF ties lm_head.weight to embed_tokens.weight,
// so on a tied model "lm_head" freezes the shared embedding.
bool PrefixMatches(const ModelSpec& spec, const std::string& prefix, const std::string& param) {
  if (StartsWith(param, prefix)) return true;
  // A VL model's tower under transformers < 4.52's names (visual.*, vision_tower.*,
  // multi_modal_projector.* at the top level, as ROLL's freeze_module_prefix examples for older
  // releases write them): the same modules as model.visual.* etc.
  if (spec.vision.enabled() && (StartsWith(prefix, "visual") || StartsWith(prefix, "vision_tower") ||
                                StartsWith(prefix, "multi_modal_projector"))) {
    return StartsWith(param, "model." + prefix);
  }
  return spec.tied_embeddings && StartsWith(prefix, "lm_head") &&
         param == "model.embed_tokens.weight";
}

bool Frozen(const ModelSpec& spec, const Plan& plan, const std::string& param) {
  if (!plan.Trains() || plan.lora.enabled()) return true;
  if (VisionTowerIdle(spec, plan) && IsVisionParameter(param)) return true;
  for (const auto& p : plan.frozen_prefixes) {
    if (PrefixMatches(spec, p, param)) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> LoraTargetNames(const ModelSpec& spec) {
  ModuleNode root = BuildModuleTree(spec);
  std::vector<const ModuleNode*> proj;
  CollectProjections(root, &proj);
  std::set<std::string> seen;
  std::vector<std::string> names;
  for (const ModuleNode* m : proj) {
    std::string n = LastComponent(m->name);
    if (seen.insert(n).second) names.push_back(n);
  }
  return names;
}

std::vector<std::string> TrainabilityProblems(const ModelSpec& spec, const Plan& plan,
                                              int64_t seq_len, const std::string& where) {
  std::vector<std::string> out;
  // The flag that sets each key, for plans built from the command line.
  auto add = [&](const std::string& key, const std::string& expected, const std::string& got) {
    std::string flag = key.rfind("frozen", 0) == 0 ? "--freeze"
                       : key.rfind("lora", 0) == 0 ? "--lora-targets"
                       : key.rfind("wrap", 0) == 0 ? "--wrap-experts"
                                                   : "--tiled-mlp";
    out.push_back(where + ":/" + key + ": expected " + expected + ", got " + got + " (flag " +
                  flag + ")");
  };
  if (!plan.frozen_prefixes.empty()) {
    std::vector<std::string> names;
    for (const auto& u : BuildFsdpUnits(spec, WrapPolicy{})) {
      for (const auto& p : u.params) names.push_back(p.name);
    }
    for (size_t i = 0; i < plan.frozen_prefixes.size(); ++i) {
      const std::string& pre = plan.frozen_prefixes[i];
      bool hit = std::any_of(names.begin(), names.end(),
                             [&](const std::string& n) { return PrefixMatches(spec, pre, n); });
      if (!hit) {
        add("frozen_prefixes/" + std::to_string(i),
            "a prefix of a parameter name of " + spec.name +
                " (e.g. model.embed_tokens, model.layers.0., " +
                (spec.tied_embeddings ? std::string("model.norm") : std::string("lm_head")) + ")",
            "\"" + pre + "\"");
      }
    }
  }
  if (plan.Trains() && !plan.frozen_prefixes.empty() && !plan.lora.enabled() &&
      CountTrainable(ApplyTrainability(spec, plan, BuildFsdpUnits(spec, WrapPolicy{}))).trainable ==
          0) {
    // loss.backward() raises "element 0 of tensors does not require grad" when nothing trains.
    add("frozen_prefixes",
        "at least one trainable parameter for role train (role infer runs forward only)",
        "every parameter frozen");
  }
  bool exclude_ok = true;
  if (plan.lora.enabled() && !plan.lora.exclude.empty()) {
    try {
      std::regex re(plan.lora.exclude);
    } catch (const std::regex_error& e) {
      exclude_ok = false;
      out.push_back(where + ":/lora/exclude: expected a regular expression (PEFT exclude_modules), got \"" +
                    plan.lora.exclude + "\" (" + e.what() + ") (flag --lora-exclude)");
    }
  }
  if (plan.lora.enabled() && exclude_ok && spec.vision.enabled()) {
    // The vision blocks' ledgers record a tower that trains whole or not at all.
    for (const auto& u : ApplyTrainability(spec, plan, BuildFsdpUnits(spec, WrapPolicy{}))) {
      const auto hit = std::find_if(u.params.begin(), u.params.end(), [](const ParamTensor& p) {
        return p.lora_adapter && IsVisionParameter(p.name);
      });
      if (hit == u.params.end()) continue;
      add("lora/targets",
          "projections of the language model (LoRA adapters in the vision tower are not modelled; "
          "exclude it as verl's VL example does: --lora-exclude '.*visual.*' / exclude_modules)",
          "an adapter on " + hit->name.substr(0, hit->name.find(".lora_")));
      break;
    }
  }
  if (plan.lora.enabled()) {
    std::vector<std::string> valid = LoraTargetNames(spec);
    for (size_t i = 0; i < plan.lora.targets.size(); ++i) {
      const std::string& t = plan.lora.targets[i];
      if (std::find(valid.begin(), valid.end(), t) == valid.end()) {
        add("lora/targets/" + std::to_string(i),
            "a projection of " + spec.name + " (one of " + Join(valid, " ") + ")", "\"" + t + "\"");
      }
    }
  }
  if (plan.wrap.expert_units && !spec.moe.enabled()) {
    add("wrap/expert_units", "a MoE model (num_experts > 0) for per-expert units",
        spec.name + ", a dense model");
  }
  if (plan.wrap.expert_units && spec.moe.gpt_oss_experts) {
    add("wrap/expert_units", "a MoE model with one module per expert",
        spec.name + ", whose experts are 3-D tensors (GptOssExperts) that only a whole unit holds");
  }
  if (plan.tiled_mlp_shards > 1 && seq_len > 0 && seq_len % plan.tiled_mlp_shards != 0) {
    add("tiled_mlp_shards",
        "a divisor of seq_len " + std::to_string(seq_len) +
            " (each tile is seq_len / shards tokens)",
        std::to_string(plan.tiled_mlp_shards));
  }
  return out;
}

bool VisionTowerIdle(const ModelSpec& spec, const Plan& plan) {
  return spec.vision.enabled() && plan.images <= 0;
}

bool ChangesTrainability(const ModelSpec& spec, const Plan& plan) {
  return !plan.Trains() || plan.lora.enabled() || !plan.frozen_prefixes.empty() || VisionTowerIdle(spec, plan);
}

std::vector<FsdpUnit> ApplyTrainability(const ModelSpec& spec, const Plan& plan,
                                        std::vector<FsdpUnit> units) {
  if (!ChangesTrainability(spec, plan)) return units;
  const LoraSpec& lora = plan.lora;
  bool conv1d = spec.positions == PositionKind::kLearned;  // GPT-2's Conv1D stores [in, out]
  for (auto& u : units) {
    std::vector<ParamTensor> adapters;
    for (auto& p : u.params) {
      p.requires_grad = !Frozen(spec, plan, p.name);
      if (!lora.enabled()) continue;
      const std::string suffix = ".weight";
      if (p.name.size() <= suffix.size() || p.inner <= 1) continue;
      std::string module = p.name.substr(0, p.name.size() - suffix.size());
      if (p.name.compare(module.size(), suffix.size(), suffix) != 0) continue;
      std::string leaf = LastComponent(module);
      if (std::find(lora.targets.begin(), lora.targets.end(), leaf) == lora.targets.end()) continue;
      if (!lora.exclude.empty() && std::regex_match(module, std::regex(lora.exclude))) continue;
      bool c1d = conv1d && StartsWith(leaf, "c_");
      int64_t in = c1d ? p.dim0 : p.inner, out = c1d ? p.inner : p.dim0;
      // Hu et al. 2021 eq. 3: h = W0 x + B A x with A [r, in], B [out, r].
      ParamTensor a{module + ".lora_A.default.weight", lora.rank, in, p.segment};
      ParamTensor b{module + ".lora_B.default.weight", out, lora.rank, p.segment};
      for (ParamTensor* t : {&a, &b}) {
        t->lora_adapter = true;
        t->requires_grad = plan.Trains();
        adapters.push_back(*t);
      }
    }
    u.params.insert(u.params.end(), adapters.begin(), adapters.end());
  }
  return units;
}

TrainableCounts CountTrainable(const std::vector<FsdpUnit>& units) {
  TrainableCounts c;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      c.total += p.numel();
      if (p.requires_grad) c.trainable += p.numel();
      if (p.lora_adapter) c.adapters += p.numel();
    }
  }
  c.frozen = c.total - c.trainable;
  return c;
}

int FirstBackwardSegment(const std::vector<FsdpUnit>& units, int num_layers) {
  int first = NumSegments(num_layers);
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (!p.requires_grad) continue;
      // A tied embedding's gradient appears in the head's backward, but its lookup in segment 0
      // needs the gradient of the embedding output too.
      int seg = p.name == "model.embed_tokens.weight" ? 0 : p.segment;
      first = std::min(first, seg);
    }
  }
  return first;
}

int FirstTowerGradSegment(const ModelSpec& spec, const std::vector<FsdpUnit>& units) {
  int first = NumSegments(spec.NumBlocks());
  if (!spec.vision.enabled()) return first;
  const std::string block0 = VisionBlockName(spec, 0) + ".";
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (!p.requires_grad || !IsVisionParameter(p.name)) continue;
      const bool embedding = p.segment == BlockSegment(0) && !StartsWith(p.name, block0);
      first = std::min(first, embedding ? 0 : p.segment);
    }
  }
  return first;
}

namespace {

// "block_sparse_moe.experts.12.gate_proj.weight" -> "block_sparse_moe.experts.*.gate_proj.weight":
// the activation ledger records the routed experts as one MLP of top_k copies.
std::string CollapseExpertIndex(const std::string& rel) {
  const std::string key = ".experts.";
  auto at = rel.find(key);
  if (at == std::string::npos) return rel;
  size_t digits = at + key.size(), end = digits;
  while (end < rel.size() && rel[end] >= '0' && rel[end] <= '9') ++end;
  if (end == digits) return rel;
  return rel.substr(0, digits) + "*" + rel.substr(end);
}

}  // namespace

SubgraphTrainability SubgraphTrainabilities(const ModelSpec& spec, const Plan& plan,
                                            const std::vector<FsdpUnit>& units) {
  // Every block, a VL model's vision blocks first (ModelSpec::NumBlocks). A vision block's
  // parameters train together or not at all (the tower frozen by prefix): its Trainability says
  // all_params_train and names none (the recipes record it with the text block's names).
  const int L = spec.NumBlocks(), V = spec.VisionBlocks();
  int first = FirstBackwardSegment(units, L);
  SubgraphTrainability out;
  out.blocks.resize(static_cast<size_t>(L));
  std::vector<std::set<std::string>> trainable(static_cast<size_t>(L) + 1),
      lora(static_cast<size_t>(L) + 1);  // index L: the head
  auto at = [&](size_t i) -> Trainability& {
    return i < out.blocks.size() ? out.blocks[i] : out.head;
  };
  for (int b = 0; b < L; ++b) {
    at(static_cast<size_t>(b)).input_requires_grad = first < BlockSegment(b);
  }
  // The tower's input is the pixels, not the embeddings' output.
  const int tower_first = FirstTowerGradSegment(spec, units);
  for (int b = 0; b < V; ++b) {
    at(static_cast<size_t>(b)).input_requires_grad = tower_first < BlockSegment(b);
  }
  out.head.input_requires_grad = first < FinalNormSegment(L);
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      size_t i;
      std::string rel;
      if (p.segment >= BlockSegment(0) && p.segment < BlockSegment(V)) {
        // A vision block's own parameters (the tower's embeddings, merger and projector have no
        // ledger of their own).
        i = static_cast<size_t>(p.segment - BlockSegment(0));
        if (!StartsWith(p.name, VisionBlockName(spec, static_cast<int>(i)) + ".")) continue;
        if (p.lora_adapter || !p.requires_grad) at(i).all_params_train = false;
        continue;
      }
      if (p.segment >= BlockSegment(V) && p.segment < BlockSegment(L)) {
        i = static_cast<size_t>(p.segment - BlockSegment(0));
        std::string prefix = "model.layers." + std::to_string(static_cast<int>(i) - V) + ".";
        SHARDTUNE_CHECK(StartsWith(p.name, prefix)) << p.name << " in segment " << p.segment;
        rel = CollapseExpertIndex(p.name.substr(prefix.size()));
      } else if (p.segment >= FinalNormSegment(L)) {
        i = static_cast<size_t>(L);  // final norm, LM head, a tied embedding's head use
        rel = p.name;
      } else {
        continue;  // embeddings: no activations of their own
      }
      if (p.lora_adapter) {
        lora[i].insert(rel.substr(0, rel.find(".lora_")));
      } else if (p.requires_grad) {
        trainable[i].insert(rel);
      } else {
        at(i).all_params_train = false;
      }
    }
  }
  for (size_t i = 0; i <= static_cast<size_t>(L); ++i) {
    Trainability& t = at(i);
    t.lora_rank = lora[i].empty() ? 0 : plan.lora.rank;
    t.lora_dropout = lora[i].empty() ? 0 : plan.lora.dropout;
    t.lora_modules.assign(lora[i].begin(), lora[i].end());
    if (!t.all_params_train) t.trainable.assign(trainable[i].begin(), trainable[i].end());
  }
  return out;
}

double ModelFlopsPerToken(const ModelSpec& spec, const std::vector<FsdpUnit>& units,
                          const Plan& plan, int64_t seq_len) {
  int first = FirstBackwardSegment(units, spec.NumBlocks());
  double share =
      spec.moe.enabled() ? static_cast<double>(spec.moe.top_k) / spec.moe.num_experts : 1.0;
  double n = 0, n_b = 0, n_t = 0;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (IsVisionParameter(p.name)) continue;  // per patch, not per token (not in this figure)
      double e = static_cast<double>(p.numel()) *
                 (p.name.find(".experts.") != std::string::npos ? share : 1.0);
      n += e;
      int seg = p.name == "model.embed_tokens.weight" ? 0 : p.segment;
      if (seg >= first) n_b += e;
      if (p.requires_grad && plan.Trains()) n_t += e;
    }
  }
  double attn = AttentionForwardFlopsPerToken(spec, seq_len).count();
  int blocks_b = 0;
  for (int b = 0; b < spec.num_layers; ++b) {
    blocks_b += BlockSegment(spec.VisionBlocks() + b) >= first ? 1 : 0;
  }
  double fwd = 2 * n + spec.num_layers * attn;
  if (!plan.Trains()) return fwd;
  return fwd + 2 * n_b + 2 * blocks_b * attn + 2 * n_t;
}

ExecutorFlatUnit ExecutorFlatUnitOf(const FsdpUnit& u, const Plan& plan, int shard_ranks) {
  ExecutorFlatUnit f;
  for (const auto& p : u.params) {
    f.numel += p.numel();
    f.trains = f.trains || (p.requires_grad && plan.Trains()) || p.lora_adapter;
  }
  const int64_t g = std::max(1, u.ShardRanks(shard_ranks));
  f.shard_numel = (f.numel + g - 1) / g;
  f.padded_numel = f.shard_numel * g;
  return f;
}

}  // namespace shardtune::model
