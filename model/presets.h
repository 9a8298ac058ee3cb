// Built-in model presets (`shardtune models`): published architectures with the exact shapes of
// their Hugging Face config.json, plus two tiny ones for CPU runs and tests. Also resolves the
// CLI's --model argument (preset name, shardtune.model JSON or HF config.json).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace shardtune::model {

struct PresetInfo {
  std::string name;                  // what --model accepts, e.g. "llama3-8b"
  ModelSpec spec;                    // spec.name == name, spec.source == source
  int64_t published_parameters = 0;  // the published exact count; 0 when none is published
  std::string source;                // the HF config.json or paper the shape comes from
};

// Every preset, in the order `shardtune models` lists them. Thread-safe (built once, immutable).
const std::vector<PresetInfo>& ModelPresets();
// The spec of the preset `name`. Throws InputError "--model: unknown preset \"x\" (did you mean
// \"y\"?); known: ...".
ModelSpec FindModelPreset(const std::string& name);

// The Hugging Face repository id ("Qwen/Qwen3-8B") whose config.json a preset copies; "" for
// presets from papers or shardtune's own.
std::string PresetHfId(const PresetInfo& info);

// A preset a model name denotes, as trainer configs name models (verl's model.path, ROLL's
// pretrain, --model): a Hugging Face id ("Qwen/Qwen3-8B"), a local copy laid out as the hub
// (".../Qwen/Qwen3-8B", the hub cache's ".../models--Qwen--Qwen3-8B/snapshots/<hash>"), or a
// directory named as the repository ("~/models/Qwen3-8B"), all case-insensitive. An instruction-
// tuned or base variant ("Qwen2.5-7B-Instruct", "Llama-3.1-8B-Instruct", "gemma-2-9b-it",
// "Qwen3-8B-Base") is matched to the preset of the same architecture, with `how` saying so.
struct PresetMatch {
  std::string preset;  // PresetInfo::name
  std::string hf_id;   // the preset's repository
  std::string how;     // "" when the name is the preset's repository; else why it was matched
  // Matched as a post-trained or base release of the preset's repository: the shapes are its
  // family's, not read from the model's own config.json.
  bool variant = false;
};
std::optional<PresetMatch> FindPresetByHfName(const std::string& name);

// Resolves a --model argument: a path to an existing file (a "shardtune.model" JSON, or a HF
// config.json when LooksLikeHfConfig()), a directory holding a config.json (a downloaded model),
// a preset name, else a Hugging Face model name FindPresetByHfName matches. HF import warnings
// (unknown keys) and how a name was matched are appended to `warnings` when it is not null.
// `where` names the argument in errors ("--model", "cfg.yaml:/actor_rollout_ref/model/path");
// `flag` is the option the errors tell the user to give instead ("--model", "--reward-model").
// Throws InputError.
ModelSpec ResolveModelArg(const std::string& arg, std::vector<std::string>* warnings,
                          const std::string& where = "--model", const std::string& flag = "--model");

}  // namespace shardtune::model
