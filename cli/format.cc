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

}  // namespace shardtune::cli
