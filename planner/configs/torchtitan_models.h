// torchtitan's [model] name and flavor for shardtune presets with the same architecture, both
// ways (export_toml.cc writes them, import_torchtitan.cc reads them). pytorch/torchtitan v0.2.2:
// models/llama3/__init__.py llama3_args; models/qwen3/__init__.py qwen3_args ("0.6B" .. "32B":
// the Qwen3 dense shapes, weight tying up to 4B; "30B-A3B", "235B-A22B" with moe_enabled);
// models/gpt_oss/__init__.py gptoss_configs "20b" / "120b" (24 / 36 layers, 32 / 128 experts top
// 4, gate bias, route_norm); models/deepseek_v3/__init__.py deepseekv3_args "671B" (61 layers,
// 3 dense, 256 experts + 1 shared, top 8 of 8 groups limited to 4, MLA ranks 1536 / 512).
#pragma once

#include <string>
#include <utility>

namespace shardtune::configs::internal {

struct TorchtitanFlavor {
  const char* preset;
  const char* name;
  const char* flavor;
};

inline constexpr TorchtitanFlavor kTorchtitanFlavors[] = {
    {"llama3-8b", "llama3", "8B"},
    {"llama3-70b", "llama3", "70B"},
    {"llama3-405b", "llama3", "405B"},
    {"qwen3-0.6b", "qwen3", "0.6B"},
    {"qwen3-1.7b", "qwen3", "1.7B"},
    {"qwen3-4b", "qwen3", "4B"},
    {"qwen3-8b", "qwen3", "8B"},
    {"qwen3-14b", "qwen3", "14B"},
    {"qwen3-32b", "qwen3", "32B"},
    {"qwen3-30b-a3b", "qwen3", "30B-A3B"},
    {"qwen3-235b-a22b", "qwen3", "235B-A22B"},
    {"gpt-oss-20b", "gpt_oss", "20b"},
    {"gpt-oss-120b", "gpt_oss", "120b"},
    {"deepseek-v3", "deepseek_v3", "671B"},
};

// {name, flavor} for a preset; {"", ""} when torchtitan ships none.
inline std::pair<std::string, std::string> TorchtitanModel(const std::string& preset) {
  for (const TorchtitanFlavor& f : kTorchtitanFlavors) {
    if (preset == f.preset) return {f.name, f.flavor};
  }
  return {"", ""};
}

// The preset for torchtitan's name and flavor; "" when none has that architecture.
inline std::string PresetOfTorchtitan(const std::string& name, const std::string& flavor) {
  for (const TorchtitanFlavor& f : kTorchtitanFlavors) {
    if (name == f.name && flavor == f.flavor) return f.preset;
  }
  return "";
}

}  // namespace shardtune::configs::internal
