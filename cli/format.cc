// Number formatting for people.
#include "cli/format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shardtune::cli {

std::string FormatBytes(Bytes b) {
  double v = static_cast<double>(b.count());
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b.count()));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string FormatCount(int64_t n) {
  double v = static_cast<double>(n);
  char buf[64];
  if (std::llabs(n) >= 1000000000LL) std::snprintf(buf, sizeof buf, "%.2f B", v / 1e9);
  else if (std::llabs(n) >= 1000000LL) std::snprintf(buf, sizeof buf, "%.1f M", v / 1e6);
  else if (std::llabs(n) >= 1000LL) std::snprintf(buf, sizeof buf, "%.1f K", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

void PrintFeatureSavings(const sim::FeatureSavings& f, const sim::MemoryReport& r,
                         std::ostream& out) {
  if (f.features.empty()) return;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.2f%%",
                r.parameters > 0 ? 100.0 * static_cast<double>(r.trainable_parameters) /
                                       static_cast<double>(r.parameters)
                                 : 0.0);
  out << "\nVersus the full fine-tune of the same plan (peak " << FormatBytes(f.full_finetune_peak)
      << ", required " << FormatBytes(f.full_finetune_required) << "):\n";
  out << "  trainable parameters " << FormatCount(r.trainable_parameters) << " of "
      << FormatCount(r.parameters) << " (" << pct << ")";
  if (r.adapter_parameters > 0) out << ", LoRA adapters " << FormatCount(r.adapter_parameters);
  out << "\n";
  for (const auto& x : f.features) {
    out << "  " << x.feature << ":";
    std::string sep = " ";
    for (const auto& [what, b] : x.saved) {
      out << sep << (b.count() > 0 ? "-" : "+") << FormatBytes(Bytes::Of(std::llabs(b.count())))
          << " " << what;
      sep = ", ";
    }
    if (x.saved.empty()) out << " no change";
    out << " (peak " << (x.peak_saved.count() >= 0 ? "-" : "+")
        << FormatBytes(Bytes::Of(std::llabs(x.peak_saved.count()))) << ")\n";
  }
  out << "  total: peak " << FormatBytes(r.peak_allocated) << " vs "
      << FormatBytes(f.full_finetune_peak) << " (" << (f.total_peak_saved.count() >= 0 ? "-" : "+")
      << FormatBytes(Bytes::Of(std::llabs(f.total_peak_saved.count()))) << ")\n";
}

void WriteLine(std::ostream& os, std::string_view prefix, std::string_view text) {
  std::string line;
  line.reserve(prefix.size() + text.size() + 1);
  line.append(prefix).append(text).push_back('\n');
  os << line << std::flush;
}

bool IsMarginal(Bytes headroom, Bytes capacity) {
  return headroom.count() >= 0 &&
         static_cast<double>(headroom.count()) < kMarginalHeadroomFraction * static_cast<double>(capacity.count());
}

}  // namespace shardtune::cli
