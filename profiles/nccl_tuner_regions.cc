// aws-ofi-nccl's region tuner (profiles/nccl_tuner_regions.h). The geometry and the tables are
// ported from aws/aws-ofi-nccl src/tuner/nccl_ofi_regions.cpp at commit 2daf7d3 (2026-08-21):
// the vertices are the plugin's, in its order; the region lists keep its order, which decides
// between regions that share an edge. Coordinates are log2 (bytes, ranks) since its commit
// 8f22799f ("tuner: transform coordinates to log-log scale", 2026-02-04).
#include "profiles/nccl_tuner_regions.h"

#include <cmath>

#include "model/errors.h"

namespace shardtune::profiles {
namespace {

using Point = AwsOfiRegionTuner::Point;
using Region = AwsOfiRegionTuner::Region;
using A = TunerAlgo;
using P = TunerProto;

// TUNER_MAX_SIZE and TUNER_MAX_RANKS (include/tuner/nccl_ofi_tuner_region.h).
constexpr double kMaxSize = 100.0 * 1024 * 1024 * 1024;
constexpr double kMaxRanks = 1024.0 * 1024;
const Point kFar = {kMaxSize, kMaxRanks};

enum Coll { kAllGather = 0, kReduceScatter = 1, kAllReduce = 2 };
using Tables = std::vector<Region>[3];

// nccl_ofi_tuner_point_t::transform_log2: 0 becomes 1e-6 first.
Point Log2(Point p) {
  const double eps = 1e-6;
  return {std::log2(p.x == 0 ? eps : p.x), std::log2(p.y == 0 ? eps : p.y)};
}
Point Pow2(Point p) { return {std::pow(2.0, p.x), std::pow(2.0, p.y)}; }

Point Sub(Point a, Point b) { return {a.x - b.x, a.y - b.y}; }
double Dot(Point a, Point b) { return a.x * b.x + a.y * b.y; }
double Cross(Point a, Point b) { return a.x * b.y - a.y * b.x; }

// intersect(): whether segment x0->x1 crosses segment y0->y1: 1 yes, -1 no, 0 when the crossing
// is within eps of y0 or y1 (or the segments are parallel). `sect` gets the crossing point.
int Intersect(Point x0, Point x1, Point y0, Point y1, double eps, Point* sect) {
  const Point dx = Sub(x1, x0), dy = Sub(y1, y0);
  const double d = Cross(dy, dx);
  if (std::fabs(d) < eps) return 0;
  long double a = static_cast<long double>(Cross(x0, dx) - Cross(y0, dx)) / d;
  if (sect) *sect = {static_cast<double>(y0.x + a * dy.x), static_cast<double>(y0.y + a * dy.y)};
  if (a < -eps || a > 1 + eps) return -1;
  if (a < eps || a > 1 - eps) return 0;
  a = (Cross(x0, dy) - Cross(y0, dy)) / d;
  if (a < 0 || a > 1) return -1;
  return 1;
}

// distance(): from x to the nearest point of segment y0->y1, infinity when x's foot lies outside.
double Distance(Point x, Point y0, Point y1, double eps) {
  const Point dy = Sub(y1, y0);
  const Point x1 = {x.x + dy.y, x.y - dy.x};
  Point s = {0, 0};
  if (Intersect(x, x1, y0, y1, eps, &s) == -1) return HUGE_VAL;
  s = Sub(s, x);
  return std::sqrt(Dot(s, s));
}

// is_inside_region(): 1 inside, 0 on an edge, -1 outside (ray casting towards a far point).
int IsInside(Point p, const std::vector<Point>& v) {
  const double eps = 1e-10;
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) {
    if (Distance(p, v[i], v[(i + 1) % n], eps) < eps) return 0;
  }
  // The bounding box starts from vertex 0's x and vertex 1's y, as the plugin's does.
  double min_x = v[0].x, max_x = v[0].x, min_y = v[1].y, max_y = v[1].y;
  for (const Point& q : v) {
    min_x = std::min(min_x, q.x);
    max_x = std::max(max_x, q.x);
    min_y = std::min(min_y, q.y);
    max_y = std::max(max_y, q.y);
  }
  if (p.x < min_x || p.x > max_x || p.y < min_y || p.y > max_y) return -1;
  const Point e = Log2({2.0 * kMaxSize, 2.0 * kMaxRanks});
  int crosses = 0;
  for (size_t i = 0; i < n; ++i) {
    if (Intersect(p, e, v[i], v[(i + 1) % n], eps, nullptr) == 1) ++crosses;
  }
  return (crosses & 1) ? 1 : -1;
}

// extend_region(): on the line through a and b (log2 plane), the farthest point with z's x or
// z's y, returned in bytes and ranks.
Point ExtendRegion(Point a, Point b, Point z) {
  a = Log2(a);
  b = Log2(b);
  z = Log2(z);
  if (a.x == b.x) return Pow2({a.x, z.y});
  if (a.y == b.y) return Pow2({z.x, a.y});
  const double m = (a.y - b.y) / (a.x - b.x);
  const double c = b.y - m * b.x;
  const double projected_zy = m * z.x + c;
  if (projected_zy < z.y) return Pow2({z.x, projected_zy});
  return Pow2({(z.y - c) / m, z.y});
}

// region_init_internal_p5_p5e.
void P5P5e(Tables& t, int ranks, int nodes) {
  if (ranks == 8 * nodes) {
    {
      // AllReduce
      const Point extended_tree_ll128 = ExtendRegion({402653184, 2048}, {402653184, 4096}, kFar);

      const Point extended_nvlstree_simple_1 = ExtendRegion({8053063680, 160}, {9663676416, 192}, kFar);

      const Point extended_nvlstree_simple_2 = ExtendRegion({402653184, 2048}, {402653184, 4096}, kFar);

      const Point extended_ring_simple = ExtendRegion({8053063680, 160}, {9663676416, 192}, kFar);

      t[kAllReduce] = {
        {A::kTree, P::kLL128, {{0, 16},
                {31457280, 16},
                {37748736, 32},
                {117440512, 64},
                {301989888, 128},
                {301989888, 256},
                {335544320, 512},
                {536870912, 1024},
                {402653184, 2048},
                {402653184, 4096},
                extended_tree_ll128,
                {0, extended_tree_ll128.y}}},
        {A::kNvlsTree, P::kSimple, {{31457281, 16}, {kMaxSize, 16}, {31457281, 16}}},
        {A::kRing, P::kLL128, {{31457280, 17},
                {1073741824, 17},
                {2147483648, 64},
                {2147483648, 128},
                {1342177280, 160},
                {2147483648, 256},
                {1074790400, 256},
                {444596224, 160},
                {301989888, 128},
                {117440512, 64},
                {37748736, 32}}},
        {A::kNvlsTree, P::kSimple, {{2147483648, 128},
                {6442450944, 128},
                {8053063680, 160},
                {9663676416, 192},
                extended_nvlstree_simple_1,
                extended_nvlstree_simple_2,
                {402653184, 4096},
                {402653184, 2048},
                {536870912, 1024},
                {335544320, 512},
                {301989888, 256},
                {310378496, 160},
                {444596224, 160},
                {1074790400, 256},
                {2684354560, 256},
                {2147483648, 224},
                {1342177280, 160}}},
        {A::kRing, P::kSimple, {{1073741824, 17},
                {extended_ring_simple.x, 17},
                extended_ring_simple,
                {9663676416, 192},
                {8053063680, 160},
                {2684354560, 64},
                {1610612736, 32}}}};
    }
  } else if (ranks == 2 * nodes) {
    {
      // AllReduce
      const Point extended_tree_ll128 = ExtendRegion({88160256, 128}, {178163712, 256}, kFar);

      const Point extended_tree_simple_1 = ExtendRegion({787480576, 128}, {1073741824, 256}, kFar);

      const Point extended_tree_simple_2 = ExtendRegion({257114112, 128}, {269484032, 256}, kFar);

      const Point extended_nvlstree_simple = ExtendRegion({787480576, 128}, {1073741824, 256}, kFar);

      t[kAllReduce] = {
        {A::kTree, P::kLL128, {{0, 4},
                {1314816, 4},
                {1051648, 8},
                {1051648, 12},
                {2367488, 16},
                {5525504, 32},
                {9473024, 64},
                {88160256, 128},
                {178163712, 256},
                extended_tree_ll128,
                {0, extended_tree_ll128.y}}},
        {A::kRing, P::kLL128, {{1314816, 4},
                {19736576, 4},
                {41842688, 8},
                {296747008, 64},
                {257114112, 128},
                {269484032, 256},
                {178163712, 256},
                {88160256, 128},
                {9473024, 64},
                {5525504, 32},
                {2367488, 16},
                {1051648, 12},
                {1051648, 8},
                {1314816, 4}}},
        {A::kNvlsTree, P::kSimple, {{19736576, 4},
                {81844224, 4},
                {275775488, 8},
                {275775488, 48},
                {296747008, 64},
                {41842688, 8}}},
        {A::kTree, P::kLL128, {{81844224, 4}, {269484032, 4}, {81844224, 4}}},
        {A::kTree, P::kSimple, {{269484032, 4}, {kMaxSize, 4}, {269484032, 4}}},
        {A::kRing, P::kSimple, {{81844224, 5},
                {kMaxSize, 5},
                {kMaxSize, 32},
                {1073741824, 40},
                {1073741824, 128},
                {787480576, 128},
                {296747008, 64},
                {275775488, 48},
                {275775488, 8},
                {81844224, 5}}},
        {A::kTree, P::kSimple, {{296747008, 64},
                {787480576, 128},
                {1073741824, 256},
                extended_tree_simple_1,
                extended_tree_simple_2,
                {269484032, 256},
                {257114112, 128}}},
        {A::kNvlsTree, P::kSimple, {extended_nvlstree_simple,
                {1073741824, 256},
                {787480576, 128},
                {1073741824, 128},
                {1073741824, 40},
                {kMaxSize, 32}}}};
    }
  } else if (ranks == nodes) {
    {
      // AllReduce
      const Point extended_tree_ll128 = ExtendRegion({9999360, 64}, {119477248, 128}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({4736000, 2}, {269484032, 128}, kFar);

      t[kAllReduce] = {
        {A::kTree, P::kLL128, {{0, 16}, {2367488, 16}, {9999360, 64}, {119477248, 128}, extended_tree_ll128, {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {{0, 2},
                {4736000, 2},
                {269484032, 128},
                extended_ring_ll128,
                extended_tree_ll128,
                {119477248, 128},
                {9999360, 64},
                {2367488, 16},
                {0, 16}}},
        {A::kRing, P::kSimple, {{4736000, 2}, {kMaxSize, 2}, extended_ring_ll128, {269484032, 128}}}};
    }
    {
      // AllGather
      const Point extended_ring_simple = ExtendRegion({4194304, 2}, {8589934592, 2048}, kFar);

      t[kAllGather] = {{A::kRing, P::kSimple, {{4194304, 2},
                     {kMaxSize, 2},
                     extended_ring_simple,
                     {8589934592, 2048}}}};
    }
    {
      // ReduceScatter
      const Point extended_ring_simple = ExtendRegion({8388608, 2}, {4294967296, 1024}, kFar);

      t[kReduceScatter] = {{A::kRing, P::kSimple, {{8388608, 2},
                     {kMaxSize, 2},
                     extended_ring_simple,
                     {4294967296, 1024}}}};
    }
  }
}

// region_init_internal_p5en.
void P5en(Tables& t, int ranks, int nodes) {
  if (ranks == 8 * nodes) {
    {
      // AllReduce
      const Point extended_tree_ll = ExtendRegion({196608, 192}, {196608, 1024}, kFar);
      const Point extended_tree_ll128 = ExtendRegion({129499136, 127}, {218103808, 1024}, kFar);
      const Point extended_nvlstree_simple = ExtendRegion({7516192768, 256}, {17179869184, 448}, kFar);

      t[kAllReduce] = {
        {A::kTree, P::kLL, {{0, 16}, {196608, 16}, {196608, 1024}, extended_tree_ll, {0, kMaxRanks}}},
        {A::kTree, P::kLL128, {
          extended_tree_ll,
          {196608, 1024},
          {196608, 16},
          {13107200, 16},
          {129499136, 127},
          {218103808, 1024},
          extended_tree_ll128}},
        {A::kRing, P::kLL128, {
          {129499136, 127},
          {13107200, 16},
          {29884416, 16},
          {293601280, 32},
          {589299712, 64},
          {549453824, 128}}},
        {A::kNvlsTree, P::kSimple, {
          extended_tree_ll128,
          {218103808, 1024},
          {129499136, 127},
          {549453824, 128},
          {589299712, 64},
          {293601280, 32},
          {29884416, 16},
          {kMaxSize, 16},
          {509607936, 32},
          {7516192768, 256},
          {17179869184, 448},
          extended_nvlstree_simple}},
        {A::kRing, P::kSimple, {
          extended_nvlstree_simple,
          {17179869184, 448},
          {7516192768, 256},
          {509607936, 32},
          {kMaxSize, 16}}}};
    }
    {
      // AllGather
      const Point extended_ring_ll = ExtendRegion({28305408, 768}, {33554432, 1024}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({7247754240, 384}, {17179865088, 896}, kFar);

      t[kAllGather] = {
        {A::kRing, P::kLL, {
          {0, 16},
          {786432, 16},
          {4718592, 128},
          {13630464, 384},
          {19922944, 512},
          {28305408, 768},
          {33554432, 1024},
          extended_ring_ll,
          {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {
          extended_ring_ll,
          {33554432, 1024},
          {28305408, 768},
          {19922944, 512},
          {13630464, 384},
          {4718592, 128},
          {786432, 16},
          {236978176, 16},
          {956301312, 64},
          {7247754240, 384},
          {17179865088, 896},
          extended_ring_ll128}},
        {A::kRing, P::kSimple, {
          extended_ring_ll128,
          {17179865088, 896},
          {7247754240, 384},
          {956301312, 64},
          {494927872, 32},
          {236978176, 16},
          {kMaxSize, 16}}}};
    }
    {
      // ReduceScatter
      const Point extended_ring_ll = ExtendRegion({7340032, 256}, {18874368, 512}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({7247757312, 256}, {17179869184, 640}, kFar);

      t[kReduceScatter] = {
        {A::kRing, P::kLL, {
          {0, 16},
          {786432, 16},
          {4718592, 128},
          {7340032, 256},
          {18874368, 512},
          extended_ring_ll,
          {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {
          extended_ring_ll,
          {18874368, 512},
          {7340032, 256},
          {4718592, 128},
          {786432, 16},
          {291504128, 16},
          {589299712, 32},
          {2415919104, 128},
          {7247757312, 256},
          {17179869184, 640},
          extended_ring_ll128}},
        {A::kRing, P::kSimple, {
          extended_ring_ll128,
          {17179869184, 640},
          {7247757312, 256},
          {2415919104, 128},
          {589299712, 32},
          {291504128, 16},
           {kMaxSize, 16}}}};
    }
  } else if (ranks == nodes) {
    {
      // AllReduce
      const Point extended_tree_ll128 = ExtendRegion({524288, 8}, {1048576, 96}, kFar);
      const Point extended_tree_simple = ExtendRegion({8388608, 32}, {33554432, 128}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({50331648, 16}, {301989888, 128}, kFar);

      t[kAllReduce] = {
        {A::kTree, P::kLL, {{0, 2}, {65536, 2}, {65536, 64}, {65536, kMaxRanks}}},
        {A::kTree, P::kLL128, {{65536, kMaxRanks},
                {65536, 64},
                {65536, 2},
                {262144, 2},
                {1048576, 4},
                {4194304, 8},
                {16777216, 16},
                {33554432, 32},
                {1048576, 32},
                {1048576, 96},
                extended_tree_ll128}},
        {A::kTree, P::kSimple, {extended_tree_ll128,
                {1048576, 96},
                {1048577, 32},
                {33554431, 32},
                {33554432, 128},
                extended_tree_simple}},
        {A::kRing, P::kLL128, {extended_tree_simple,
                {33554432, 128},
                {33554433, 32},
                {16777217, 16},
                {4194305, 8},
                {1048577, 4},
                {262144, 2},
                {6291456, 2},
                {50331648, 16},
                {301989888, 128},
                extended_ring_ll128}},
        {A::kRing, P::kSimple, {extended_ring_ll128,
                {301989888, 128},
                {50331648, 16},
                {6291456, 2},
                {kMaxSize, 2}}}};
    }
    {
      // AllGather
      const Point extended_pat_simple = ExtendRegion({50331648, 64}, {117440512, 128}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({50331648, 16}, {301989888, 128}, kFar);

      t[kAllGather] = {
        {A::kPat, P::kSimple, {{0, 2},
                {65536, 2},
                {1048576, 2},
                {8388608, 8},
                {16777216, 16},
                {16777216, 32},
                {50331648, 64},
                {117440512, 128},
                extended_pat_simple,
                {kMaxSize, kMaxRanks},
                {65536, kMaxRanks},
                {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {extended_pat_simple,
                {117440512, 128},
                {50331648, 64},
                {16777216, 32},
                {16777217, 16},
                {8388609, 8},
                {1048576, 2},
                {4194304, 2},
                {50331648, 16},
                {301989888, 128},
                extended_ring_ll128}},
        {A::kRing, P::kSimple, {extended_ring_ll128,
                {301989888, 128},
                {50331648, 16},
                {4194304, 2},
                {kMaxSize, 2}}}};
    }
    {
      // ReduceScatter
      const Point extended_pat_simple = ExtendRegion({50331648, 64}, {117440512, 128}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({50331648, 16}, {301989888, 128}, kFar);
      t[kReduceScatter] = {
        {A::kPat, P::kSimple, {{0, 2},
                {65536, 2},
                {1048576, 2},
                {16777216, 32},
                {50331648, 64},
                {117440512, 128},
                extended_pat_simple,
                {kMaxSize, kMaxRanks},
                {65536, kMaxRanks},
                {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {extended_pat_simple,
                {117440512, 128},
                {50331648, 64},
                {16777216, 32},
                {1048576, 2},
                {4194304, 2},
                {50331648, 16},
                {301989888, 128},
                extended_ring_ll128}},
        {A::kRing, P::kSimple, {extended_ring_ll128,
                {301989888, 128},
                {50331648, 16},
                {4194304, 2},
                {kMaxSize, 2}}}};
    }
  }
}

// region_init_internal_p6 (p6-b200.48xlarge).
void P6(Tables& t, int ranks, int nodes) {
  if (ranks == 8 * nodes) {
    {
      // AllReduce
      const Point extended_tree_ll = ExtendRegion({393216, 16}, {393216, 1024}, kFar);
      const Point extended_tree_ll128 = ExtendRegion({96993280, 1024}, {106430464, 2048}, kFar);
      const Point extended_nvlstree_simple = ExtendRegion({10737418240, 512}, {34359738368, 1500}, kFar);

      t[kAllReduce] = {
      {A::kTree, P::kLL, {{0, 16}, {393216, 16}, extended_tree_ll, {0, kMaxRanks}}},
      {A::kTree, P::kLL128, {
          extended_tree_ll,
          {393216, 16},
          {4718592, 16},
          {18350080, 32},
          {40370176, 64},
          {57147392, 128},
          {72876032, 256},
          {96993280, 1024},
          {106430464, 2048},
          extended_tree_ll128}},
      {A::kRing, P::kLL128, {
          {90701824, 128},
          {50855936, 64},
          {18350080, 32},
          {133693440, 32},
          {120061952, 64}}},
      {A::kNvlsTree, P::kSimple, {
          extended_tree_ll128,
          {106430464, 2048},
          {96993280, 1024},
          {72876032, 256},
          {57147392, 128},
          {40370176, 64},
          {18350080, 32},
          {50855936, 64},
          {90701824, 128},
          {120061952, 64},
          {133693440, 32},
          {18350080, 32},
          {4718592, 16},
          {kMaxSize, 16},
          {435159040, 32},
          {1072693248, 64},
          {10737418240, 512},
          {34359738368, 1500},
          extended_nvlstree_simple}},
      {A::kRing, P::kSimple, {
          extended_nvlstree_simple,
          {10737418240, 512},
          {1072693248, 64},
          {435159040, 32},
          {kMaxSize, 16}}}};
    }
    {
      // AllGather
      const Point extended_ring_ll = ExtendRegion({74973184, 1024}, {213385216, 2048}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({8321499136, 512}, {32212254720, 2048}, kFar);

      t[kAllGather] = {
        {A::kRing, P::kLL, {
            {0, 16},
            {786432, 16},
            {1572864, 32},
            {2621440, 64},
            {4718592, 128},
            {17301504, 256},
            {74973184, 1024},
            {213385216, 2048},
            extended_ring_ll,
            {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {
            extended_ring_ll,
            {213385216, 2048},
            {74973184, 1024},
            {17301504, 256},
            {4718592, 128},
            {2621440, 64},
            {1572864, 32},
            {786432, 16},
            {198705152, 16},
            {456130560, 32},
            {871366656, 64},
            {8321499136, 512},
            {32212254720, 2048},
            extended_ring_ll128}},
        {A::kRing, P::kSimple, {
            extended_ring_ll128,
            {32212254720, 2048},
            {8321499136, 512},
            {871366656, 64},
            {456130560, 32},
            {198705152, 16},
            {kMaxSize, 16}}}};
    }
    {
      // ReduceScatter
      const Point extended_ring_ll = ExtendRegion({73924608, 1024}, {209190912, 2048}, kFar);
      const Point extended_ring_ll128 = ExtendRegion({4294967296, 256}, {8589934592, 512}, kFar);

      t[kReduceScatter] = {
        {A::kRing, P::kLL, {
            {0, 16},
            {786432, 16},
            {1572864, 32},
            {2621440, 64},
            {4718592, 128},
            {17301504, 256},
            {35127296, 512},
            {73924608, 1024},
            {209190912, 2048},
            extended_ring_ll,
            {0, kMaxRanks}}},
        {A::kRing, P::kLL128, {
            extended_ring_ll,
            {209190912, 2048},
            {73924608, 1024},
            {35127296, 512},
            {17301504, 256},
            {4718592, 128},
            {2621440, 64},
            {1572864, 32},
            {786432, 16},
            {219676672, 16},
            {508559360, 32},
            {592445440, 64},
            {4294967296, 256},
            {8589934592, 512},
            extended_ring_ll128}},
        {A::kRing, P::kSimple, {
            extended_ring_ll128,
            {8589934592, 512},
            {4294967296, 256},
            {592445440, 64},
            {508559360, 32},
            {219676672, 16},
            {kMaxSize, 16}}}};
    }
  } else if (ranks == nodes) {
    {
      // AllReduce
      t[kAllReduce] = {
        {A::kTree, P::kLL, {{0, 2},
            {32768, 2},
            {32768, 128},
            {32768, 131072},
            {0, 131072},}},
        {A::kTree, P::kLL128, {{32768, 2},
            {131072, 2},
            {8388608, 128},
            {8589934592, 131072},
            {32768, 131072},
            {32768, 128},}},
        {A::kRing, P::kLL128, {{131072, 2},
            {3145728, 2},
            {297795584, 128},
            {107374182400, 45916},
            {107374182400, 59831},
            {164626432, 128},
            {20971520, 48},
            {3145728, 48},}},
        {A::kTree, P::kSimple, {{3145728, 48},
            {20971520, 48},
            {164626432, 128},
            {107374182400, 59831},
            {107374182400, 131072},
            {8589934592, 131072},}},
        {A::kRing, P::kSimple, {{3145728, 2},
            {107374182400, 2},
            {107374182400, 45916},
            {297795584, 128},}}};
    }
    {
      // AllGather
      t[kAllGather] = {
        {A::kRing, P::kLL, {{0, 2},
            {65536, 2},
            {65536, 4},}},
        {A::kPat, P::kSimple, {{0, 2},
            {65536, 4},
            {1048576, 4},
            {4194305, 16},
            {12582912, 48},
            {88080384, 48},
            {248512512, 128},
            {34359738368, 17137},
            {0, 131072},}},
        {A::kRing, P::kLL128, {{65536, 2},
            {2097152, 2},
            {16777216, 8},
            {291504128, 128},
            {34359738368, 15008},
            {34359738368, 17137},
            {248512512, 128},
            {88080384, 48},
            {12582912, 48},
            {4194305, 16},
            {1048576, 4},
            {65536, 4},}},
        {A::kRing, P::kSimple, {{2097152, 2},
            {34359738368, 2},
            {34359738368, 15008},
            {291504128, 128},
            {16777216, 8},}}};
    }
    {
      // ReduceScatter
      t[kReduceScatter] = {
        {A::kRing, P::kLL, {{0, 2},
            {65536, 2},
            {65536, 4},}},
        {A::kPat, P::kSimple, {{0, 2},
            {65536, 4},
            {1048576, 4},
            {3345192, 8},
            {19065019, 16},
            {67108864, 48},
            {106954752, 48},
            {274877906944, 121928},
            {0, 131072},}},
        {A::kRing, P::kLL128, {{65536, 2},
            {2097152, 2},
            {16777216, 8},
            {106954752, 48},
            {67108864, 48},
            {19065019, 16},
            {3345192, 8},
            {1048576, 4},
            {65536, 4},}},
        {A::kRing, P::kSimple, {{2097152, 2},
            {274877906944, 2},
            {274877906944, 121928},
            {106954752, 48},
            {16777216, 8},}}};
    }
  }
}

}  // namespace

AwsOfiRegionTuner::AwsOfiRegionTuner(NcclTuner tuner, int ranks, int nodes) : ranks_(ranks), nodes_(nodes) {
  SHARDTUNE_CHECK(ranks >= 1 && nodes >= 1) << "a communicator has ranks and nodes";
  switch (tuner) {
    case NcclTuner::kNone: break;
    case NcclTuner::kAwsOfiP5: P5P5e(regions_, ranks, nodes); break;
    case NcclTuner::kAwsOfiP5en: P5en(regions_, ranks, nodes); break;
    case NcclTuner::kAwsOfiP6: P6(regions_, ranks, nodes); break;
  }
  // set_regions(): the vertices in the log2 plane.
  for (auto& list : regions_) {
    for (Region& r : list) {
      SHARDTUNE_CHECK(r.vertices.size() > 1) << "a tuner region needs two vertices";
      for (Point& v : r.vertices) v = Log2(v);
    }
  }
}

bool AwsOfiRegionTuner::active() const {
  if (nodes_ <= 2) return false;
  for (const auto& list : regions_) {
    if (!list.empty()) return true;
  }
  return false;
}

std::optional<TunerRegionChoice> AwsOfiRegionTuner::Choose(
    Collective c, int64_t bytes, const std::function<bool(TunerAlgo, TunerProto)>& enabled) const {
  // "Skip when two nodes or lesser because the regions are not well defined".
  if (nodes_ <= 2) return std::nullopt;
  int coll = -1;
  switch (c) {
    case Collective::kAllGather: coll = kAllGather; break;
    case Collective::kReduceScatter: coll = kReduceScatter; break;
    case Collective::kAllReduce: coll = kAllReduce; break;
    default: return std::nullopt;
  }
  const Point p = Log2({static_cast<double>(bytes), static_cast<double>(ranks_)});
  for (const Region& r : regions_[coll]) {
    if (!enabled(r.algo, r.proto)) continue;
    if (IsInside(p, r.vertices) >= 0) return TunerRegionChoice{r.algo, r.proto};
  }
  return std::nullopt;
}

}  // namespace shardtune::profiles
