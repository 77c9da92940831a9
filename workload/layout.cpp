#include "workload/layout.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "schedule/errors.hpp"

namespace ppsched {
namespace {

[[noreturn]] void refuse(const std::string& where, const std::string& msg) {
  Location loc;
  loc.field = where;
  throw InputError(loc, msg);
}

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

struct Kinds {
  std::vector<int32_t> first, body, mtp_only, last;  // layer indices by where they go
  std::vector<int32_t> decoder;                      // body layers that are not MTP
};
Kinds kinds_of(const std::vector<Layer>& layers) {
  Kinds k;
  for (size_t i = 0; i < layers.size(); ++i) {
    const int32_t idx = static_cast<int32_t>(i);
    if (pinned_first(layers[i].kind)) k.first.push_back(idx);
    else if (pinned_last(layers[i].kind)) k.last.push_back(idx);
    else {
      k.body.push_back(idx);
      (layers[i].kind == LayerKind::Mtp ? k.mtp_only : k.decoder).push_back(idx);
    }
  }
  return k;
}

// Megatron's parse_str_to_list: commas removed, then `(...)*n` unrolled (the group runs to the
// first ')', as the regular expression \(([^)]+)\)\*(\d+) matches: no nesting), then `x*n`.
std::string unroll(std::string_view in, const std::string& where) {
  std::string s;
  for (char c : in)
    if (c != ',') s += c;
  const auto repeat = [&](std::string& out, std::string_view what, std::string_view digits) {
    if (digits.size() > 9) refuse(where, "repetition *" + clip(std::string(digits), 20) + " is too large");
    const size_t n = static_cast<size_t>(std::stoul(std::string(digits)));
    if (n > 0 && what.size() > (kMaxLayoutChars - out.size()) / n)
      refuse(where, "the layout unrolls to more than " + std::to_string(kMaxLayoutChars) +
                        " characters (README \"Limits\"): is a repetition count a typo?");
    for (size_t k = 0; k < n; ++k) out += what;
  };
  const auto digits_at = [](std::string_view t, size_t i) {
    size_t j = i;
    while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
    return j;
  };
  std::string pass1;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '(') {
      const size_t close = s.find(')', i + 1);
      if (close != std::string::npos && close > i + 1 && close + 1 < s.size() && s[close + 1] == '*') {
        const size_t end = digits_at(s, close + 2);
        if (end > close + 2) {
          repeat(pass1, std::string_view(s).substr(i + 1, close - i - 1), std::string_view(s).substr(close + 2, end - close - 2));
          i = end;
          continue;
        }
      }
    }
    pass1 += s[i++];
  }
  std::string out;
  for (size_t i = 0; i < pass1.size();) {
    if (i + 1 < pass1.size() && pass1[i + 1] == '*') {
      const size_t end = digits_at(pass1, i + 2);
      if (end > i + 2) {
        repeat(out, std::string_view(pass1).substr(i, 1), std::string_view(pass1).substr(i + 2, end - i - 2));
        i = end;
        continue;
      }
    }
    out += pass1[i++];
  }
  return out;
}

