// tune --plot: the Pareto picture marks every Pareto plan and top plan, names the winner with its
// figures, and draws the capacity the plans were judged against.
#include "planner/pareto_plot.h"

#include <gtest/gtest.h>

#include "model/presets.h"
#include "model/text.h"
#include "profiles/cluster.h"
#include "tests/planner/search_fixture.h"

namespace shardtune::planner {
namespace {

using testing::RequestFor;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ParetoPlotTest, MarksTheFrontTheTopPlansAndTheWinner) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = RequestFor(32, 2048);
  req.top_k = 3;
  req.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kFull};
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  ASSERT_FALSE(r.pareto.empty());
  std::string svg = ParetoPlotSvg(r, "tune <plot>");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("tune &lt;plot&gt;"), std::string::npos);
  EXPECT_EQ(Count(svg, "<rect x="), static_cast<int>(r.pareto.size()));  // one square per Pareto plan
  EXPECT_EQ(Count(svg, "<circle"), static_cast<int>(r.top.size()));
  const Candidate& w = r.top.front();
  EXPECT_NE(svg.find("winner: " + std::to_string(static_cast<long long>(w.tokens_per_s)) +
                     " tokens/s, needs " + model::GiBText(w.required)),
            std::string::npos);
  EXPECT_NE(svg.find("winner: " + model::EscapeXml(w.key)), std::string::npos);
  EXPECT_NE(svg.find("usable capacity " + model::GiBText(w.capacity)), std::string::npos);
}

TEST(ParetoPlotTest, SaysSoWhenNoPlanFits) {
  SearchResult r;
  std::string svg = ParetoPlotSvg(r, "none");
  EXPECT_NE(svg.find("no plan fits"), std::string::npos);
  EXPECT_EQ(Count(svg, "<circle"), 0);
}

}  // namespace
}  // namespace shardtune::planner
