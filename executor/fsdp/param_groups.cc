// Splitting FSDP units into trainable, frozen and adapter flat parameters.
#include "executor/fsdp/param_groups.h"

#include "model/trainable.h"

namespace shardtune::exec {

std::vector<FlatParamGroup> SplitUnits(const model::ModelSpec& spec,
                                       const std::vector<model::FsdpUnit>& units,
                                       const model::Plan& plan) {
  std::vector<FlatParamGroup> out;
  for (const model::FsdpUnit& u : model::ApplyTrainability(spec, plan, units)) {
    // [adapter][requires_grad]
    FlatParamGroup g[2][2] = {{{u, false, false}, {u, true, false}},
                              {{u, false, true}, {u, true, true}}};
    const char* suffix[2][2] = {{" [frozen]", ""}, {" [lora frozen]", " [lora]"}};
    for (int a = 0; a < 2; ++a) {
      for (int t = 0; t < 2; ++t) {
        g[a][t].unit.params.clear();
        g[a][t].unit.name += suffix[a][t];
      }
    }
    for (const model::ParamTensor& p : u.params) {
      g[p.lora_adapter ? 1 : 0][p.requires_grad ? 1 : 0].unit.params.push_back(p);
    }
    for (FlatParamGroup* x : {&g[0][1], &g[0][0], &g[1][1], &g[1][0]}) {
      if (!x->unit.params.empty()) out.push_back(std::move(*x));
    }
  }
  return out;
}

}  // namespace shardtune::exec