Layout parse_megatron(const std::string& text, const std::vector<Layer>& layers, int stages, const std::string& where) {
  const std::string flat = unroll(text, where);
  std::vector<std::string> parts(1);
  for (char c : flat) {
    if (c == '|') {
      parts.emplace_back();
      continue;
    }
    if (c != 'E' && c != 'L' && c != 't' && c != 'm') {
      std::string shown = std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : "\\x" + std::to_string(static_cast<unsigned char>(c));
      refuse(where, "invalid layer character '" + shown + "' in stage " + std::to_string(parts.size() - 1) +
                        " of \"" + clip(text, 80) + "\": Megatron's layout knows E (embedding), t (decoder layer), "
                        "m (MTP layer), L (loss: final norm, head and loss), | between stages, x*n and (...)*n");
    }
    parts.back() += c;
  }
  if (parts.size() != static_cast<size_t>(stages))
    refuse(where, "the layout has " + plural(static_cast<int64_t>(parts.size()), "stage", "stages") + " but the schedule has " +
                      plural(stages, "stage", "stages") + " (P x V, in stage order; Megatron lists every virtual stage)");
  const Kinds k = kinds_of(layers);
  // validate_layer_layout: the first layer is E and the last L, each exactly once; as many t as
  // decoder layers and m as MTP layers; no t after an m.
  std::string all;
  for (const auto& p : parts) all += p;
  const auto count = [&](char c) { return static_cast<int64_t>(std::count(all.begin(), all.end(), c)); };
  if (all.empty() || all.front() != 'E')
    refuse(where, "the first layer must be the embedding, E (Megatron: \"The first layer must be embedding\")");
  if (all.back() != 'L') refuse(where, "the last layer must be the loss, L (Megatron: \"The last layer must be loss\")");
  if (count('E') != 1) refuse(where, "E appears " + std::to_string(count('E')) + " times: the embedding is placed exactly once");
  if (count('L') != 1) refuse(where, "L appears " + std::to_string(count('L')) + " times: the loss is placed exactly once");
  const int64_t decoders = static_cast<int64_t>(k.decoder.size()), mtps = static_cast<int64_t>(k.mtp_only.size());
  if (count('t') != decoders)
    refuse(where, "the layout places " + plural(count('t'), "decoder layer", "decoder layers") + " (t) but the model has " +
                      std::to_string(decoders) + (count('t') < decoders ? ": some would be lost" : ": some would be built twice"));
  if (count('m') != mtps)
    refuse(where, "the layout places " + plural(count('m'), "MTP layer", "MTP layers") + " (m) but the model has " +
                      std::to_string(mtps));
  const size_t first_m = all.find('m');
  if (first_m != std::string::npos && all.find('t', first_m) != std::string::npos)
    refuse(where, "a decoder layer (t) follows an MTP layer (m): decoder layers must be placed before MTP layers");
  Layout out;
  out.how = "Megatron layout \"" + clip(text, 80) + "\"";
  size_t next_decoder = 0, next_mtp = 0;
  for (const auto& p : parts) {
    std::vector<int32_t> stage;
    for (char c : p) {
      if (c == 'E') stage.insert(stage.end(), k.first.begin(), k.first.end());
      else if (c == 'L') stage.insert(stage.end(), k.last.begin(), k.last.end());
      else if (c == 't') stage.push_back(k.decoder[next_decoder++]);
      else stage.push_back(k.mtp_only[next_mtp++]);
    }
    std::sort(stage.begin(), stage.end());
    out.stages.push_back(std::move(stage));
  }
  return out;
}

// "4,2,1,1": one whole number a stage, at most kMaxLayers entries.
std::vector<int64_t> read_counts(const std::string& text, const std::string& where) {
  std::vector<int64_t> counts;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string cell = text.substr(i, j - i);
    cell.erase(0, cell.find_first_not_of(" \t"));
    cell.erase(cell.find_last_not_of(" \t") + 1);
    if (cell.empty() || cell.size() > 9 || !std::all_of(cell.begin(), cell.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      refuse(where, "entry " + std::to_string(counts.size()) + " of \"" + clip(text, 80) +
                        "\" is not a whole number of layers: give one count per stage (\"4,2,1,1\") or Megatron's layout (\"Et*4|tt|t|tL\")");
    counts.push_back(std::stoll(cell));
    if (counts.size() > static_cast<size_t>(kMaxLayers)) refuse(where, "more entries than the limit of " + std::to_string(kMaxLayers));
    i = j + 1;
  }
  return counts;
}

// Counts start with a number; Megatron's layout never does (its first layer is E).
bool is_megatron(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  return first != std::string::npos && !std::isdigit(static_cast<unsigned char>(text[first])) && text[first] != '-';
}

}  // namespace

