// A VL model's vision tower in the walk (issue #43): its blocks' saved tensors join the activations
// of the text blocks, its units are gathered only when images run through it, and its compute ops
// carry the tower's FLOPs; expected values from the block ledgers' sums and FSDP2's rules.
#include <gtest/gtest.h>

#include <string>

#include "model/activations.h"
#include "model/hf_config.h"
#include "model/module_tree.h"
#include "model/vision.h"
#include "profiles/cluster.h"
#include "simulator/feature_savings.h"
#include "simulator/memory_model.h"
#include "tests/simulator/memory_test_util.h"

namespace shardtune::sim {
namespace {

using memtest::CategoryPeak;
using memtest::R512;

model::ModelSpec Qwen25Vl7b() {
  return model::ReadHfConfigFile(std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/qwen2.5-vl-7b.config.json");
}

model::Plan WithImages(int images, int64_t tokens) {
  model::Plan p;
  p.seq_len = 4096;
  p.images = images;
  p.image_tokens = tokens;
  return p;
}

// Training the tower adds exactly its blocks' saved tensors to the activations alive at the peak
// (the loss's backward, where every block's are): each vision block's ledger per text token times
// the micro-batch's 4096 tokens, one caching-allocator block (512 B) rounding each, against the
// same images through a frozen tower, which saves nothing.
TEST(VisionMemoryTest, TrainedTowerAddsItsBlocksSavedTensors) {
  const model::ModelSpec s = Qwen25Vl7b();
  const auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan trained = WithImages(2, 2392);
  model::Plan frozen = trained;
  frozen.frozen_prefixes = {"model.visual"};
  const MemoryReport a = EstimateMemory(s, c, trained, {});
  const MemoryReport b = EstimateMemory(s, c, frozen, {});
  const model::VisionLoad load = model::VisionLoadOf(s, trained, 4096);
  const auto opt = model::ActivationOptionsFor(trained, 4096);
  int64_t expected = 0;
  for (int blk = 0; blk < s.vision.depth; ++blk) {
    const double per_token = model::VisionBlockActivations(s, opt, model::Trainability{}, blk, load).full.saved_per_token;
    expected += R512(static_cast<int64_t>(per_token * 4096));
  }
  // The category also holds the micro-batch's pixel values (fp32 [9568 patches, 3 x 2 x 14 x 14])
  // and the tower's rotary tables (cos and sin, fp32 [9568, head_dim 80]): a trained tower keeps
  // both to its backward, so they are live at the peak; a frozen one's category peaks during its
  // forward, with those two alone (it saves nothing).
  const int64_t inputs = R512(int64_t{9568} * 1176 * 4) + R512(int64_t{9568} * 2 * 80 * 4);
  // The tower's are their own category; the text blocks' are the same either way.
  EXPECT_EQ(CategoryPeak(a, Category::kVisionActivations).count(), expected + inputs);
  EXPECT_EQ(CategoryPeak(b, Category::kVisionActivations).count(), inputs);
  EXPECT_EQ(CategoryPeak(a, Category::kActivations).count(), CategoryPeak(b, Category::kActivations).count());
  EXPECT_GT(expected, int64_t{10} << 30);  // 9568 patches x 32 blocks x ~60 KB
  // What freezing the tower saves, row by row against the trained tower's report: its saved
  // tensors whole, and no row that is not the tower's (the rows are compared by position).
  const FeatureSavings fs = CompareWithFullFinetune(s, c, frozen, {}, b);
  ASSERT_EQ(fs.features.size(), 1u);
  bool vision_row = false;
  for (const auto& [name, saved] : fs.features[0].saved) {
    if (name == "vision tower activations (peak)") {
      vision_row = true;
      EXPECT_EQ(saved.count(), expected);
    }
    EXPECT_NE(name, "host RAM per node (peak)");
    EXPECT_NE(name, "saved activations (peak)");
  }
  EXPECT_TRUE(vision_row);
}

// Text-only batches: the tower's units are never gathered and its segments have no compute; with
// images its blocks are gathered one unit at a time like the text layers, and each forward op of a
// vision block carries that block's FLOPs for the micro-batch's tokens.
TEST(VisionMemoryTest, TowerRunsOnlyWithImages) {
  const model::ModelSpec s = Qwen25Vl7b();
  const auto c = profiles::ParseClusterShorthand("8xH100");
  const int V = s.vision.depth;
  auto vision_ops = [&](const MemoryEstimate& e, OpKind kind) {
    int n = 0;
    for (const auto& op : e.program.ops) {
      if (op.kind != kind || op.step != 1) continue;
      if (kind == OpKind::kAllGather) {
        n += model::IsVisionParameter(e.program.unit_names.empty() ? "" : e.program.unit_names[static_cast<size_t>(op.unit)] + ".") ? 1 : 0;
      } else {
        n += op.segment >= 1 && op.segment <= V ? 1 : 0;
      }
    }
    return n;
  };
  model::Plan text = WithImages(0, 0);  // the tower idles: no frozen prefix needed (VisionTowerIdle)
  const MemoryEstimate none = EstimateMemoryWithProgram(s, c, text, {}, false);
  const MemoryEstimate some = EstimateMemoryWithProgram(s, c, WithImages(1, 1196), {}, false);
  EXPECT_EQ(vision_ops(none, OpKind::kForward), 0);
  EXPECT_EQ(vision_ops(none, OpKind::kAllGather), 0);
  EXPECT_EQ(vision_ops(some, OpKind::kForward), V);
  EXPECT_EQ(vision_ops(some, OpKind::kBackward), V);
  EXPECT_GE(vision_ops(some, OpKind::kAllGather), V);
  const model::VisionLoad load = model::VisionLoadOf(s, WithImages(1, 1196), 4096);
  for (const auto& op : some.program.ops) {
    if (op.kind == OpKind::kForward && op.step == 1 && op.segment == 1 + 3) {
      EXPECT_DOUBLE_EQ(op.matmul_flops, model::VisionBlockForwardFlops(s, 3, load).matmul * 4096);
      EXPECT_DOUBLE_EQ(op.attention_flops, model::VisionBlockForwardFlops(s, 3, load).attention * 4096);
    }
  }
}

}  // namespace
}  // namespace shardtune::sim
