// Built-in model presets (`shardtune models`): published architectures with the exact shapes of
// their Hugging Face config.json, plus two tiny ones for CPU runs and tests. Also resolves the
// CLI's --model argument (preset name, shardtune.model JSON or HF config.json).
#pragma once

#include <cstdint>
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

// Resolves a --model argument: a path to an existing file (a "shardtune.model" JSON, or a HF
// config.json when LooksLikeHfConfig()), else a preset name. HF import warnings (unknown keys)
// are appended to `warnings` when it is not null. Throws InputError.
ModelSpec ResolveModelArg(const std::string& arg, std::vector<std::string>* warnings);

}  // namespace shardtune::model
