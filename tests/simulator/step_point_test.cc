// The peak's place as structure (StepProgram::OpPoint, PeakKindName) against the reference the
// code read before it existed: the text OpName prints, scanned for substrings (the old
// search_rank.cc PhaseKind and the `peak_phase.find("loss")` of advice.cc and estimate_cmd.cc).
// Every op of real programs (offload, accumulation, checkpointing, a VL tower, Ulysses) is
// checked, so a new op kind or region that the two disagree on fails here.
#include <gtest/gtest.h>

#include <string>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_ledger.h"
#include "simulator/memory_model.h"
#include "simulator/step_program.h"

namespace shardtune::sim {
namespace {

std::string KindByText(const std::string& text) {
  for (const char* k : {"optimizer step", "LM head and loss", "backward", "forward", "all-gather",
                        "reduce-scatter", "start-up"}) {
    if (text.find(k) != std::string::npos) return k;
  }
  return "step";
}

void ExpectPointsMatchNames(const std::string& model, const std::string& cluster, const model::Plan& p) {
  MemoryOptions o;
  MemoryEstimate est = EstimateMemoryWithProgram(model::FindModelPreset(model),
                                                 profiles::ParseClusterShorthand(cluster), p, o, false);
  const StepProgram& prog = est.program;
  ASSERT_FALSE(prog.ops.empty());
  int head = 0, blocks = 0;
  for (size_t i = 0; i < prog.ops.size(); ++i) {
    head += prog.OpPoint(i).region == StepRegion::kHead;
    blocks += prog.OpPoint(i).region == StepRegion::kBlock;
    const std::string text = prog.OpName(i);
    const StepPoint at = prog.OpPoint(i);
    EXPECT_EQ(PeakKindName(at), KindByText(text)) << text;
    EXPECT_EQ(at.region == StepRegion::kHead, text.find("loss") != std::string::npos) << text;
    if (at.region == StepRegion::kBlock) {
      EXPECT_NE(text.find(" · block " + std::to_string(at.block)), std::string::npos) << text;
    }
  }
  EXPECT_GT(head, 0);
  EXPECT_GT(blocks, 0);
  EXPECT_EQ(est.report.peak_phase, prog.OpName(MemoryLedger(prog).peak_op()));
}

TEST(StepPointTest, StructureAgreesWithTheTextOfEveryOp) {
  model::Plan p;
  p.seq_len = 1024;
  p.grad_accum = 2;
  p.offload = model::Offload::kAll;
  ExpectPointsMatchNames("llama3.2-1b", "8xH100", p);
  model::Plan q;
  q.seq_len = 2048;
  q.cp = 2;
  q.checkpointing = model::Checkpointing::kFull;
  ExpectPointsMatchNames("qwen3-8b", "8xH100", q);
  model::Plan v;
  v.seq_len = 1024;
  v.images = 1;
  ExpectPointsMatchNames("qwen2.5-vl-7b", "8xH100", v);
}

}  // namespace
}  // namespace shardtune::sim
