// `ppsched tune --partition search`: which layers each stage holds, searched together with the
// schedule. A layout is the number of body layers (decoder, MTP or listed layers) on each of
// the P x V stages, in stage order; the layers pinned to the first and last stage (embedding;
// final norm, head, loss) stay there.
//
// Per V, when the layouts number at most `max_layouts`: time every one (so the best is the
// DES's best, not a local optimum). Otherwise start from the even split (torchtitan's) and from the split that balances the
// stages' compute (a dynamic program over contiguous blocks), then move one layer at a time
// from a stage to another (every stage between them shifts by one layer), trying first the
// moves off the stages the DES's critical path spends the most compute on and onto the least
// loaded ones; keep a move that lowers the makespan of the best verified family under the whole
// per-rank memory cap (a layout no family fits is scored by how far its peak is over the cap,
// so the walk leads back under it). At a local optimum the walk looks two moves ahead from the
// few best neighbours (two boundaries that only pay off shifted together). Stops when that
// finds nothing either, after `max_layouts` layouts, or at the time share. Then the full tune (families, order search, DES hill climb) runs on the
// best layout of each V and on the even split, and the better wins.
//
// Deterministic for a seed, like tune, unless --seconds stops it first (the result says so).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "workload/workload.hpp"
#include "sim/search/tune.hpp"

namespace ppsched::search {

struct PartitionRequest {
  TuneRequest tune;      // shape, V range, placements, budget, DES options, settings; `costs` unused
  int body_layers = 0;   // the layers a layout places
  // The cost model of a layout (body-layer counts per stage, stage order). May throw InputError
  // (a layout whose figures leave the limits): the layout is then not a candidate.
  std::function<CostModel(const std::vector<int>& counts)> costs;
  // torchtitan's even split over a stage count (throws InputError when it has none).
  std::function<std::vector<int>(int stages)> even;
  // The balanced start: forward + backward ms of each body layer, and of the layers pinned to
  // the first and to the last stage.
  std::vector<double> layer_ms;
  double first_ms = 0, last_ms = 0;
  long max_layouts = 400;  // layouts evaluated per V
  bool enumerate = true;   // false: walk even where every layout fits the budget (tests of the walk)
  // Called from the searching thread with the layouts evaluated and the best makespan so far.
  std::function<void(long layouts, double best_ms, double elapsed)> progress;
};

struct PartitionResult {
  TuneResult result;            // the merged leaderboard (each entry's `layout` filled), best first
  std::vector<int> counts;      // the best entry's layout
  std::vector<int> even_counts; // the even split at the best entry's V
  double even_makespan = 0;     // the full tune's best on the even split (0: nothing fits there)
  double searched_makespan = 0; // the full tune's best on the searched layouts (0: nothing fits)
  long layouts = 0;             // layouts evaluated (all V)
  double seconds = 0;
  bool stopped_by_time = false;
};

PartitionResult search_partition(const PartitionRequest& rq);

// Fills what the search reads of a network: its body layers, each layer's forward + backward ms
// (the balanced start), the ms pinned to the first and last stage, and torchtitan's even split.
void describe_workload(PartitionRequest& pr, const Workload& net);

// The contiguous split of `layer_ms` into `stages` blocks minimising the heaviest stage, the
// first stage carrying `first_ms` and the last `last_ms` besides; every stage but the first
// and the last gets at least `min_middle` layers. Among optimal splits, the one whose stages
// are filled front first. Empty when no split exists.
std::vector<int> balanced_counts(const std::vector<double>& layer_ms, int stages, double first_ms, double last_ms,
                                 int min_middle);

std::string counts_string(const std::vector<int>& counts);  // "8,9,8,7"

}  // namespace ppsched::search
