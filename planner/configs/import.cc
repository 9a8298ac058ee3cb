// Config import: format names and detection, the typed reader with key tables, and the helpers
// the per-format readers share (sharding from an FSDP2 mesh, layer-class and world checks).
#include "planner/configs/import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"
#include "planner/configs/config_toml.h"
#include "planner/configs/config_yaml.h"
#include "planner/configs/export.h"
#include "planner/configs/format_names.h"
#include "planner/configs/hydra_compose.h"
#include "planner/configs/import_reader.h"
#include "planner/configs/interpolation.h"

namespace shardtune::configs {
namespace {

using model::EscapeControls;
using model::Join;

// Deepest nesting of [ and { in JSON text (outside strings): the JSON reader does not bound it
// and converting and printing the tree recurse once per level.
constexpr int kMaxJsonDepth = 64;
void CheckJsonDepth(const std::string& text, const std::string& file) {
  int depth = 0;
  bool in_string = false;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw InputError(file + ":" + std::to_string(line) + ": expected at most " +
                         std::to_string(kMaxJsonDepth) +
                         " levels of nested arrays and objects, got more");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string Trim(const std::string& s) {
  size_t a = s.find_first_not_of(' ');
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(' ') - a + 1);
}

bool LooksLikeJson(const std::string& text) {
  size_t i = text.find_first_not_of(" \t\r\n");
  return i != std::string::npos && text[i] == '{';
}

// A table header ("[training]") in text that is not JSON is TOML: torchtitan's job config
// (config_toml.h).
bool IsTomlText(const std::string& text) { return !LooksLikeJson(text) && LooksLikeToml(text); }

internal::Json ParseConfig(const std::string& text, const std::string& file) {
  if (IsTomlText(text)) return ParseTomlSubset(text, file);
  if (LooksLikeJson(text)) {
    CheckUtf8(text, file);  // before the JSON reader, whose message would quote the bad byte
    CheckJsonDepth(text, file);
    return model::ParseJsonText(text, file);
  }
  return ParseYamlSubset(text, file);
}

}  // namespace

namespace internal {
std::string QuoteName(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}
}  // namespace internal

const std::vector<std::string>& ImportFormatNames() {
  static const std::vector<std::string> names = {"accelerate", "hf-trainer", "roll", "verl", "torchtitan"};
  return names;
}

const char* ToString(ImportFormat f) {
  return internal::FormatName(ImportFormatNames(), static_cast<size_t>(f), "import format");
}

ImportFormat ParseImportFormat(const std::string& text, const std::string& where) {
  return static_cast<ImportFormat>(
      internal::ParseFormatName(ImportFormatNames(), text, where, internal::QuoteName(text)));
}

ImportContext MakeImportContext(const model::ModelSpec& spec, int world_size, int gpus_per_node,
                                const std::string& world_flag) {
  ImportContext ctx;
  ctx.world_size = world_size;
  ctx.gpus_per_node = gpus_per_node;
  ctx.world_flag = world_flag;
  ctx.layer_class = HfDecoderLayerClass(spec);
  ctx.tied_embeddings = spec.tied_embeddings;
  ctx.model_parameters = model::ParameterCount(spec);
  if (spec.vision.enabled()) {
    ctx.vision_tower_prefix = spec.vision.kind == model::VisionKind::kSiglip ? "model.vision_tower" : "model.visual";
  }
  return ctx;
}

ImportContext MakeImportContext(const model::ModelSpec& spec,
                                const profiles::ClusterSpec& cluster) {
  return MakeImportContext(spec, cluster.world_size(), cluster.gpus_per_node, "--cluster");
}

namespace {
ImportFormat DetectFromTree(const internal::Json& doc, const std::string& file, bool json_text,
                            bool toml_text) {
  const std::string formats = "use --from-format accelerate|hf-trainer|roll|verl|torchtitan";
  if (!doc.is_object()) {
    throw InputError(file + ": expected a mapping of config keys, got " + internal::Got(doc));
  }
  if (toml_text) return ImportFormat::kTorchtitan;  // the only TOML format
  if (json_text && (doc.contains("zero_optimization") || doc.contains("train_micro_batch_size_per_gpu")) &&
      !doc.contains("per_device_train_batch_size")) {
    // DeepSpeed's config (what export --format deepspeed writes): ZeRO, not FSDP.
    throw InputError(file + ": expected HF Trainer arguments or another FSDP config, got a DeepSpeed "
                            "config (" + std::string(doc.contains("zero_optimization")
                                                         ? "zero_optimization"
                                                         : "train_micro_batch_size_per_gpu") +
                     "), which --from does not read: shardtune estimates FSDP jobs; give the "
                     "plan as JSON with --plan or as flags");
  }
  if (json_text) return ImportFormat::kHfTrainer;  // the only JSON format
  if (doc.contains("distributed_type") || doc.contains("compute_environment")) {
    return ImportFormat::kAccelerate;
  }
  if (doc.contains("actor_rollout_ref") ||
      (doc.contains("data") && doc.contains("model") &&
       (doc.contains("trainer") || doc.contains("engine")))) {  // engine: verl's engine SFT layout
    return ImportFormat::kVerl;
  }
  for (const auto& item : doc.items()) {
    if (item.value().is_object() && item.value().contains("strategy_args")) {
      return ImportFormat::kRoll;
    }
  }
  // TRL's `trl sft --config` YAML: SFTConfig (TrainingArguments) with ModelConfig and
  // ScriptArguments in one mapping (trl/scripts/utils.py TrlParser).
  if (doc.contains("per_device_train_batch_size") || doc.contains("output_dir") ||
      doc.contains("model_name_or_path") || doc.contains("dataset_name")) {
    return ImportFormat::kHfTrainer;
  }
  throw InputError(
      file +
      ": expected an Accelerate config (distributed_type), HF Trainer or TRL arguments "
      "(per_device_train_batch_size, model_name_or_path), a ROLL pipeline (a worker with strategy_args) or "
      "a verl config (actor_rollout_ref, or data and model with trainer or engine), got none of their "
      "keys; " +
      formats);
}
}  // namespace

ImportFormat DetectImportFormat(const std::string& text, const std::string& file) {
  return DetectFromTree(ParseConfig(text, file), file, LooksLikeJson(text), IsTomlText(text));
}

ImportResult ImportConfigText(const std::string& text, const std::string& file,
                              const ImportContext& ctx, const ImportFormat* format,
                              model::Plan* plan) {
  internal::Json doc = ParseConfig(text, file);
  if (!doc.is_object()) {
    throw InputError(file + ": expected a mapping of config keys, got " + internal::Got(doc));
  }
  const bool yaml_text = !LooksLikeJson(text) && !IsTomlText(text);
  if (yaml_text) {
    // verl (Hydra) and ROLL (OmegaConf) load their YAML through OmegaConf's loader, whose
    // scalars differ from PyYAML's (config_yaml.h YamlFlavor); Accelerate uses yaml.safe_load.
    std::optional<ImportFormat> f = format ? std::optional<ImportFormat>(*format) : std::nullopt;
    if (!f && !HasDefaultsList(doc)) {
      try {
        f = DetectFromTree(doc, file, false, false);
      } catch (const InputError&) {
        // detected (and reported) again below, after the overrides
      }
    }
    if (!f || *f == ImportFormat::kVerl || *f == ImportFormat::kRoll) {
      doc = ParseYamlSubset(text, file, YamlFlavor::kOmegaConf);
    }
  }
  std::vector<std::string> applied;
  std::vector<std::string> composed_from;
  std::vector<std::string> value_overrides = ctx.overrides;
  // A verl or ROLL file with a Hydra defaults list is composed first, as their trainers compose it
  // (hydra_compose.h); the overrides that choose config groups are taken there.
  const bool hydra_format = !format || *format == ImportFormat::kVerl || *format == ImportFormat::kRoll;
  if (hydra_format && yaml_text && HasDefaultsList(doc)) {
    std::error_code ec;
    std::string cwd = std::filesystem::current_path(ec).string();
    // verl's own primaries: a file over them (a recipe, export --format verl) read away from a
    // verl checkout keeps verl's defaults through the reader, which knows them key by key.
    HydraComposition c =
        ComposeHydraConfig(doc, text, file, ctx.overrides, cwd, {"ppo_trainer", "sft_trainer", "sft_trainer_engine"});
    doc = std::move(c.doc);
    composed_from = std::move(c.sources);
    applied = c.group_overrides;
    value_overrides.clear();
    for (const auto& o : ctx.overrides) {
      if (std::find(applied.begin(), applied.end(), o) == applied.end()) value_overrides.push_back(o);
    }
  }
  for (const auto& text_override : value_overrides) {
    Override o = ParseOverride(text_override, "--set");
    if (!ctx.overrides_add_top_level && !doc.contains(o.path.front())) continue;
    ApplyOverride(o, "--set", &doc);
    applied.push_back(text_override);
  }
  ImportFormat f = format ? *format
                          : DetectFromTree(doc, file, LooksLikeJson(text), IsTomlText(text));
  // verl (Hydra) and ROLL (OmegaConf.load + structured configs) resolve "${...}"; Accelerate and
  // the HF Trainer read their files with yaml / json, where "${" is text like any other.
  UnresolvedInterpolations unresolved;
  if (f == ImportFormat::kVerl || f == ImportFormat::kRoll) {
    unresolved = ResolveInterpolations(&doc, ProcessEnvironment());
  }
  internal::UnresolvedScope scope(&unresolved);
  // The reader of each format, in ImportFormat's order.
  static constexpr internal::FormatReader kReaders[] = {
      internal::ImportAccelerate, internal::ImportHfTrainer, internal::ImportRoll,
      internal::ImportVerl, internal::ImportTorchtitan};
  auto i = static_cast<size_t>(f);
  SHARDTUNE_CHECK(i < std::size(kReaders)) << "import format " << i << " has no reader";
  std::vector<std::string> ignored;
  const internal::ConfigReader top(doc, file, "", &ignored);
  ImportResult r = kReaders[i](top, ctx, &ignored, plan);
  r.format = f;
  std::string warning = internal::IgnoredWarning(file, ignored);
  if (!warning.empty()) r.warnings.insert(r.warnings.begin(), warning);
  r.overrides_applied = applied;
  r.composed_from = composed_from;
  return r;
}

ImportResult ImportConfigFile(const std::string& path, const ImportContext& ctx,
                              const ImportFormat* format, model::Plan* plan) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": expected a readable config file, got an unreadable path");
  std::ostringstream text;
  text << in.rdbuf();
  return ImportConfigText(text.str(), path, ctx, format, plan);
}

