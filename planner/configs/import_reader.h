// Internals of config import shared by the per-format readers (import_accelerate.cc: Accelerate
// and HF Trainer; import_roll.cc; import_verl.cc): typed reads with "file:/key/path" messages and
// the per-format key tables that classify every key. Not a public API.
#pragma once

#include <nlohmann/json.hpp>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/plan.h"
#include "planner/configs/import.h"
#include "planner/configs/interpolation.h"

namespace shardtune::configs::internal {

using Json = nlohmann::ordered_json;

// What a key of a config means to shardtune.
enum class KeyUse {
  kMapped,       // read into the plan (or checked against the cluster / model)
  kIgnored,      // no effect on memory or time (paths, logging, learning rate), or a key the
                 // framework itself no longer reads (deprecated: `why` says so): a warning
  kUnsupported,  // changes memory or time in a way shardtune does not model: an error unless
                 // the value is neutral (null, false, empty, or `neutral`)
};
struct KeyRule {
  KeyRule(std::string k, KeyUse u = KeyUse::kMapped, std::string w = "", Json n = nullptr)
      : key(std::move(k)), use(u), why(std::move(w)), neutral(std::move(n)) {}
  std::string key;
  KeyUse use = KeyUse::kMapped;
  std::string why;         // for kUnsupported: what it does (in the error); kIgnored: optional,
                           // shown beside the key in the warning
  Json neutral = nullptr;  // kUnsupported: a further value that is harmless (e.g. 1 for tp_size)
};
using KeyTable = std::vector<KeyRule>;
// A row of `use` for each of `names`, in order: a run of keys with one use and no note, written
// as one list. Mapped({...}) and Ignored({...}) say which.
inline KeyTable KeysOf(KeyUse use, std::initializer_list<const char*> names) {
  KeyTable t;
  for (const char* n : names) t.push_back({n, use});
  return t;
}
inline KeyTable Mapped(std::initializer_list<const char*> names) {
  return KeysOf(KeyUse::kMapped, names);
}
inline KeyTable Ignored(std::initializer_list<const char*> names) {
  return KeysOf(KeyUse::kIgnored, names);
}
// The rows of `parts` one after another: a table mixing runs (Mapped, Ignored) with rows that
// carry a note. The order matters: CheckKeys' "did you mean" takes the first of equally close
// names.
inline KeyTable Concat(std::initializer_list<KeyTable> parts) {
  KeyTable t;
  for (const KeyTable& p : parts) t.insert(t.end(), p.begin(), p.end());
  return t;
}
// `t` with each of `names` added as an ignored key.
inline KeyTable WithIgnored(KeyTable t, std::initializer_list<const char*> names) {
  for (const char* n : names) t.push_back({n, KeyUse::kIgnored});
  return t;
}

// One object of a config. Collects ignored keys into `ignored` (JSON pointers).
class ConfigReader {
 public:
  ConfigReader(const Json& obj, std::string file, std::string pointer,
               std::vector<std::string>* ignored);
  // Classifies every key of the object by `table`: an unknown key is an InputError (with the
  // closest known name), an ignored one is collected, an unsupported one with a non-neutral value
  // is an InputError saying what it does.
  void CheckKeys(const KeyTable& table) const;
  // True when `key` is present and not null. Interpolations were resolved before the readers run
  // (interpolation.h); one that did not resolve is an InputError saying why, when a reader reads
  // it or when an unsupported key holds it (its value is not known to be neutral).
  bool Has(const std::string& key) const;
  // Throws that InputError when the value of `key` is an unresolved interpolation.
  void ThrowIfUnresolved(const std::string& key) const;
  std::optional<bool> Bool(const std::string& key) const;  // also "true"/"false" strings
  std::optional<int64_t> Int(const std::string& key, int64_t min, int64_t max) const;
  std::optional<double> Number(const std::string& key, double min, double max) const;
  std::optional<std::string> String(const std::string& key) const;
  // A string that must be one of `allowed` (exactly); the message lists them.
  std::optional<std::string> Enum(const std::string& key,
                                  const std::vector<std::string>& allowed) const;
  // A list of names: a list of strings, or one string split at commas (spaces trimmed).
  std::optional<std::vector<std::string>> Names(const std::string& key) const;
  // A nested object; nullopt when absent or null.
  std::optional<ConfigReader> Section(const std::string& key) const;
  // A nested object that must be there: absent, null or an interpolation is an InputError.
  ConfigReader RequiredSection(const std::string& key) const;
  const Json* Raw(const std::string& key) const;
  // "file:/pointer/key".
  std::string Where(const std::string& key) const;
  [[noreturn]] void Fail(const std::string& key, const std::string& expected) const;
  const std::string& file() const { return file_; }
  const Json& obj() const { return obj_; }

