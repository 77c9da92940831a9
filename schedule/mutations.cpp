#include "schedule/mutations.hpp"

#include <algorithm>

namespace ppsched {
namespace {

std::string label(const Slot& slot) { return slot ? short_label(*slot) : "."; }

// Indices of the non-idle slots of a program that satisfy `pred`.
template <class Pred>
std::vector<size_t> where(const Program& p, Pred pred) {
  std::vector<size_t> out;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] && pred(*p[i])) out.push_back(i);
  return out;
}

size_t pick(size_t n, int x) { return static_cast<size_t>(x < 0 ? -static_cast<long>(x) : x) % n; }

// The compute step that consumes a body receive: FWD for FWD_RECV, the backward for BWD_RECV.
bool consumes(const Step& compute, const Step& recv) {
  auto matches = [&](const Step& c) {
    if (c.micro != recv.micro || c.stage != recv.stage) return false;
    return info(c.op).input_recv == recv.op;
  };
  if (is_composite(compute.op)) return std::any_of(compute.sub_steps().begin(), compute.sub_steps().end(), matches);
  return matches(compute);
}

}  // namespace

std::string_view to_string(MutationKind k) {
  switch (k) {
    case MutationKind::SwapAdjacent: return "swap-adjacent";
    case MutationKind::RecvAfterConsumer: return "recv-after-consumer";
    case MutationKind::RecvBeforeSend: return "recv-before-send";
    case MutationKind::DropStep: return "drop-step";
    case MutationKind::DuplicateStep: return "duplicate-step";
    case MutationKind::ReverseTransferBlock: return "reverse-transfer-block";
    case MutationKind::SplitBatch: return "split-batch";
    case MutationKind::RemoveCollective: return "remove-collective";
    case MutationKind::ChangeMicro: return "change-micro";
    case MutationKind::ChangePayloadShape: return "change-payload-shape";
  }
  return "?";
}

