#include "sim/fsdp2_timing.hpp"

#include <algorithm>

namespace ppsched {
namespace {

// The layers' share of `total`: each layer's time of `part` over all of theirs.
std::vector<double> layer_times(const std::vector<FsdpLayerTime>& layers, double total,
                                double (*of)(const FsdpLayerTime&)) {
  double sum = 0;
  for (const FsdpLayerTime& l : layers) sum += of(l);
  std::vector<double> out(layers.size(), layers.empty() ? 0.0 : total / static_cast<double>(layers.size()));
  if (sum > 0)
    for (size_t k = 0; k < layers.size(); ++k) out[k] = total * of(layers[k]) / sum;
  return out;
}

bool valid_unit(const std::vector<FsdpUnit>& units, int32_t u) { return u >= 0 && static_cast<size_t>(u) < units.size(); }

// The communication lane: one collective at a time, in issue order.
struct Lane {
  double free_at = 0;
  Fsdp2Pass* pass;
  // A collective issued at `issued` lasting `ms`; returns its end.
  double run(double issued, double ms) {
    const double start = std::max(free_at, issued);
    free_at = start + ms;
    pass->collective_ms += ms;
    ++pass->collectives;
    return free_at;
  }
};

}  // namespace

Fsdp2Pass fsdp2_forward(const std::vector<FsdpUnit>& units, const std::vector<FsdpLayerTime>& layers, double fwd_ms,
                        const Fsdp2CollectiveMs& all_gather_ms) {
  Fsdp2Pass pass;
  pass.compute_ms = fwd_ms;
  const std::vector<double> t = layer_times(layers, fwd_ms, [](const FsdpLayerTime& l) { return l.fwd_ms; });
  // The units in the order their first layer runs; ready[u]: when u's all-gather ends.
  std::vector<int32_t> order;
  std::vector<char> seen(units.size(), 0);
  for (const FsdpLayerTime& l : layers)
    if (valid_unit(units, l.unit) && !seen[static_cast<size_t>(l.unit)]) seen[static_cast<size_t>(l.unit)] = 1, order.push_back(l.unit);
  std::vector<double> ready(units.size(), 0.0);
  Lane lane{0.0, &pass};
  if (!order.empty()) ready[static_cast<size_t>(order[0])] = lane.run(0.0, all_gather_ms(units[static_cast<size_t>(order[0])].bytes));
  std::vector<char> started(units.size(), 0);
  size_t next = 1;  // the next unit in `order` to gather
  double clock = 0;
  for (size_t k = 0; k < layers.size(); ++k) {
    const int32_t u = layers[k].unit;
    double start = clock;
    if (valid_unit(units, u) && !started[static_cast<size_t>(u)]) {
      started[static_cast<size_t>(u)] = 1;
      start = std::max(clock, ready[static_cast<size_t>(u)]);
      // Unit u starts: its gathered copy is taken, the next unit's all-gather may run.
      if (next < order.size()) {
        const int32_t n = order[next++];
        ready[static_cast<size_t>(n)] = lane.run(start, all_gather_ms(units[static_cast<size_t>(n)].bytes));
      }
    }
    clock = start + t[k];
  }
  pass.span_ms = std::max(clock, lane.free_at);
  return pass;
}

Fsdp2Pass fsdp2_backward(const std::vector<FsdpUnit>& units, const std::vector<FsdpLayerTime>& layers, double bwd_ms,
                         Fsdp2BackwardPart part, const Fsdp2CollectiveMs& all_gather_ms,
                         const Fsdp2CollectiveMs& reduce_scatter_ms) {
  Fsdp2Pass pass;
  pass.compute_ms = bwd_ms;
  const bool gathers = part != Fsdp2BackwardPart::Weight, reduces = part != Fsdp2BackwardPart::Input;
  double (*of)(const FsdpLayerTime&) = [](const FsdpLayerTime& l) { return l.bwd_input_ms + l.bwd_weight_ms; };
  if (part == Fsdp2BackwardPart::Input) of = [](const FsdpLayerTime& l) { return l.bwd_input_ms; };
  if (part == Fsdp2BackwardPart::Weight) of = [](const FsdpLayerTime& l) { return l.bwd_weight_ms; };
  const std::vector<double> times = layer_times(layers, bwd_ms, of);
  // In reverse: the order units start their backward, and each unit's last layer to run.
  std::vector<int32_t> order;
  std::vector<size_t> last(units.size(), 0);
  std::vector<char> seen(units.size(), 0);
  for (size_t k = layers.size(); k-- > 0;) {
    const int32_t u = layers[k].unit;
    if (!valid_unit(units, u)) continue;
    if (!seen[static_cast<size_t>(u)]) seen[static_cast<size_t>(u)] = 1, order.push_back(u);
    last[static_cast<size_t>(u)] = k;
  }
  const auto needs_gather = [&](int32_t u) { return gathers && !units[static_cast<size_t>(u)].kept_gathered; };
  std::vector<double> ready(units.size(), 0.0);
  Lane lane{0.0, &pass};
  if (!order.empty() && needs_gather(order[0]))
    ready[static_cast<size_t>(order[0])] = lane.run(0.0, all_gather_ms(units[static_cast<size_t>(order[0])].bytes));
  std::vector<char> started(units.size(), 0);
  size_t next = 1;
  double clock = 0;
  for (size_t k = layers.size(); k-- > 0;) {
    const int32_t u = layers[k].unit;
    double start = clock;
    if (valid_unit(units, u) && !started[static_cast<size_t>(u)]) {
      started[static_cast<size_t>(u)] = 1;
      start = std::max(clock, ready[static_cast<size_t>(u)]);
      if (next < order.size()) {  // prefetch the unit whose backward comes next
        const int32_t n = order[next++];
        if (needs_gather(n)) ready[static_cast<size_t>(n)] = lane.run(start, all_gather_ms(units[static_cast<size_t>(n)].bytes));
      }
    }
    clock = start + times[k];
    if (reduces && valid_unit(units, u) && last[static_cast<size_t>(u)] == k)
      lane.run(clock, reduce_scatter_ms(units[static_cast<size_t>(u)].grad_bytes));
  }
  pass.span_ms = std::max(clock, lane.free_at);
  return pass;
}

}  // namespace ppsched