Layout counts_layout(const std::vector<int64_t>& counts, const std::vector<Layer>& layers, int stages, const std::string& where) {
  const Kinds k = kinds_of(layers);
  if (counts.size() != static_cast<size_t>(stages))
    refuse(where, "the layout has " + plural(static_cast<int64_t>(counts.size()), "stage", "stages") + " but the schedule has " +
                      plural(stages, "stage", "stages") + " (one count per stage, in stage order)");
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  const int64_t body = static_cast<int64_t>(k.body.size());
  if (sum != body)
    refuse(where, "the counts add up to " + plural(sum, "layer", "layers") + " but the model has " +
                      plural(body, "layer", "layers") + " to place (" +
                      (sum < body ? std::to_string(body - sum) + " would be lost" : std::to_string(sum - body) + " would be built twice") +
                      "; the embedding goes on the first stage and the norm, head and loss on the last)");
  Layout out;
  out.how = "layer counts " + counts_text(counts);
  size_t next = 0;
  for (int s = 0; s < stages; ++s) {
    std::vector<int32_t> stage;
    if (s == 0) stage = k.first;
    for (int64_t c = 0; c < counts[static_cast<size_t>(s)]; ++c) stage.push_back(k.body[next++]);
    if (s == stages - 1) stage.insert(stage.end(), k.last.begin(), k.last.end());
    out.stages.push_back(std::move(stage));
  }
  return out;
}

namespace {

Layout parse_counts(const std::string& text, const std::vector<Layer>& layers, int stages, const std::string& where) {
  Layout out = counts_layout(read_counts(text, where), layers, stages, where);
  out.how = "--layout " + clip(text, 80);
  return out;
}

}  // namespace

Layout parse_layout(const std::string& text, const std::vector<Layer>& layers, int stages, const std::string& where) {
  if (text.empty()) refuse(where, "an empty layout: give one count per stage (\"4,2,1,1\") or Megatron's layout");
  return is_megatron(text) ? parse_megatron(text, layers, stages, where) : parse_counts(text, layers, stages, where);
}

int64_t layout_body_layers(const std::string& text, int64_t limit, const std::string& where) {
  if (text.empty()) refuse(where, "an empty layout: give one count per stage (\"4,2,1,1\") or Megatron's layout");
  int64_t n = 0;
  if (is_megatron(text)) {
    const std::string flat = unroll(text, where);
    n = static_cast<int64_t>(std::count(flat.begin(), flat.end(), 't') + std::count(flat.begin(), flat.end(), 'm'));
  } else {
    for (int64_t c : read_counts(text, where)) n = std::min(n + c, limit + 1);
  }
  if (n > limit) refuse(where, "the layout places more than " + std::to_string(limit) + " layers");
  return n;
}

