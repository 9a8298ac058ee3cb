// Import of a Hugging Face transformers config.json into a ModelSpec, for the architectures whose
// modeling files we follow: Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE, Phi-3,
// OLMo 2, Gemma 1 / 2 / 3 (Gemma 3 with its SigLIP tower), GPT-OSS, GPT-2, GPT-NeoX, DeepSeek-V2 / V3,
// Seed-OSS, Qwen2-VL, Qwen2.5-VL, Qwen3-VL (with their vision towers: model/vision.h)
// (SupportedHfArchitectures()).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_spec.h"

namespace shardtune::model {

// True when `j` is an object with "architectures" or "model_type" and no shardtune "schema".
bool LooksLikeHfConfig(const nlohmann::json& j);

// The architectures ImportHfConfig() accepts, e.g. "LlamaForCausalLM".
const std::vector<std::string>& SupportedHfArchitectures();

// Maps a config.json onto a ModelSpec. The architecture is "architectures"[0] (or, without it,
// the one "model_type" names). Shape keys are required and type-checked ("config.json:/hidden_size:
// expected integer in [1, ...], got ..."); keys with no memory effect (rope_theta, torch_dtype,
// token ids, dropout, ...) are skipped from a per-architecture allow-list; any other key is
// skipped with a message appended to `warnings` (when not null). Throws InputError on a missing
// or mistyped key, an unsupported architecture, or a resulting spec with Problems().
ModelSpec ImportHfConfig(const nlohmann::json& j, const std::string& file,
                         std::vector<std::string>* warnings = nullptr);
// Reads `path` and imports it. Throws InputError.
ModelSpec ReadHfConfigFile(const std::string& path, std::vector<std::string>* warnings = nullptr);

}  // namespace shardtune::model
