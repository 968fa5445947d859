// The planner's solver: a multiple-choice knapsack (one option per item, summed cost within a
// budget, summed error least) by Lagrangian relaxation over convex hulls, then a greedy fill.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gguf/base/error.h"
#include "gguf/ops/planner.h"

namespace gguf {
namespace {

double finite_or_inf(double e) {
  return std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
}

// The options on the lower convex hull of (cost, error), cheapest first: no option off it is
// ever the best for any multiplier.
std::vector<size_t> lower_hull(const SolverItem& item) {
  std::vector<size_t> idx(item.cost.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (item.cost[a] != item.cost[b]) return item.cost[a] < item.cost[b];
    return finite_or_inf(item.error[a]) < finite_or_inf(item.error[b]);
  });
  // Pareto: each kept option costs more and errs less than the one before.
  std::vector<size_t> pareto;
  for (size_t i : idx)
    if (pareto.empty() || finite_or_inf(item.error[i]) < finite_or_inf(item.error[pareto.back()]))
      pareto.push_back(i);
  std::vector<size_t> hull;
  const auto below = [&](size_t a, size_t b, size_t c) {
    // Is b strictly below the segment from a to c? (cross product in doubles)
    const double ca = static_cast<double>(item.cost[a]), cb = static_cast<double>(item.cost[b]),
                 cc = static_cast<double>(item.cost[c]);
    const double ea = item.error[a], eb = item.error[b], ec = item.error[c];
    return (eb - ea) * (cc - ca) < (ec - ea) * (cb - ca);
  };
  for (size_t i : pareto) {
    if (!std::isfinite(item.error[i]) && !hull.empty()) continue;
    while (hull.size() >= 2 && !below(hull[hull.size() - 2], hull.back(), i)) hull.pop_back();
    // An infinite error is kept only as the sole option so far; a finite one replaces it.
    if (hull.size() == 1 && !std::isfinite(item.error[hull.back()])) hull.pop_back();
    hull.push_back(i);
  }
  return hull;
}

struct Relaxed {
  std::vector<size_t> pick;  // per item, a position in its hull
  uint64_t cost = 0;
  double error = 0, dual = 0;
};

// Each item's hull option minimising error + lambda * cost (the cheaper one on ties).
Relaxed relax(std::span<const SolverItem> items, const std::vector<std::vector<size_t>>& hulls,
              double lambda, uint64_t budget) {
  Relaxed r;
  r.pick.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& h = hulls[i];
    size_t best = 0;
    double best_v = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < h.size(); ++k) {
      const double v = items[i].error[h[k]] + lambda * static_cast<double>(items[i].cost[h[k]]);
      if (v < best_v) best_v = v, best = k;
    }
    r.pick[i] = best;
    r.cost += items[i].cost[h[best]];
    r.error += items[i].error[h[best]];
    r.dual += best_v;
  }
  r.dual -= lambda * static_cast<double>(budget);
  return r;
}

}  // namespace

SolverResult solve_budget(std::span<const SolverItem> items, uint64_t budget) {
  std::vector<std::vector<size_t>> hulls;
  uint64_t min_cost = 0;
  for (const auto& item : items) {
    if (item.cost.empty() || item.cost.size() != item.error.size())
      throw Error("solve_budget: an item without options");
    hulls.push_back(lower_hull(item));
    min_cost += item.cost[hulls.back().front()];
  }
  if (min_cost > budget)
    throw Error(fmt::format("solve_budget: the cheapest options cost {} bytes, over the budget {}",
                            min_cost, budget));
  SolverResult out;
  Relaxed best = relax(items, hulls, 0.0, budget);
  double lp = best.dual;
  if (best.cost > budget) {
    // Bisection on the multiplier: the least lambda whose choice fits.
    double lo = 0, hi = 1e-12;
    Relaxed at_hi = relax(items, hulls, hi, budget);
    while (at_hi.cost > budget && hi < 1e300) {
      lo = hi;
      hi *= 4;
      at_hi = relax(items, hulls, hi, budget);
      lp = std::max(lp, at_hi.dual);
    }
    for (int it = 0; it < 200 && hi - lo > hi * 1e-15; ++it) {
      const double mid = lo + (hi - lo) / 2;
      const Relaxed r = relax(items, hulls, mid, budget);
      lp = std::max(lp, r.dual);
      if (r.cost <= budget)
        hi = mid, at_hi = r;
      else
        lo = mid;
    }
    best = at_hi;
    out.lambda = hi;
  }
  out.pick.resize(items.size());
  std::vector<uint64_t> cost(items.size());
  std::vector<double> error(items.size());
  uint64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    out.pick[i] = hulls[i][best.pick[i]];
    cost[i] = items[i].cost[out.pick[i]];
    error[i] = items[i].error[out.pick[i]];
    total += cost[i];
  }
  // Greedy fill: what the multiplier's choice leaves of the budget goes, step by step, to the
  // change (any option, on the hull or not) with the largest error drop per byte that fits.
  for (;;) {
    const uint64_t left = budget - total;
    size_t bi = 0, bk = 0;
    double best_ratio = 0;
    bool found = false;
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t k = 0; k < items[i].cost.size(); ++k) {
        const double e = finite_or_inf(items[i].error[k]);
        if (!(e < error[i])) continue;
        const uint64_t c = items[i].cost[k];
        if (c > cost[i] && c - cost[i] > left) continue;
        // A cheaper or equal option that errs less is a pure gain.
        const double ratio = c <= cost[i] ? std::numeric_limits<double>::infinity()
                                          : (error[i] - e) / static_cast<double>(c - cost[i]);
        if (!found || ratio > best_ratio) found = true, best_ratio = ratio, bi = i, bk = k;
      }
    if (!found) break;
    total = total - cost[bi] + items[bi].cost[bk];
    out.pick[bi] = bk;
    cost[bi] = items[bi].cost[bk];
    error[bi] = items[bi].error[bk];
  }
  out.cost = total;
  for (double e : error) out.error += e;
  out.lp_bound = std::min(lp, out.error);
  return out;
}

}  // namespace gguf