// torchtitan's generate_llm_fqn_per_model_part(num_stages, num_layers, input_weight=1,
// output_weight=1): the embedding and the norm + head count as one layer each (a weight of 0
// when the model has none), (layers + weights) / stages per stage, the first stages one more
// for the remainder, the weights taken from the first and the last stage's share.
Layout even_layout(const std::vector<Layer>& layers, int stages) {
  const Kinds k = kinds_of(layers);
  const int64_t n = static_cast<int64_t>(k.body.size());
  const int64_t in_w = k.first.empty() ? 0 : 1, out_w = k.last.empty() ? 0 : 1;
  const std::string where = "layout";
  Layout out;
  out.how = "even split (torchtitan's rule)";
  if (stages == 1) {
    std::vector<int32_t> all(layers.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    out.stages.push_back(std::move(all));
    return out;
  }
  const int64_t effective = n + in_w + out_w;
  if (stages > effective)
    refuse(where, std::to_string(stages) + " stages cannot share " + plural(n, "layer", "layers") +
                      (in_w + out_w ? " (and the embedding and head, one layer each)" : "") +
                      ": give --layout with empty stages, or fewer stages (torchtitan refuses more stages than layers)");
  const int64_t per = effective / stages, extra = effective % stages;
  if (in_w > per || out_w > per)
    refuse(where, "with " + std::to_string(stages) + " stages and " + std::to_string(effective) +
                      " effective layers, a stage gets " + std::to_string(per) +
                      ": too few for the embedding or the head as one layer (torchtitan's rule); give --layout");
  size_t next = 0;
  for (int s = 0; s < stages; ++s) {
    std::vector<int32_t> stage;
    int64_t take = per + (s < extra ? 1 : 0);
    if (s == 0) {
      stage = k.first;
      take -= in_w;
    } else if (s == stages - 1) {
      take -= out_w;
    }
    for (int64_t c = 0; c < take && next < k.body.size(); ++c) stage.push_back(k.body[next++]);
    if (s == stages - 1) stage.insert(stage.end(), k.last.begin(), k.last.end());
    out.stages.push_back(std::move(stage));
  }
  return out;
}

std::vector<int64_t> body_counts(const Layout& layout, const std::vector<Layer>& layers) {
  std::vector<int64_t> out;
  for (const auto& st : layout.stages) {
    int64_t n = 0;
    for (int32_t i : st) n += is_body(layers[static_cast<size_t>(i)].kind);
    out.push_back(n);
  }
  return out;
}

std::string counts_text(const std::vector<int64_t>& counts) {
  std::string out;
  for (int64_t n : counts) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

std::string counts_text(const Layout& layout, const std::vector<Layer>& layers) { return counts_text(body_counts(layout, layers)); }

std::string megatron_text(const Layout& layout, const std::vector<Layer>& layers) {
  // Megatron requires E and L: a model without an embedding (or a head) gets them on the first
  // (last) stage, where they stand for nothing.
  const Kinds k = kinds_of(layers);
  std::string out;
  for (size_t s = 0; s < layout.stages.size(); ++s) {
    if (s) out += "|";
    bool first = false, last = false;
    std::string run;  // the body's characters, compressed as c*n
    char prev = 0;
    int64_t n = 0;
    const auto flush = [&] {
      if (n == 1) run += prev;
      else if (n > 1) run += std::string(1, prev) + "*" + std::to_string(n);
      n = 0;
    };
    for (int32_t i : layout.stages[s]) {
      const LayerKind kind = layers[static_cast<size_t>(i)].kind;
      if (pinned_first(kind)) first = true;
      else if (pinned_last(kind)) last = true;
      else {
        const char c = kind == LayerKind::Mtp ? 'm' : 't';
        if (c != prev) flush();
        prev = c;
        ++n;
      }
    }
    flush();
    first = first || (k.first.empty() && s == 0);
    last = last || (k.last.empty() && s + 1 == layout.stages.size());
    out += (first ? "E" : "") + run + (last ? "L" : "");
  }
  return out;
}

Layout named_layout(const std::vector<std::vector<std::string>>& stage_layers, const std::vector<Layer>& layers,
                    const std::string& where) {
  Layout out;
  out.how = where;
  size_t next = 0;
  for (size_t s = 0; s < stage_layers.size(); ++s) {
    out.stages.emplace_back();
    for (const std::string& name : stage_layers[s]) {
      if (next >= layers.size())
        throw InputError(in_file(where), "stage " + std::to_string(s) + " holds '" + name + "' but the model has only " +
                                             std::to_string(layers.size()) + " layers");
      if (layers[next].name != name)
        throw InputError(in_file(where), "stage " + std::to_string(s) + " holds '" + name + "' where the model's layer " +
                                             std::to_string(next) + " is '" + layers[next].name +
                                             "': the run and the model describe different networks");
      out.stages.back().push_back(static_cast<int32_t>(next++));
    }
  }
  if (next != layers.size())
    throw InputError(in_file(where), "the run's stages hold " + std::to_string(next) + " layers, the model " +
                                         std::to_string(layers.size()) + " (the first missing: '" + layers[next].name + "')");
  return out;
}

Layout workload_layout(const Workload& net, const std::vector<Layer>& layers, int stages, const std::string& text,
                      const std::string& where) {
  if (static_cast<int64_t>(stages) > static_cast<int64_t>(layers.size()) * 4 + 64 && text.empty() && net.default_layout.empty())
    throw InputError(in_file(net.source), std::to_string(stages) + " stages for a model of " +
                                              std::to_string(layers.size()) + " layers: give --layout");
  if (!text.empty()) return parse_layout(text, layers, stages, where);
  if (!net.default_layout.empty()) return parse_layout(net.default_layout, layers, stages, net.source + " (layout)");
  return even_layout(layers, stages);
}

}  // namespace ppsched