MutationOutcome apply_mutation(Schedule& s, const Mutation& m) {
  MutationOutcome out;
  if (s.ranks <= 0) return out;
  const int r = static_cast<int>(pick(static_cast<size_t>(s.ranks), m.rank));
  Program& p = s.programs[static_cast<size_t>(r)];
  const std::string at = "rank " + std::to_string(r) + ": ";
  auto any = [](const Step&) { return true; };
  const Program before = p;
  const bool annotates = m.kind == MutationKind::ChangePayloadShape;
  out.rank = r;
  switch (m.kind) {
    case MutationKind::SwapAdjacent: {
      auto steps = where(p, any);
      if (steps.size() < 2) return out;
      size_t k = pick(steps.size() - 1, m.position);
      out.touched = {*p[steps[k]], *p[steps[k + 1]]};
      std::swap(p[steps[k]], p[steps[k + 1]]);
      out.description = at + "swapped " + label(p[steps[k + 1]]) + " and " + label(p[steps[k]]);
      break;
    }
    case MutationKind::RecvAfterConsumer: {
      auto recvs = where(p, [](const Step& st) { return is_recv(st.op) && is_body_p2p(st.op); });
      if (recvs.empty()) return out;
      size_t i = recvs[pick(recvs.size(), m.position)];
      size_t j = i + 1;
      while (j < p.size() && !(p[j] && consumes(*p[j], *p[i]))) ++j;
      if (j >= p.size()) return out;
      out.touched = {*p[i], *p[j]};
      Slot moved = p[i];
      p.erase(p.begin() + static_cast<long>(i));
      p.insert(p.begin() + static_cast<long>(j), moved);  // j shifted by one: lands right after the consumer
      out.description = at + "moved " + label(moved) + " after its consumer " + label(p[j - 1]);
      break;
    }
    case MutationKind::RecvBeforeSend: {
      // A receive with a send somewhere before it (idle slots skipped): hoist it above.
      std::vector<std::pair<size_t, size_t>> choices;
      for (size_t i = 0; i < p.size(); ++i) {
        if (!p[i] || !is_recv(p[i]->op)) continue;
        size_t j = i;
        while (j > 0 && !p[j - 1]) --j;
        if (j > 0 && p[j - 1] && is_send(p[j - 1]->op)) choices.emplace_back(j - 1, i);
      }
      if (choices.empty()) return out;
      auto [send, recv] = choices[pick(choices.size(), m.position)];
      out.touched = {*p[send], *p[recv]};
      std::swap(p[send], p[recv]);
      out.description = at + "hoisted " + label(p[send]) + " above " + label(p[recv]);
      break;
    }
    case MutationKind::DropStep: {
      auto steps = where(p, any);
      if (steps.empty()) return out;
      size_t i = steps[pick(steps.size(), m.position)];
      out.description = at + "dropped " + label(p[i]) + " (step " + std::to_string(i) + ")";
      out.touched = {*p[i]};
      p.erase(p.begin() + static_cast<long>(i));
      break;
    }
    case MutationKind::DuplicateStep: {
      auto steps = where(p, any);
      if (steps.empty()) return out;
      size_t i = steps[pick(steps.size(), m.position)];
      out.touched = {*p[i]};
      p.insert(p.begin() + static_cast<long>(i), p[i]);
      out.description = at + "duplicated " + label(p[i]) + " (step " + std::to_string(i) + ")";
      break;
    }
    case MutationKind::ReverseTransferBlock: {
      // Maximal runs of >= 2 consecutive P2P steps of one direction to one peer.
      std::vector<std::pair<size_t, size_t>> runs;
      size_t i = 0;
      while (i < p.size()) {
        if (!p[i] || !is_p2p(p[i]->op)) {
          ++i;
          continue;
        }
        size_t j = i + 1;
        int peer = peer_of(s, r, *p[i]);
        bool send = is_send(p[i]->op);
        while (j < p.size() && p[j] && is_p2p(p[j]->op) && is_send(p[j]->op) == send && peer_of(s, r, *p[j]) == peer) ++j;
        if (j - i >= 2) runs.emplace_back(i, j);
        i = j;
      }
      if (runs.empty()) return out;
      auto [b, e] = runs[pick(runs.size(), m.position)];
      for (size_t k = b; k < e; ++k) out.touched.push_back(*p[k]);
      std::reverse(p.begin() + static_cast<long>(b), p.begin() + static_cast<long>(e));
      out.description = at + "reversed the transfer block at steps " + std::to_string(b) + ".." + std::to_string(e - 1);
      break;
    }
    case MutationKind::SplitBatch: {
      auto batches = where(p, [](const Step& st) { return is_batch(st.op); });
      if (batches.empty()) return out;
      size_t i = batches[pick(batches.size(), m.position)];
      std::vector<Step> subs = p[i]->sub_steps();
      out.touched = {*p[i]};
      out.description = at + "split " + label(p[i]) + " into plain steps";
      p.erase(p.begin() + static_cast<long>(i));
      for (size_t k = 0; k < subs.size(); ++k) p.insert(p.begin() + static_cast<long>(i + k), subs[k]);
      break;
    }
    case MutationKind::RemoveCollective: {
      auto colls = where(p, [](const Step& st) {
        return info(st.op).kind == StepKind::Collective && info(st.op).collective != CollectiveScope::DataParallel;
      });
      if (colls.empty()) return out;
      size_t i = colls[pick(colls.size(), m.position)];
      out.description = at + "removed " + label(p[i]) + " (step " + std::to_string(i) + ")";
      out.touched = {*p[i]};
      p.erase(p.begin() + static_cast<long>(i));
      break;
    }
    case MutationKind::ChangeMicro: {
      if (s.micro_batches < 2) return out;
      auto steps = where(p, [](const Step& st) { return st.micro >= 0; });
      if (steps.empty()) return out;
      size_t i = steps[pick(steps.size(), m.position)];
      int old = p[i]->micro;
      out.touched = {*p[i]};
      int delta = 1 + static_cast<int>(pick(static_cast<size_t>(s.micro_batches - 1), m.arg));
      p[i]->micro = (old + delta) % s.micro_batches;
      out.description = at + "changed the micro of step " + std::to_string(i) + " from " + std::to_string(old) + " to " +
                        std::to_string(p[i]->micro) + " (" + label(p[i]) + ")";
      break;
    }
    case MutationKind::ChangePayloadShape: {
      auto transfers = where(p, [](const Step& st) { return is_p2p(st.op) && info(st.op).meta != Meta::EveryStep; });
      if (transfers.empty()) return out;
      // Every body transfer on every rank describes its payload; one side then disagrees.
      for (auto& prog : s.programs)
        for (auto& slot : prog) {
          if (!slot) continue;
          auto annotate = [](Step& st) {
            if (is_p2p(st.op) && info(st.op).meta != Meta::EveryStep) st.edit_tensors() = {{{1, 4096}, "bf16"}};
          };
          annotate(*slot);
          for (auto& sub : slot->sub_steps_mut()) annotate(sub);
        }
      size_t i = transfers[pick(transfers.size(), m.position)];
      out.touched = {*p[i]};
      p[i]->edit_tensors() = {{{1, 4096 + 1 + static_cast<int64_t>(pick(64, m.arg))}, "bf16"}};
      out.description = at + "changed the payload shape of " + label(p[i]) + " (step " + std::to_string(i) + ")";
      break;
    }
  }
  // An edit that left the schedule as it was (two equal steps swapped) did nothing.
  out.applied = annotates || !(p == before);
  return out;
}

}  // namespace ppsched
