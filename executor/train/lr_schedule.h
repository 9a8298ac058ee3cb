// Learning-rate schedules: linear warmup, then cosine decay, WSD (warmup-stable-decay) or
// constant. Steps are 1-based optimizer steps.
#pragma once

#include <string>

namespace shardtune::exec {

enum class LrSchedule { kCosine, kWsd, kConstant };

struct LrOptions {
  double lr = 1e-3;             // peak learning rate
  double min_lr_ratio = 0.1;    // cosine / WSD end at lr * min_lr_ratio
  int warmup_steps = 0;         // linear from lr/warmup to lr over these steps
  int total_steps = 1;          // the run's last step
  double decay_fraction = 0.2;  // WSD: the last 20% of the post-warmup steps decay linearly
  LrSchedule schedule = LrSchedule::kCosine;
};

// The learning rate of optimizer step `step` (1-based). Warmup: lr * step / warmup_steps.
// Cosine (Loshchilov & Hutter 2017, no restarts): min + (lr - min) (1 + cos(pi p)) / 2 with p the
// fraction of post-warmup steps done before this one. WSD (Hu et al. 2024, MiniCPM): lr until
// the decay phase, then linear to min.
double LearningRate(const LrOptions& options, int step);

// "cosine", "wsd" or "constant". Throws InputError naming `where`.
LrSchedule ParseLrSchedule(const std::string& text, const std::string& where);
const char* ToString(LrSchedule s);

}  // namespace shardtune::exec