 private:
  const Json& obj_;
  std::string file_;
  std::string pointer_;
  std::vector<std::string>* ignored_;
};

// Sets `*slot`, a thread-local of import.cc, to `value` while alive and back to what it was
// after, so that scopes nest.
template <typename T>
class ScopedValue {
 public:
  ScopedValue(T* slot, T value) : slot_(slot), previous_(*slot) { *slot_ = value; }
  ~ScopedValue() { *slot_ = previous_; }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 private:
  T* slot_;
  T previous_;
};

// The unresolved interpolations of the file one import reads, for ConfigReader's messages: set by
// ImportConfigText for the duration of the reader's walk (thread-local; scopes nest).
class UnresolvedScope : public ScopedValue<const UnresolvedInterpolations*> {
 public:
  explicit UnresolvedScope(const UnresolvedInterpolations* unresolved);
};

// While alive, ConfigReader::CheckKeys collects a key its table lacks as ignored, with `why` (and
// the closest known name), instead of throwing: for a framework that itself drops keys its config
// classes lack (ROLL: dacite.from_dict with strict=False). Thread-local; scopes nest.
class UnknownKeysIgnoredScope : public ScopedValue<const char*> {
 public:
  explicit UnknownKeysIgnoredScope(const char* why);
};

// `s` as a JSON string literal ("a\\nb" for a, newline, b): how messages show a name from the file.
std::string QuoteName(const std::string& s);
// A value's description for "got ..." messages: "\"FUL_SHARD\"", "16", "true", "a list".
std::string Got(const Json& v);

// Sets the sharding strategy of `*plan` the way FSDP2 expresses it: a shard group of `group`
// ranks out of `world` (group <= 1 or >= world: one group over all ranks) and reshard after
// forward or not. Canonical: FULL_SHARD / HYBRID_SHARD reshard, SHARD_GRAD_OP / HYBRID_SHARD_ZERO2
// do not, and plan.reshard_after_forward says the same.
void SetFsdp2Sharding(int group, int world, bool reshard, model::Plan* plan);
// Checks that every class in `classes` is the model's block class (ctx.layer_class). Throws
// InputError naming reader.Where(key) otherwise.
void CheckLayerClasses(const ConfigReader& reader, const std::string& key,
                       const std::vector<std::string>& classes, const ImportContext& ctx);
// PEFT's "all-linear" for the model's block class: every linear layer of a block.
std::vector<std::string> AllLinearTargets(const std::string& layer_class);
// Parses a dtype name as the trainers write it: bf16/bfloat16/torch.bfloat16, fp16/float16/half,
// fp32/float32/float. Throws InputError at reader.Where(key).
model::DType ParseTrainerDtype(const ConfigReader& reader, const std::string& key);
// Throws InputError when the config's world size `config_world` (read at `where`) is not the
// cluster's (ctx.world_size, when known).
void CheckWorld(int config_world, const ImportContext& ctx, const std::string& where);
// The warning listing the ignored keys of `file`; "" when none.
std::string IgnoredWarning(const std::string& file, const std::vector<std::string>& ignored);

// The readers of the formats, one signature (ImportConfigText picks one by format). Each reads
// `top`, the reader of the whole file, onto `*plan` and adds to `*ignored` (the vector `top`
// collects ignored keys into) the keys it skips without a key table. The caller sets
// ImportResult::format and puts the IgnoredWarning of `*ignored` first among the warnings.
using FormatReader = ImportResult (*)(const ConfigReader& top, const ImportContext& ctx,
                                      std::vector<std::string>* ignored, model::Plan* plan);
ImportResult ImportAccelerate(const ConfigReader& top, const ImportContext& ctx,
                              std::vector<std::string>* ignored, model::Plan* plan);
ImportResult ImportHfTrainer(const ConfigReader& top, const ImportContext& ctx,
                             std::vector<std::string>* ignored, model::Plan* plan);
ImportResult ImportRoll(const ConfigReader& top, const ImportContext& ctx,
                        std::vector<std::string>* ignored, model::Plan* plan);
ImportResult ImportVerl(const ConfigReader& top, const ImportContext& ctx,
                        std::vector<std::string>* ignored, model::Plan* plan);
ImportResult ImportTorchtitan(const ConfigReader& top, const ImportContext& ctx,
                              std::vector<std::string>* ignored, model::Plan* plan);

}  // namespace shardtune::configs::internal