namespace internal {

std::string Got(const Json& v) {
  switch (v.type()) {
    case Json::value_t::array:
      return "a list " + v.dump(-1, ' ', false, Json::error_handler_t::replace);
    case Json::value_t::object:
      return "a mapping";
    case Json::value_t::null:
      return "null";
    case Json::value_t::number_float:  // JSON has no infinity: dump() would say null
      if (std::isinf(v.get<double>())) return v.get<double>() > 0 ? ".inf" : "-.inf";
      if (std::isnan(v.get<double>())) return ".nan";
      return v.dump();
    default:
      return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

ConfigReader::ConfigReader(const Json& obj, std::string file, std::string pointer,
                           std::vector<std::string>* ignored)
    : obj_(obj), file_(std::move(file)), pointer_(std::move(pointer)), ignored_(ignored) {
  if (!obj_.is_object()) {
    throw InputError(file_ + ":" + (pointer_.empty() ? "/" : EscapeControls(pointer_)) +
                     ": expected a mapping, got " + Got(obj_));
  }
}

std::string ConfigReader::Where(const std::string& key) const {
  return file_ + ":" + EscapeControls(pointer_) + "/" + model::EscapePointerToken(key);
}

void ConfigReader::Fail(const std::string& key, const std::string& expected) const {
  const Json* v = Raw(key);
  throw InputError(Where(key) + ": expected " + expected + ", got " + (v ? Got(*v) : "nothing"));
}

namespace {
thread_local const UnresolvedInterpolations* g_unresolved = nullptr;
thread_local const char* g_unknown_ignored_why = nullptr;

bool Neutral(const Json& v, const Json& neutral) {
  if (v.is_null() || (v.is_boolean() && !v.get<bool>())) return true;
  if ((v.is_string() || v.is_array() || v.is_object()) && v.empty()) return true;
  return !neutral.is_null() && v == neutral;
}
}  // namespace

void ConfigReader::CheckKeys(const KeyTable& table) const {
  std::vector<std::string> names;
  for (const auto& r : table) names.push_back(r.key);
  for (const auto& item : obj_.items()) {
    const std::string& key = item.key();
    auto rule =
        std::find_if(table.begin(), table.end(), [&](const KeyRule& r) { return r.key == key; });
    if (rule == table.end()) {
      std::string hint = model::ClosestName(key, names);
      if (g_unknown_ignored_why != nullptr) {
        if (ignored_) {
          ignored_->push_back(pointer_ + "/" + model::EscapePointerToken(key) + " (" +
                              g_unknown_ignored_why +
                              (hint.empty() ? "" : "; did you mean \"" + hint + "\"?") + ")");
        }
        continue;
      }
      throw InputError(Where(key) + ": expected a known key, got unknown key " + QuoteName(key) +
                       model::DidYouMean(hint) +
                       "; shardtune does not know whether it changes memory or time");
    }
    if (rule->use == KeyUse::kIgnored) {
      if (ignored_) {
        ignored_->push_back(pointer_ + "/" + model::EscapePointerToken(key) +
                            (rule->why.empty() ? "" : " (" + rule->why + ")"));
      }
      continue;
    }
    if (rule->use != KeyUse::kUnsupported) continue;
    ThrowIfUnresolved(key);  // a value not known cannot be called neutral
    if (!Neutral(item.value(), rule->neutral)) {
      throw InputError(
          Where(key) + ": expected " +
          (rule->neutral.is_null() ? std::string("false, null or empty") : rule->neutral.dump()) +
          " (" + rule->why + ", which shardtune does not model), got " + Got(item.value()));
    }
  }
}

const Json* ConfigReader::Raw(const std::string& key) const {
  auto it = obj_.find(key);
  return it == obj_.end() ? nullptr : &*it;
}

UnresolvedScope::UnresolvedScope(const UnresolvedInterpolations* u)
    : ScopedValue(&g_unresolved, u) {}

UnknownKeysIgnoredScope::UnknownKeysIgnoredScope(const char* why)
    : ScopedValue(&g_unknown_ignored_why, why) {}

void ConfigReader::ThrowIfUnresolved(const std::string& key) const {
  if (!g_unresolved) return;
  auto it = g_unresolved->find(pointer_ + "/" + model::EscapePointerToken(key));
  if (it == g_unresolved->end()) return;
  std::string dotted = pointer_.empty() ? key : pointer_.substr(1) + "/" + key;
  std::replace(dotted.begin(), dotted.end(), '/', '.');
  throw InputError(Where(key) + ": expected a value shardtune can read, got " + Got(*Raw(key)) +
                   ", an interpolation that does not resolve: " + EscapeControls(it->second) +
                   " (give the value with --set " + EscapeControls(dotted) + "=VALUE)");
}

bool ConfigReader::Has(const std::string& key) const {
  const Json* v = Raw(key);
  if (v == nullptr || v->is_null()) return false;
  ThrowIfUnresolved(key);
  return true;
}

std::optional<bool> ConfigReader::Bool(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s == "true") return true;
    if (s == "false") return false;
  }
  Fail(key, "true or false");
}

std::optional<int64_t> ConfigReader::Int(const std::string& key, int64_t min, int64_t max) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  int64_t x = 0;
  // 2^63 as a double: the first value past int64_t (casting it or more is undefined).
  constexpr double kInt64End = 9223372036854775808.0;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    Fail(key, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && v.get<double>() >= -kInt64End &&
             v.get<double>() < kInt64End &&
             v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
    x = static_cast<int64_t>(v.get<double>());  // 1e8 as YAML writes it
  } else {
    Fail(key, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  if (x < min || x > max) {
    Fail(key, max == INT64_MAX
                  ? "an integer >= " + std::to_string(min)
                  : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return x;
}

std::optional<double> ConfigReader::Number(const std::string& key, double min, double max) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  if (!v.is_number() || v.get<double>() < min || v.get<double>() > max) {
    std::ostringstream os;
    os << "a number in [" << min << ", " << max << "]";
    Fail(key, os.str());
  }
  return v.get<double>();
}

std::optional<std::string> ConfigReader::String(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  if (!v.is_string()) Fail(key, "a string");
  return v.get<std::string>();
}

std::optional<std::string> ConfigReader::Enum(const std::string& key,
                                              const std::vector<std::string>& allowed) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (v.is_string() && std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
  std::string hint = model::ClosestName(s, allowed);
  throw InputError(Where(key) + ": expected one of " + Join(allowed, ", ") + ", got " + Got(v) +
                   model::DidYouMean(hint));
}

std::optional<std::vector<std::string>> ConfigReader::Names(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  std::vector<std::string> out;
  if (v.is_string()) {
    std::stringstream ss(v.get<std::string>());
    std::string item;
    while (std::getline(ss, item, ',')) {
      item = Trim(item);
      if (item.empty()) Fail(key, "comma-separated names without empty entries");
      out.push_back(item);
    }
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_string() || e.get<std::string>().empty()) Fail(key, "a list of names");
      out.push_back(e.get<std::string>());
    }
  } else {
    Fail(key, "a name, comma-separated names or a list of names");
  }
  if (out.empty()) Fail(key, "at least one name");
  return out;
}

std::optional<ConfigReader> ConfigReader::Section(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = *Raw(key);
  if (!v.is_object()) Fail(key, "a mapping");
  return ConfigReader(v, file_, pointer_ + "/" + model::EscapePointerToken(key), ignored_);
}

ConfigReader ConfigReader::RequiredSection(const std::string& key) const {
  std::optional<ConfigReader> s = Section(key);
  if (!s) Fail(key, "a mapping");
  return *s;
}

void SetFsdp2Sharding(int group, int world, bool reshard, model::Plan* plan) {
  bool hybrid = group > 1 && world > 0 && group < world;
  using S = model::ShardingStrategy;
  if (hybrid) {
    plan->strategy = reshard ? S::kHybridShard : S::kHybridShardZero2;
    plan->shard_group_size = group;
  } else {
    plan->strategy = reshard ? S::kFullShard : S::kShardGradOp;
    plan->shard_group_size = 0;
  }
  plan->reshard_after_forward = reshard;
}

void CheckLayerClasses(const ConfigReader& reader, const std::string& key,
                       const std::vector<std::string>& classes, const ImportContext& ctx) {
  if (ctx.layer_class.empty()) return;
  for (const auto& c : classes) {
    if (c != ctx.layer_class) {
      throw InputError(reader.Where(key) + ": expected the model's block class \"" +
                       ctx.layer_class + "\", got " + QuoteName(c) +
                       " (shardtune models FSDP units of whole blocks of this model)");
    }
  }
}

// PEFT's "all-linear" (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers: every
// nn.Linear but the output layer), by the HF modeling file of each block class.
std::vector<std::string> AllLinearTargets(const std::string& layer_class) {
  if (layer_class == "GPT2Block") return {"c_attn", "c_proj", "c_fc"};
  if (layer_class == "GPTNeoXLayer") {
    return {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
  }
  if (layer_class == "Phi3DecoderLayer") return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

model::DType ParseTrainerDtype(const ConfigReader& reader, const std::string& key) {
  const Json* v = reader.Raw(key);
  std::string s = v && v->is_string() ? v->get<std::string>() : "";
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "bf16" || s == "bfloat16") return model::DType::kBf16;
  if (s == "fp16" || s == "float16" || s == "half") return model::DType::kFp16;
  if (s == "fp32" || s == "float32" || s == "float") return model::DType::kFp32;
  reader.Fail(key, "one of bf16, bfloat16, fp16, float16, fp32, float32");
}

void CheckWorld(int config_world, const ImportContext& ctx, const std::string& where) {
  if (config_world <= 0 || ctx.world_size <= 0 || config_world == ctx.world_size) return;
  std::string hint = ctx.world_flag == "--cluster" ? "give a --cluster with that many GPUs"
                                                   : "run with " + ctx.world_flag + " " +
                                                         std::to_string(config_world);
  throw InputError(where + ": expected the " + ctx.world_flag + " world size " +
                   std::to_string(ctx.world_size) + " ranks, got " + std::to_string(config_world) +
                   " (" + hint + ", or edit the config)");
}

std::string IgnoredWarning(const std::string& file, const std::vector<std::string>& ignored) {
  if (ignored.empty()) return "";
  return file + ": ignored " + std::to_string(ignored.size()) +
         " key(s) that do not change memory or time: " + EscapeControls(Join(ignored, ", "));
}

}  // namespace internal
}  // namespace shardtune::configs
