// Gathering the full parameters unit by unit and writing them as safetensors on rank 0.
#include "executor/train/full_state_dict.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)

#include <cstring>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

#include "executor/train/checkpoint.h"
#include "executor/comm/communicator.h"
#include "executor/fsdp/fsdp_runtime.h"
#include "model/errors.h"
#include "model/module_tree.h"

namespace shardtune::exec {
namespace {

// LoRA adapters as PEFT saves them: get_peft_model_state_dict drops the adapter name
// (peft/utils/save_and_load.py), "...q_proj.lora_A.default.weight" -> "...q_proj.lora_A.weight".
std::string SavedName(std::string name) {
  for (const char* k : {".lora_A.default.", ".lora_B.default."}) {
    size_t at = name.find(k);
    if (at != std::string::npos) name.replace(at + 7, 8, "");  // drop "default."
  }
  return name;
}

}  // namespace

void ExportFullStateDict(FsdpRuntime& runtime, int rank, const std::string& model_name,
                         const std::string& path) {
  at::NoGradGuard no_grad;
  const ProcessGroups& groups = runtime.groups();
  Communicator& shard_comm = *groups.shard;
  SHARDTUNE_CHECK(!shard_comm.emulated() || shard_comm.size() == 1)
      << "a full state dict needs real shard groups";
  const model::ModelSpec& spec = runtime.transformer().spec();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  // Appends `numel` fp32 values at `src` under transformers' name and shape for the module
  // tree's `name` (model::HfParameter), then the buffers the checkpoint keeps after it.
  auto append = [&](const std::string& name, const std::vector<int64_t>& shape, const float* src,
                    int64_t numel) {
    model::HfTensor t = model::HfParameter(spec, SavedName(name), shape);
    auto begin = static_cast<int64_t>(data.size());
    data.append(reinterpret_cast<const char*>(src), static_cast<size_t>(numel) * sizeof(float));
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {begin, static_cast<int64_t>(data.size())}}};
    for (const model::HfTensor& b : model::HfBuffersAfter(spec, t.name)) {
      int64_t n = 1;
      for (int64_t d : b.shape) n *= d;
      begin = static_cast<int64_t>(data.size());
      data.append(static_cast<size_t>(n) * sizeof(float), '\0');  // zeros (fp32 0 is all-zero bytes)
      header[b.name] = {{"dtype", "F32"},
                        {"shape", b.shape},
                        {"data_offsets", {begin, static_cast<int64_t>(data.size())}}};
    }
  };
  std::vector<FlatParam*> units = runtime.units();
  const std::vector<model::FsdpUnit>& specs = runtime.unit_specs();
  for (size_t ui = 0; ui < units.size(); ++ui) {
    FlatParam* u = units[ui];
    const bool expert_parallel = specs[ui].expert_parallel;
    Communicator& comm = expert_parallel ? *groups.expert_shard : shard_comm;
    at::Tensor shard = u->shard().to(at::kFloat);  // [shard_numel] fp32 (frozen: upcast)
    at::Tensor full = shard;
    if (comm.size() > 1) {
      full = at::empty({u->padded_numel()}, shard.options());  // [padded_numel] fp32
      comm.AllGather(shard, full)->Wait();
    }
    if (!expert_parallel) {
      if (rank != 0) continue;
      at::Tensor host = full.to(at::kCPU).contiguous();
      for (const ParamSlot& s : u->slots()) {
        append(s.name, s.shape, host.data_ptr<float>() + s.offset, s.numel);
      }
      continue;
    }
    // Expert parallelism: each ep rank holds E / ep experts in GroupedExperts' layout (w1, w2,
    // w3 [el, ...]); rank 0's ep group gathers them and writes each expert as the HF modules
    // it stands for (Transformer::InitLocalExperts' mapping), expert by expert.
    Communicator& ep = *groups.ep;
    at::Tensor all = at::empty({ep.size() * u->padded_numel()}, full.options());
    ep.AllGather(full.contiguous(), all)->Wait();
    if (rank != 0) continue;
    at::Tensor host = all.to(at::kCPU).contiguous();
    if (spec.moe.gpt_oss_experts) {
      // GPT-OSS's experts are [E, ...] tensors in transformers too (gate_up_proj, its bias,
      // down_proj, its bias): each the ep ranks' [E / ep, ...] slices in rank order.
      for (const ParamSlot& s : u->slots()) {
        std::vector<float> whole;
        whole.reserve(static_cast<size_t>(s.numel * ep.size()));
        for (int r = 0; r < ep.size(); ++r) {
          const float* src = host.data_ptr<float>() + r * u->padded_numel() + s.offset;
          whole.insert(whole.end(), src, src + s.numel);
        }
        std::vector<int64_t> shape = s.shape;
        shape[0] *= ep.size();
        append(s.name, shape, whole.data(), static_cast<int64_t>(whole.size()));
      }
      continue;
    }
    const std::string& moe_experts = specs[ui].name;  // "<moe>.experts"
    const int64_t H = spec.hidden;
    const int64_t F = spec.moe.expert_ffn_hidden > 0 ? spec.moe.expert_ffn_hidden : spec.ffn_hidden;
    const bool gated = spec.mlp == model::MlpKind::kSwiGlu;
    std::map<std::string, const ParamSlot*> by_module;  // HF module -> its GroupedExperts tensor
    for (const ParamSlot& s : u->slots()) {
      by_module[model::GroupedExpertHfModule(s.name.substr(s.name.rfind('.') + 1), gated)] = &s;
    }
    std::vector<std::string> modules = {"up_proj", "down_proj"};  // HF's module order
    if (gated) modules.insert(modules.begin(), "gate_proj");
    for (const std::string& m : modules) {
      SHARDTUNE_CHECK(by_module.count(m) > 0) << moe_experts << ": no GroupedExperts tensor for " << m;
    }
    const int64_t el = by_module.at("down_proj")->shape[0];
    for (int r = 0; r < ep.size(); ++r) {
      const float* base = host.data_ptr<float>() + r * u->padded_numel();
      for (int64_t i = 0; i < el; ++i) {
        const std::string expert = moe_experts + "." + std::to_string(r * el + i);
        for (const std::string& m : modules) {
          // gate_proj, up_proj [F, H]; down_proj [H, F]: F·H elements per expert either way.
          std::vector<int64_t> shape = m == "down_proj" ? std::vector<int64_t>{H, F}
                                                        : std::vector<int64_t>{F, H};
          append(expert + "." + m + ".weight", shape, base + by_module.at(m)->offset + i * F * H, F * H);
        }
      }
    }
  }
  if (rank != 0) return;
  header["__metadata__"] = {{"format", "pt"}, {"model", model_name}, {"writer", "shardtune"}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string file(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  file += text;
  file += data;
  WriteFileAtomically(path, file);
}

}  // namespace shardtune::exec
