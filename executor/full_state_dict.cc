// Gathering the full parameters unit by unit and writing them as safetensors on rank 0.
#include "executor/full_state_dict.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)

#include <cstring>
#include <nlohmann/json.hpp>

#include "executor/checkpoint.h"
#include "executor/communicator.h"
#include "executor/fsdp_runtime.h"
#include "model/errors.h"

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
  Communicator& shard_comm = *runtime.groups().shard;
  SHARDTUNE_CHECK(!shard_comm.emulated() || shard_comm.size() == 1)
      << "a full state dict needs real shard groups";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (FlatParam* u : runtime.units()) {
    at::Tensor shard = u->shard().to(at::kFloat);  // [shard_numel] fp32 (frozen: upcast)
    at::Tensor full = shard;
    if (shard_comm.size() > 1) {
      full = at::empty({u->padded_numel()}, shard.options());  // [padded_numel] fp32
      shard_comm.AllGather(shard, full)->Wait();
    }
    if (rank != 0) continue;
    at::Tensor host = full.to(at::kCPU).contiguous();
    for (const ParamSlot& s : u->slots()) {
      auto begin = static_cast<int64_t>(data.size());
      auto bytes = static_cast<size_t>(s.numel) * sizeof(float);
      data.append(static_cast<const char*>(host.data_ptr()) + s.offset * 4, bytes);  // LE fp32
      header[SavedName(s.name)] = {{"dtype", "F32"},
                        {"shape", s.shape},
                        {"data_offsets", {begin, static_cast<int64_t>(data.size())}}};
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
