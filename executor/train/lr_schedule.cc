// Learning-rate schedules.
#include "executor/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "model/errors.h"

namespace shardtune::exec {

double LearningRate(const LrOptions& o, int step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  }
  if (o.schedule == LrSchedule::kConstant) return o.lr;
  double min_lr = o.lr * o.min_lr_ratio;
  int span = std::max(1, o.total_steps - o.warmup_steps);
  int done = std::max(0, step - o.warmup_steps - 1);  // post-warmup steps before this one
  if (o.schedule == LrSchedule::kCosine) {
    double p = std::min(1.0, static_cast<double>(done) / static_cast<double>(span));
    return min_lr + (o.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
  }
  int decay = std::max(1, static_cast<int>(std::ceil(o.decay_fraction * span)));
  int stable = span - decay;
  if (done < stable) return o.lr;
  double p = std::min(1.0, static_cast<double>(done - stable + 1) / static_cast<double>(decay));
  return o.lr + (min_lr - o.lr) * p;
}

LrSchedule ParseLrSchedule(const std::string& text, const std::string& where) {
  if (text == "cosine") return LrSchedule::kCosine;
  if (text == "wsd") return LrSchedule::kWsd;
  if (text == "constant") return LrSchedule::kConstant;
  throw InputError(where + ": expected one of cosine, wsd, constant, got \"" + text + "\"");
}

const char* ToString(LrSchedule s) {
  switch (s) {
    case LrSchedule::kCosine:
      return "cosine";
    case LrSchedule::kWsd:
      return "wsd";
    case LrSchedule::kConstant:
      return "constant";
  }
  return "?";
}

}  // namespace shardtune::exec
