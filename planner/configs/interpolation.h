// OmegaConf interpolations and Hydra command-line overrides, applied to a parsed trainer config
// before its reader walks it (verl and ROLL configs are OmegaConf documents: verl composes them
// with Hydra, ROLL loads them with OmegaConf and keeps pipeline-level variables such as
// `lora_rank: 32` that workers name as `${lora_rank}`).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace shardtune::configs {

// Reads an environment variable; nullopt when unset. The default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnvironment();

// Interpolations that did not resolve: JSON pointer of the value -> why ("no key lora_rank in the
// file", "environment variable DATA_DIR is not set", "resolver now is Hydra's, known only at run
// time"). A reader that reads such a value says so (ConfigReader); one that never reads it (a path,
// a logging setting) is not bothered, as OmegaConf resolves a value only when it is accessed.
using UnresolvedInterpolations = std::map<std::string, std::string>;

// Resolves every interpolation of `doc` in place as OmegaConf 2.x does (omegaconf/grammar,
// docs "Variable interpolation" and "Resolvers"):
//  - "${a.b.c}" (absolute, from the root), "${.x}" (relative to the value's own mapping),
//    "${..x}" (one level up per extra dot); "a.0" and "a[0]" index a list;
//  - a value that is one interpolation takes the referenced value with its type (an integer, a
//    mapping); an interpolation inside a longer string is replaced by the value's text;
//  - resolvers oc.env:NAME[,default] (the variable's text, read as a YAML scalar so that "8" is
//    the integer Hydra's typed config would make of it), oc.select:key[,default] and
//    oc.decode:text; "\${" is a literal "${";
//  - references are followed recursively; a cycle is unresolved ("a cycle: a -> b -> a").
// Values that cannot be resolved stay as written and are returned with the reason.
UnresolvedInterpolations ResolveInterpolations(nlohmann::ordered_json* doc, const EnvLookup& env);

// One Hydra command-line override as verl's launch scripts write them (hydra docs "Override
// grammar"): "a.b.c=VALUE" sets (creating missing mappings), "+a.b=VALUE" adds a key that must be
// absent, "++a.b=VALUE" sets whether present or not, "~a.b" (or "~a.b=VALUE") deletes. VALUE is a
// YAML scalar (null, true/false, numbers, quoted or plain strings, "${...}" kept for resolution)
// or a flow list "[a, b]".
struct Override {
  enum class Op { kSet, kAdd, kForceSet, kDelete };
  Op op = Op::kSet;
  std::vector<std::string> path;  // "a.b.c" -> {a, b, c}
  nlohmann::ordered_json value;
  std::string text;  // as given, for messages
};
// Parses `text`; `where` ("--set") prefixes the InputError.
Override ParseOverride(const std::string& text, const std::string& where);
// Applies `o` to `doc`. Throws InputError naming `where` and the key when "+" finds the key
// present, "~" finds it absent, or a path component is not a mapping.
void ApplyOverride(const Override& o, const std::string& where, nlohmann::ordered_json* doc);

}  // namespace shardtune::configs
