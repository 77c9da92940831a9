// The controllable-memory paper's building blocks as its authors' v_auto_schedule.py builds
// them (rules restated from its functions and their docstrings; no code copied). A grid is one
// string per rank, one char per unit slot: F f B b W w, or ' ' for idle. Where the reference
// would raise (an assertion or an index out of range) the block gives no schedule here.
#include "sim/search/building_blocks.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

namespace ppsched::search {
namespace {

constexpr int kPeriod = 6;
constexpr const char* kLetters = "FfBbWw";
enum : int { kF = 0, kFf, kB, kBb, kW, kWw };
using Block = std::array<int, 6>;  // position of each letter in the period (-1: not yet)
using Grid = std::vector<std::string>;

struct Reject {};  // what the reference raises on

int letter_index(char c) {
  const char* at = std::strchr(kLetters, c);
  return c != '\0' && at ? static_cast<int>(at - kLetters) : -1;
}
bool is_forward(char c) { return c == 'F' || c == 'f'; }
bool is_weight(char c) { return c == 'W' || c == 'w'; }
bool is_down(char c) { return c == 'F' || c == 'B'; }  // runs rank 0 -> P-1 (F, B); f, b run P-1 -> 0
bool is_up(char c) { return c == 'f' || c == 'b'; }

// A cell with the reference's list indexing: a negative index counts from the end.
char& cell(std::string& row, long j) {
  const long n = static_cast<long>(row.size());
  if (j < 0) j += n;
  if (j < 0 || j >= n) throw Reject{};
  return row[static_cast<size_t>(j)];
}
void check(bool ok) {
  if (!ok) throw Reject{};
}

// Per rank: the peak of F/f minus W/w over its slots.
std::vector<int> rank_peaks(const Grid& g) {
  std::vector<int> out;
  for (const auto& row : g) {
    int live = 0, peak = 0;
    for (char c : row) {
      if (is_forward(c)) ++live;
      if (is_weight(c)) --live;
      peak = std::max(peak, live);
    }
    out.push_back(peak);
  }
  return out;
}
int grid_peak(const Grid& g) {
  int p = 0;
  for (int x : rank_peaks(g)) p = std::max(p, x);
  return p;
}

size_t common_length(const Grid& g) {
  size_t n = 0;
  for (const auto& row : g) {
    check(n == 0 || n == row.size());
    n = std::max(n, row.size());
  }
  return n;
}

// Slot of the k-th pass of letter c on rank i, filled as a walk goes (-1: not yet).
struct PassIndex {
  int P, M;
  std::vector<int> at;
  PassIndex(int p, int m) : P(p), M(m), at(static_cast<size_t>(p) * static_cast<size_t>(m) * 6, -1) {}
  int& operator()(int i, char c, int k) {
    check(k >= 0 && k < M && i >= 0 && i < P);
    return at[(static_cast<size_t>(k) * static_cast<size_t>(P) + static_cast<size_t>(i)) * 6 + static_cast<size_t>(letter_index(c))];
  }
};

// W (w) at the first free position after B (b), cyclically.
Block fill_weights(Block b) {
  std::array<bool, kPeriod> used{};
  for (int k = 0; k < kPeriod; ++k)
    if (b[static_cast<size_t>(k)] >= 0) used[static_cast<size_t>(b[static_cast<size_t>(k)])] = true;
  check(b[kB] >= 0 && b[kBb] >= 0);
  for (auto [back, weight] : {std::pair<int, int>{kB, kW}, {kBb, kWw}})
    for (int j = 0; j < kPeriod; ++j) {
      const int q = (b[static_cast<size_t>(back)] + j) % kPeriod;
      if (!used[static_cast<size_t>(q)]) {
        b[static_cast<size_t>(weight)] = q;
        used[static_cast<size_t>(q)] = true;
        break;
      }
    }
  return b;
}

// The blocks of ranks 0..P-1 (Appendix A), or empty when two passes of a rank collide.
std::vector<Block> blocks_of(const Block& first, int d0, int d1, int len0, int P) {
  std::vector<Block> out{first};
  for (int i = 0; i + 1 < P; ++i) {
    const int d = i < len0 ? d0 : d1;
    const std::array<int, 4> shift = {d, -1, d, -1};
    Block next = {-1, -1, -1, -1, -1, -1};
    std::array<bool, kPeriod> used{};
    for (int k = 0; k < 4; ++k) {
      const int q = (out.back()[static_cast<size_t>(k)] + shift[static_cast<size_t>(k)] + kPeriod) % kPeriod;
      if (used[static_cast<size_t>(q)]) return {};
      used[static_cast<size_t>(q)] = true;
      next[static_cast<size_t>(k)] = q;
    }
    out.push_back(fill_weights(next));
  }
  return out;
}

// 1. Repeating: each rank's block (6 chars) 4P + M + 1 times; then micro 0 of every letter is
// its first occurrence after its input's, walking the chain F down, f up, B down, b up (with each
// W/w after its B/b); every occurrence before micro 0 or from micro M on is cleared.
Grid repeat(const std::vector<Block>& blocks, int P, int M) {
  Grid g;
  for (const Block& b : blocks) {
    std::string period(kPeriod, ' ');
    for (int k = 0; k < kPeriod; ++k)
      if (b[static_cast<size_t>(k)] >= 0) period[static_cast<size_t>(b[static_cast<size_t>(k)])] = kLetters[k];
    std::string row;
    for (int n = 0; n < 4 * P + M + 1; ++n) row += period;
    g.push_back(row);
  }
  auto clear_from = [&](int i, long pos, long step) {
    std::string& row = g[static_cast<size_t>(i)];
    while (pos >= 0 && pos < static_cast<long>(row.size())) {
      row[static_cast<size_t>(pos)] = ' ';
      pos += step * kPeriod;
    }
  };
  long index = kPeriod;
  for (const char c : std::string("FfBb")) {
    for (int n = 0; n < P; ++n) {
      const int i = is_down(c) ? n : P - 1 - n;
      std::string& row = g[static_cast<size_t>(i)];
      for (int j = 0; j < kPeriod; ++j) {
        if (cell(row, index) == c) {
          clear_from(i, index - kPeriod, -1);
          clear_from(i, index + static_cast<long>(kPeriod) * M, 1);
          ++index;
          if (c == 'B' || c == 'b') {
            const char w = c == 'B' ? 'W' : 'w';
            for (int k = 0; k < kPeriod; ++k)
              if (cell(row, index + k) == w) {
                clear_from(i, index + k - kPeriod, -1);
                clear_from(i, index + k + static_cast<long>(kPeriod) * M, 1);
                break;
              }
          }
          break;
        }
        ++index;
      }
    }
  }
  return g;
}

// 2. Squeezing: every pass as early as its rank and its input allow, order unchanged (columns
// walked left to right; in each, F/B/W of ranks 0..P-1, then f/b/w of ranks P-1..0).
Grid squeeze(const Grid& g, int M) {
  const int P = static_cast<int>(g.size());
  const size_t len = common_length(g);
  Grid out;
  for (const auto& row : g) out.emplace_back(row.size(), ' ');
  std::vector<std::array<int, 6>> count(static_cast<size_t>(P), std::array<int, 6>{});
  PassIndex where(P, M);
  std::vector<int> next(static_cast<size_t>(P), 0);
  for (size_t j = 0; j < len; ++j)
    for (int dir = 0; dir < 2; ++dir)
      for (int n = 0; n < P; ++n) {
        const int i = dir == 0 ? n : P - 1 - n;
        const char c = g[static_cast<size_t>(i)][j];
        if (c == ' ') continue;
        const bool upper = c == 'F' || c == 'B' || c == 'W';
        if ((dir == 0) != upper) continue;
        int& k = count[static_cast<size_t>(i)][static_cast<size_t>(letter_index(c))];
        check(k < M);
        int at = next[static_cast<size_t>(i)];
        if (is_weight(c) || (i == 0 && is_down(c)) || (i == P - 1 && is_up(c))) {
          // its input is on its own rank, placed before it
          if (i == 0 && c == 'B') check(where(i, 'f', k) >= 0);
          if (i == P - 1 && c == 'f') check(where(i, 'F', k) >= 0);
          if (i == P - 1 && c == 'b') check(where(i, 'B', k) >= 0);
        } else {
          const int dep = where(is_down(c) ? i - 1 : i + 1, c, k);
          check(dep >= 0);
          at = std::max(dep + 1, at);
        }
        cell(out[static_cast<size_t>(i)], at) = c;
        where(i, c, k) = at;
        ++k;
        next[static_cast<size_t>(i)] = at + 1;
      }
  const size_t new_len = static_cast<size_t>(*std::max_element(next.begin(), next.end()));
  for (auto& row : out)
    if (row.size() > new_len) row.resize(new_len);
  return out;
}

// 3a. Warm-up (before each rank's first b), rebuilt without raising the peak: rank i keeps its
// counts of F, f, B, W there; it first runs F's in 2(P-1-i) slots and i+1 pairs (F, f), at most
// #f = min(i+1, peak/2) f's and #F = peak - #f F's, then rounds (B, W, f or else F).
Grid warm_up(Grid g, int M) {
  const int P = static_cast<int>(g.size());
  const int peak = std::min(grid_peak(g), 2 * P);
  for (int i = 0; i < P; ++i) {
    std::string& row = g[static_cast<size_t>(i)];
    const int want_ff = std::min({i + 1, peak / 2, M});
    const int want_f = std::min(peak - want_ff, M);
    int nf = 0, nff = 0, nb = 0, nw = 0;
    for (size_t j = 0; j < row.size(); ++j) {
      const char c = row[j];
      if (c == 'b') break;
      if (c == 'F') ++nf;
      else if (c == 'f') ++nff;
      else if (c == 'B') ++nb;
      else if (c == 'W') ++nw;
      else check(c == ' ');
      row[j] = ' ';
    }
    long j = i;
    int uf = 0, uff = 0, ub = 0, uw = 0;
    for (int n = 0; n < 2 * (P - 1 - i); ++n) {
      if (uf < want_f && uf < nf) cell(row, j) = 'F', ++uf;
      ++j;
    }
    for (int n = 0; n < i + 1; ++n) {
      if (uf < want_f && uf < nf) cell(row, j) = 'F', ++uf;
      ++j;
      if (uff < want_ff && uff < nff) cell(row, j) = 'f', ++uff;
      ++j;
    }
    while (uf < nf || uff < nff || ub < nb || uw < nw) {
      if (ub < nb) cell(row, j) = 'B', ++ub;
      ++j;
      if (uw < nw) cell(row, j) = 'W', ++uw;
      ++j;
      if (uff < nff) {
        check(uff < uf);
        cell(row, j) = 'f', ++uff;
      } else if (uf < nf) {
        cell(row, j) = 'F', ++uf;
      }
      ++j;
    }
  }
  return g;
}

// Passes of micro-batches >= M cleared (the enumeration runs with at least 2P micro-batches).
Grid drop_extra(Grid g, int M) {
  for (auto& row : g) {
    std::array<int, 6> count{};
    for (char& c : row) {
      if (c == ' ') continue;
      int& k = count[static_cast<size_t>(letter_index(c))];
      if (k >= M) c = ' ';
      else ++k;
    }
  }
  return g;
}

// With few micro-batches: each rank moves its first weight passes to its end while its peak
// stays within `peak` (using memory the warm-up leaves unused).
Grid release_weights(Grid g, int peak) {
  const size_t len = common_length(g);
  const std::vector<int> peaks = rank_peaks(g);
  if (peak == 0) peak = *std::max_element(peaks.begin(), peaks.end());
  const int lowest = *std::min_element(peaks.begin(), peaks.end());
  for (size_t i = 0; i < g.size(); ++i) {
    std::string& row = g[i];
    std::string padding(static_cast<size_t>(std::max(0, peak - lowest)), ' ');
    int moved = 0;
    for (size_t j = 0; j < len; ++j) {
      if (peaks[i] + moved >= peak) break;
      if (is_weight(row[j])) {
        cell(padding, moved) = row[j];
        row[j] = ' ';
        ++moved;
      }
    }
    row += padding;
  }
  return g;
}

// 3b. Cool-down (after each rank's last f): rank i keeps (peak+1)/2 b's and min(i+1, peak - that)
// B's of its tail, drops tail W's until its W's and w's cover those and the peak, places the b's
// and B's at fixed distances from rank 0's last f, puts the W's back into free slots after its last
// remaining W (W's before w's), and squeezes.
Grid cool_down(Grid g, int M) {
  const int P = static_cast<int>(g.size());
  const int peak = grid_peak(g);
  check(peak <= 2 * P);
  const int max_bb = std::min((peak + 1) / 2, M);
  const int max_b = std::min(peak - max_bb, M);
  long start = -1;
  for (int i = 0; i < P; ++i) {
    std::string& row = g[static_cast<size_t>(i)];
    int nb = 0, nbb = 0, nw = 0, nww = 0;
    long last_ff = -1;
    for (long j = static_cast<long>(row.size()) - 1; j >= 0; --j) {
      char& c = row[static_cast<size_t>(j)];
      if (c == 'f' && last_ff == -1) last_ff = j;
      if (c == 'B' && nb < i + 1 && nb < max_b) c = ' ', ++nb;
      if (c == 'b' && nbb < max_bb) c = ' ', ++nbb;
    }
    for (long j = static_cast<long>(row.size()) - 1; j >= 0; --j) {
      char& c = row[static_cast<size_t>(j)];
      if (nw >= nb && nww >= nbb && nw + nww >= peak) break;
      if (c == 'W') c = ' ', ++nw;
      if (c == 'w') c = ' ', ++nww;
    }
    if (i == 0) start = last_ff;
    for (int k = 0; k < nbb; ++k) {
      char& c = cell(row, start - i + 2 * P - 2 * k);
      check(c == ' ');
      c = 'b';
    }
    for (int k = 0; k < nb; ++k) cell(row, start + 1 + i - 2 * k) = 'B';
  }
  size_t longest = 0;
  for (auto& row : g) {
    int owe_w = 0, owe_ww = 0;
    long last_w = -1;
    for (long j = static_cast<long>(row.size()) - 1; j >= 0; --j)
      if (is_weight(row[static_cast<size_t>(j)])) {
        last_w = j;
        break;
      }
    const long len = static_cast<long>(row.size());
    for (long j = 0; j < len; ++j) {
      char& c = row[static_cast<size_t>(j)];
      if (c == 'B') ++owe_w;
      else if (c == 'b') ++owe_ww;
      else if (c == 'W') --owe_w;
      else if (c == 'w') --owe_ww;
      if (c == ' ' && j > last_w) {
        if (owe_w > 0) c = 'W', --owe_w;
        else if (owe_ww > 0) c = 'w', --owe_ww;
      }
    }
    row.append(static_cast<size_t>(std::max(0, owe_w)), 'W');
    row.append(static_cast<size_t>(std::max(0, owe_ww)), 'w');
    longest = std::max(longest, row.size());
  }
  for (auto& row : g) row.resize(longest, ' ');
  return squeeze(g, M);
}

// 3c. Left to right, every idle slot of a rank takes the first later pass of each letter (nearest
// first) whose input is already placed before it, unless it is a forward that would raise the
// rank's peak.
void fill_idle(Grid& g, int M) {
  const int P = static_cast<int>(g.size());
  const int peak = grid_peak(g);
  const size_t len = common_length(g);
  std::vector<std::array<long, 6>> last(static_cast<size_t>(P));
  for (int i = 0; i < P; ++i) {
    last[static_cast<size_t>(i)].fill(-1);
    for (size_t j = 0; j < len; ++j) {
      const char c = g[static_cast<size_t>(i)][j];
      if (c != ' ') last[static_cast<size_t>(i)][static_cast<size_t>(letter_index(c))] = static_cast<long>(j);
    }
  }
  std::vector<int> mem(static_cast<size_t>(P), 0);
  std::vector<std::array<int, 6>> count(static_cast<size_t>(P), std::array<int, 6>{});
  PassIndex where(P, M);
  auto placed = [&](int i, char c, long j) {
    int& k = count[static_cast<size_t>(i)][static_cast<size_t>(letter_index(c))];
    where(i, c, k) = static_cast<int>(j);
    ++k;
    if (is_forward(c)) ++mem[static_cast<size_t>(i)];
    if (is_weight(c)) --mem[static_cast<size_t>(i)];
  };
  auto seen = [&](int i, char c) { return count[static_cast<size_t>(i)][static_cast<size_t>(letter_index(c))]; };
  for (size_t j = 0; j < len; ++j)
    for (int i = 0; i < P; ++i) {
      std::string& row = g[static_cast<size_t>(i)];
      const char here = row[j];
      if (here != ' ') {
        check(letter_index(here) >= 0);
        placed(i, here, static_cast<long>(j));
        continue;
      }
      std::array<bool, 6> available{};
      int left = 0;
      for (int k = 0; k < 6; ++k)
        if (last[static_cast<size_t>(i)][static_cast<size_t>(k)] > static_cast<long>(j)) available[static_cast<size_t>(k)] = true, ++left;
      int delta = 0, delta_peak = 0;
      for (size_t k = j + 1; k < len && left > 0; ++k) {
        const char c = row[k];
        if (is_forward(c)) ++delta;
        else if (is_weight(c)) --delta;
        const int before = delta_peak;
        delta_peak = std::max(delta_peak, delta);
        if (c == ' ' || !available[static_cast<size_t>(letter_index(c))]) continue;
        available[static_cast<size_t>(letter_index(c))] = false;
        --left;
        if (is_forward(c) && mem[static_cast<size_t>(i)] + before >= peak) continue;
        const int n = seen(i, c);
        bool movable = true;
        if (c == 'F' || c == 'B') {
          if (i > 0) {
            const int dep = where(i - 1, c, n);
            movable = dep > -1 && dep < static_cast<int>(j);
          } else if (c == 'B') {
            movable = seen(i, 'f') > n;
          }
        } else if (c == 'f' || c == 'b') {
          if (i + 1 < P) {
            const int dep = where(i + 1, c, n);
            movable = dep > -1 && dep < static_cast<int>(j);
          } else {
            movable = seen(i, c == 'f' ? 'F' : 'B') > n;
          }
        } else {
          movable = seen(i, c == 'W' ? 'B' : 'b') > n;
        }
        if (!movable) continue;
        row[j] = c;
        row[k] = ' ';
        placed(i, c, static_cast<long>(j));
        break;
      }
    }
}

// Every W/w relabelled in the order of the B/b's (the k-th weight pass belongs to the k-th
// input backward, of whichever stage).
Grid relabel_weights(Grid g, int M) {
  for (auto& row : g) {
    std::array<int, 6> count{};
    for (char c : row)
      if (c != ' ') ++count[static_cast<size_t>(letter_index(c))];
    for (int n : count) check(n == M);
    std::deque<char> owed;
    for (char& c : row) {
      if (c == 'B') owed.push_back('W');
      else if (c == 'b') owed.push_back('w');
      else if (is_weight(c)) {
        check(!owed.empty());
        c = owed.front();
        owed.pop_front();
      }
    }
    check(owed.empty());
  }
  return g;
}

// Every pass once and after its inputs (the reference's final check; false: no schedule).
bool correct(const Grid& g, int M) {
  const int P = static_cast<int>(g.size());
  PassIndex where(P, M);
  for (int i = 0; i < P; ++i) {
    std::array<int, 6> count{};
    const auto& row = g[static_cast<size_t>(i)];
    for (size_t j = 0; j < row.size(); ++j) {
      const int c = letter_index(row[j]);
      if (c < 0) continue;
      if (count[static_cast<size_t>(c)] >= M) return false;
      where(i, row[j], count[static_cast<size_t>(c)]++) = static_cast<int>(j);
    }
    for (int n : count)
      if (n != M) return false;
  }
  for (int i = 0; i < P; ++i)
    for (int k = 0; k < M; ++k) {
      if (where(i, 'B', k) >= where(i, 'W', k) || where(i, 'b', k) >= where(i, 'w', k)) return false;
      if (i == 0 && where(i, 'f', k) >= where(i, 'B', k)) return false;
      if (i == P - 1 && (where(i, 'F', k) >= where(i, 'f', k) || where(i, 'B', k) >= where(i, 'b', k))) return false;
      if (i > 0 && i < P - 1 &&
          (where(i - 1, 'F', k) >= where(i, 'F', k) || where(i - 1, 'B', k) >= where(i, 'B', k) ||
           where(i + 1, 'f', k) >= where(i, 'f', k) || where(i + 1, 'b', k) >= where(i, 'b', k)))
        return false;
    }
  return true;
}

// The highest rank's idle slots between its first slot (r) and its last pass.
int bubble_of(const Grid& g) {
  int worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    int end = 0, busy = 0;
    for (size_t j = 0; j < g[i].size(); ++j)
      if (g[i][j] != ' ') end = static_cast<int>(j) + 1, ++busy;
    worst = std::max(worst, end - busy - static_cast<int>(i));
  }
  return worst;
}

Order order_of_grid(const Grid& g) {
  const int P = static_cast<int>(g.size());
  Order o(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    std::array<int, 6> count{};
    const int first = r, second = 2 * P - 1 - r;
    for (char c : g[static_cast<size_t>(r)]) {
      const int k = letter_index(c);
      if (k < 0) continue;
      static constexpr std::array<Kind, 6> kind = {Kind::F, Kind::F, Kind::I, Kind::I, Kind::W, Kind::W};
      static constexpr std::array<bool, 6> on_second = {false, true, true, false, true, false};
      o[static_cast<size_t>(r)].push_back(
          Task{kind[static_cast<size_t>(k)], on_second[static_cast<size_t>(k)] ? second : first, count[static_cast<size_t>(k)]++});
    }
  }
  return o;
}

// One block's schedule (`schedule_by_building_block`): nothing when it fails, `peak` set to
// the peak that decided it.
std::optional<BlockSchedule> schedule_block(int P, int M, const std::vector<Block>& blocks, int max_mem, int& peak) {
  const int Mr = std::max(M, 2 * P);  // extra micro-batches, dropped after the warm-up
  Grid g = repeat(blocks, P, Mr);
  int first_peak = grid_peak(g);
  peak = first_peak;
  if ((M == Mr && first_peak > max_mem) || first_peak > 2 * P) return std::nullopt;
  g = squeeze(g, Mr);
  g = squeeze(warm_up(std::move(g), Mr), Mr);
  if (grid_peak(g) > first_peak) return std::nullopt;
  if (M < Mr) {
    const int warm_peak = grid_peak(g);
    g = drop_extra(std::move(g), M);
    if (M <= P && 2 * M <= max_mem) g = release_weights(std::move(g), std::min(2 * P, warm_peak));
    g = squeeze(g, M);
    first_peak = peak = grid_peak(g);
    if (peak > max_mem) return std::nullopt;
  }
  g = cool_down(std::move(g), M);
  fill_idle(g, M);
  g = relabel_weights(std::move(g), M);
  peak = grid_peak(g);
  if (peak > first_peak) {
    peak = first_peak;
    return std::nullopt;
  }
  if (!correct(g, M)) return std::nullopt;
  BlockSchedule out;
  out.peak = peak;
  out.bubble = bubble_of(g);
  out.order = order_of_grid(g);
  out.grid = std::move(g);
  return out;
}

}  // namespace

