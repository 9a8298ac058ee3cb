// MoE memory that does not scale with tokens: HF DeepSeek's router runs
// F.linear(x.float(), W.float()) (modeling_deepseek_v3.py DeepseekV3TopkRouter), so autograd keeps
// an fp32 copy of the router weight [E, H] per MoE layer until that layer's backward; full
// checkpointing keeps only the block input, and an fp32 weight is not copied. Expected bytes:
// the block ledger's saved bytes per token x tokens, plus E x H x 4 per MoE block.
#include <gtest/gtest.h>

#include "model/activations.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"

namespace shardtune::sim {
namespace {

// The activation bytes each block's forward op allocates in step 1, by block (0-based).
std::vector<int64_t> SavedPerBlock(const StepProgram& prog, int layers) {
  std::vector<int64_t> out(static_cast<size_t>(layers), 0);
  for (const auto& op : prog.ops) {
    if (op.step != 1 || op.kind != OpKind::kForward || op.segment < 1 || op.segment > layers) continue;
    for (uint32_t a = op.mem_begin; a < op.mem_end; ++a) {
      const MemAction& m = prog.actions[a];
      if (m.category == Category::kActivations && m.bytes > 0) out[static_cast<size_t>(op.segment - 1)] += m.bytes;
    }
  }
  return out;
}

TEST(MoeMemoryTest, DeepseekRouterKeepsAnFp32WeightCopyPerMoeLayer) {
  model::ModelSpec spec = model::FindModelPreset("deepseek-v3");
  spec.num_layers = 5;  // 3 dense blocks (first_k_dense_replace), then 2 MoE blocks
  ASSERT_EQ(spec.moe.first_dense_layers, 3);
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 1024;
  const double tokens = 1024;
  const int64_t copy = static_cast<int64_t>(spec.moe.num_experts) * spec.hidden * 4;  // 256 x 7168 x 4
  EXPECT_EQ(copy, 7'340'032);
  auto opt = model::ActivationOptionsFor(p, 1024);
  const double moe_saved = model::ComputeBlockActivations(spec, opt).full.saved_per_token;
  const double dense_saved = model::ComputeBlockActivations(spec.DenseLayerSpec(), opt).full.saved_per_token;
  std::vector<int64_t> got = SavedPerBlock(SimulateStep(spec, c, p).program, 5);
  for (int b = 0; b < 5; ++b) {
    bool moe = b >= 3;
    int64_t expected = static_cast<int64_t>((moe ? moe_saved : dense_saved) * tokens) + (moe ? copy : 0);
    EXPECT_NEAR(static_cast<double>(got[static_cast<size_t>(b)]), static_cast<double>(expected), 2.0) << b;
  }
  // Full checkpointing: only the block input [T, H] bf16 is kept, no copy.
  p.checkpointing = model::Checkpointing::kFull;
  got = SavedPerBlock(SimulateStep(spec, c, p).program, 5);
  EXPECT_NEAR(static_cast<double>(got[4]), tokens * spec.hidden * 2, 2.0);
  // fp32 compute: W.float() is W itself.
  p.checkpointing = model::Checkpointing::kNone;
  p.param_dtype = model::DType::kFp32;
  opt = model::ActivationOptionsFor(p, 1024);
  got = SavedPerBlock(SimulateStep(spec, c, p).program, 5);
  EXPECT_NEAR(static_cast<double>(got[4]),
              model::ComputeBlockActivations(spec, opt).full.saved_per_token * tokens, 2.0);
}

}  // namespace
}  // namespace shardtune::sim