std::vector<BlockSchedule> controllable_memory_schedules(int P, int M) {
  static std::mutex mu;
  static int cached_p = -1, cached_m = -1;
  static std::vector<BlockSchedule> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (P == cached_p && M == cached_m) return cached;
  std::vector<BlockSchedule> out;
  if (P >= 2 && M >= 1) {
    const int max_mem = 2 * P;
    // Rank 0's blocks: F at 0, f, B, b at distinct positions 1..5; offsets d0 >= d1 (§3.1).
    for (int ff = 1; ff < kPeriod; ++ff)
      for (int b = 1; b < kPeriod; ++b)
        for (int bb = 1; bb < kPeriod; ++bb) {
          if (ff == b || ff == bb || b == bb) continue;
          const Block first = fill_weights(Block{0, ff, b, bb, -1, -1});
          for (int d0 = 1; d0 < kPeriod; ++d0)
            for (int d1 = 1; d1 <= d0; ++d1)
              for (int len0 = 1; len0 < P; ++len0) {
                const auto blocks = blocks_of(first, d0, d1, len0, P);
                if (blocks.empty()) continue;
                int peak = 0;
                std::optional<BlockSchedule> s;
                try {
                  s = schedule_block(P, M, blocks, max_mem, peak);
                } catch (const Reject&) {
                  continue;  // the reference raises here
                }
                if (peak > 2 * P || peak > max_mem) break;  // longer first runs only hold more
                if (s) out.push_back(std::move(*s));
              }
        }
  }
  cached_p = P;
  cached_m = M;
  cached = out;
  return out;
}

std::vector<Found> building_block_seeds(const Problem& p, size_t keep) {
  std::vector<Found> out;
  const int P = p.ranks, M = p.micros;
  if (!p.split || P < 2 || p.stages != 2 * P || p.placement.kind != PlacementKind::V) return out;
  Workspace ws;
  Evaluation e;
  for (BlockSchedule& s : controllable_memory_schedules(P, M)) {
    if (!evaluate(p, s.order, ws, e)) continue;
    out.push_back(Found{std::move(s.order), e, Origin::of(Origin::Seed::BuildingBlock, std::to_string(s.peak))});
  }
  std::stable_sort(out.begin(), out.end(), [](const Found& a, const Found& b) {
    return a.eval.makespan < b.eval.makespan - 1e-9 ||
           (a.eval.makespan <= b.eval.makespan + 1e-9 && a.eval.span < b.eval.span - 1e-9);
  });
  std::vector<Found> kept;
  for (Found& f : out) {
    if (kept.size() >= keep) break;
    if (std::none_of(kept.begin(), kept.end(), [&](const Found& g) { return g.order == f.order; })) kept.push_back(std::move(f));
  }
  return kept;
}

Found fill_gaps(const Problem& p, const Found& start) {
  Found best = start;
  Workspace ws;
  Evaluation e;
  if (!evaluate(p, best.order, ws, e)) return best;
  best.eval = e;
  constexpr double kEps = 1e-9;
  bool moved_any = false;
  for (int sweep = 0; sweep < 4; ++sweep) {
    bool moved = false;
    double after = -1;  // gaps are visited in time order, each once per sweep
    int after_rank = -1;
    for (;;) {
      const auto times = task_times(p, best.order);
      // The next gap: a task that starts later than its rank's previous task ends.
      double gap = kNoCap;
      int gr = -1;
      size_t gk = 0;
      for (size_t r = 0; r < times.size(); ++r)
        for (size_t k = 0; k < times[r].size(); ++k) {
          const double free_at = k == 0 ? 0.0 : times[r][k - 1].second;
          if (times[r][k].first <= free_at + kEps) continue;
          const bool later = free_at > after + kEps || (std::abs(free_at - after) <= kEps && static_cast<int>(r) > after_rank);
          if (!later) continue;
          if (free_at < gap - kEps) gap = free_at, gr = static_cast<int>(r), gk = k;
          break;  // the rank's first gap after `after`; its later ones come in later rounds
        }
      if (gr < 0) break;
      after = gap;
      after_rank = gr;
      // Candidates: the first later task of each (kind, stage), nearest first.
      const auto& ro = best.order[static_cast<size_t>(gr)];
      std::vector<size_t> cand;
      for (size_t j = gk + 1; j < ro.size() && cand.size() < 6; ++j) {
        const bool first_of_kind = std::none_of(cand.begin(), cand.end(), [&](size_t c) {
          return ro[c].kind == ro[j].kind && ro[c].stage == ro[j].stage;
        });
        if (first_of_kind) cand.push_back(j);
      }
      for (size_t j : cand) {
        Order trial = best.order;
        auto& tr = trial[static_cast<size_t>(gr)];
        const Task t = tr[j];
        tr.erase(tr.begin() + static_cast<long>(j));
        tr.insert(tr.begin() + static_cast<long>(gk), t);
        if (!evaluate(p, trial, ws, e) || e.makespan > best.eval.makespan + kEps) continue;
        best.order = std::move(trial);
        best.eval = e;
        moved = moved_any = true;
        break;
      }
    }
    if (!moved) break;
  }
  if (moved_any) best.origin = start.origin.improved(Improvement::GapsFilled);
  return best;
}

}  // namespace ppsched::search
