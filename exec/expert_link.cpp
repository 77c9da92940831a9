#include "exec/expert_link.hpp"

#include <torch/torch.h>

#include <stdexcept>

#include "exec/runtime.hpp"
#include "exec/step_clock.hpp"
#include "schedule/step_types.hpp"
#include "exec/transport.hpp"

namespace ppsched::exec {

thread_local StepSlot ExpertLink::current;

namespace {

constexpr int kTagBase = 100;  // Transport::exchange tags: one per kind
constexpr int kHeader = 6;     // kind, iteration, step, sub-step, micro-batch, rows

}  // namespace

ExpertLink::ExpertLink(Transport& world, std::vector<int> group, int index, Progress& progress, Order order)
    : world_(world), group_(std::move(group)), index_(index), progress_(progress), order_(order) {
  thread_ = std::thread([this] { loop(); });
}

ExpertLink::~ExpertLink() {
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    busy = busy_;
  }
  if (busy) world_.abort();  // left on an error path while an exchange waits
  cv_.notify_all();
  thread_.join();
}

std::string ExpertLink::group_name() const {
  std::string out = "{";
  for (size_t k = 0; k < group_.size(); ++k) out += (k ? "," : "") + std::to_string(group_[k]);
  return out + "}";
}

void ExpertLink::set_lowered(StepAllToAlls per_step) {
  std::lock_guard<std::mutex> lock(mu_);
  lowered_ = std::move(per_step);
}

void ExpertLink::begin_step(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = index;
  pos_ = 0;
}

void ExpertLink::end_step(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (order_ != Order::Lowered || !failed_.empty()) return;
  auto it = lowered_.find(index);
  const size_t want = it == lowered_.end() ? 0 : it->second.size();
  if (pos_ != want)
    throw std::logic_error("step " + std::to_string(index) + " ran " + std::to_string(pos_) + " expert all-to-alls, its lowering lists " +
                           std::to_string(want));
}

void ExpertLink::fail(const std::string& why) {
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.empty()) failed_ = why;
    busy = busy_;
  }
  cv_.notify_all();
  if (busy) world_.abort();
}

std::string ExpertLink::describe(const Request& r) const {
  std::string out = std::string("all-to-all ") + a2a_name(r.kind) + " of micro-batch " + std::to_string(r.slot.micro) + " (step " +
                    std::to_string(r.slot.index);
  if (!r.slot.label.empty()) out += " " + r.slot.label;
  if (r.slot.sub >= 0) out += " sub-step " + std::to_string(r.slot.sub);
  return out + ") on expert-parallel group " + group_name();
}

ExpertLink::Request* ExpertLink::next_locked() {
  if (pending_.empty()) return nullptr;
  if (order_ == Order::Ready) return pending_.front();
  auto it = lowered_.find(step_);
  if (it == lowered_.end() || pos_ >= it->second.size()) {
    // Not in the lowering: fail it rather than run an exchange the other members do not expect.
    Request* r = pending_.front();
    r->error = std::make_exception_ptr(std::logic_error(
        describe(*r) + " is not among the all-to-alls the stream lowering lists for this step"));
    return r;
  }
  const auto [sub, kind] = it->second[pos_];
  for (Request* r : pending_)
    if (r->slot.sub == sub) {
      if (r->kind != kind)
        r->error = std::make_exception_ptr(std::logic_error(describe(*r) + " came where the stream lowering lists " +
                                                            a2a_name(kind)));
      return r;
    }
  return nullptr;  // the expected sub-step's chain has not reached it yet
}

void ExpertLink::loop() {
  for (;;) {
    Request* r = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !failed_.empty() || next_locked() != nullptr; });
      if (stop_) return;
      if (!failed_.empty()) {
        for (Request* p : pending_) {
          p->error = std::make_exception_ptr(TransportError(describe(*p) + " not run: " + failed_));
          p->done = true;
        }
        pending_.clear();
        cv_.notify_all();
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        continue;
      }
      r = next_locked();
      for (auto it = pending_.begin(); it != pending_.end(); ++it)
        if (*it == r) {
          pending_.erase(it);
          break;
        }
      busy_ = true;
    }
    if (!r->error) {
      try {
        run(*r);
      } catch (const TransportError& e) {
        r->error = std::make_exception_ptr(TransportError(describe(*r) + ": " + e.what()));
      } catch (const std::exception& e) {
        r->error = std::make_exception_ptr(std::runtime_error(describe(*r) + ": " + message_of(e)));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      ++pos_;
      r->done = true;
      if (r->error && failed_.empty()) {
        try {
          std::rethrow_exception(r->error);
        } catch (const std::exception& e) {
          failed_ = std::string("an earlier one failed: ") + e.what();
        } catch (...) {
          failed_ = "an earlier one failed";
        }
      }
    }
    cv_.notify_all();
  }
}

void ExpertLink::run(Request& r) {
  const int n = size();
  // Traced: the comm stream's slice, from when this thread starts the exchange (an all-to-all
  // handed over while another ran waits in the queue, as on a stream) to its end.
  StepClock* clock = clock_.load();
  const size_t mark = clock ? clock->begin() : 0;
  // The caller released the baton: whoever holds it now is the other compute thread.
  if (baton_.try_lock()) {
    baton_.unlock();
  } else {
    ++overlapped_;
  }
  ++calls_;
  const int64_t cols = r.in.size(1);
  // Headers: what each member sends this one, and which call it is.
  std::vector<at::Tensor> heads(static_cast<size_t>(n));
  std::vector<P2POp> ops;
  for (int k = 0; k < n; ++k) {
    if (k == index_) continue;
    at::Tensor h = torch::tensor({static_cast<int64_t>(r.kind), static_cast<int64_t>(r.slot.iteration),
                                  static_cast<int64_t>(r.slot.index), static_cast<int64_t>(r.slot.sub),
                                  static_cast<int64_t>(r.slot.micro), r.send_rows[static_cast<size_t>(k)]},
                                 torch::kLong);
    heads[static_cast<size_t>(k)] = torch::empty({kHeader}, torch::kLong);
    ops.push_back({true, group_[static_cast<size_t>(k)], h});
    ops.push_back({false, group_[static_cast<size_t>(k)], heads[static_cast<size_t>(k)]});
  }
  const int tag = kTagBase + static_cast<int>(r.kind);
  progress_.waiting_on = n > 1 ? group_[static_cast<size_t>(index_ == 0 ? 1 : 0)] : -1;
  progress_.collective = static_cast<int>(r.kind) + 4 * (r.slot.micro + 1);
  world_.exchange(ops, tag);
  r.recv_rows.assign(static_cast<size_t>(n), 0);
  for (int k = 0; k < n; ++k) {
    if (k == index_) {
      r.recv_rows[static_cast<size_t>(k)] = r.send_rows[static_cast<size_t>(k)];
      continue;
    }
    const auto* h = heads[static_cast<size_t>(k)].data_ptr<int64_t>();
    if (h[1] != r.slot.iteration || h[2] != r.slot.index || h[3] != r.slot.sub || h[4] != r.slot.micro)
      throw std::runtime_error("collective mismatch: rank " + std::to_string(group_[static_cast<size_t>(k)]) + " called " +
                               a2a_name(static_cast<A2aKind>(h[0])) + " of micro-batch " + std::to_string(h[4]) + " at step " +
                               std::to_string(h[2]) + " (iteration " + std::to_string(h[1]) + ")");
    if (h[5] < 0) throw std::runtime_error("rank " + std::to_string(group_[static_cast<size_t>(k)]) + " announced a negative row count");
    r.recv_rows[static_cast<size_t>(k)] = h[5];
  }
  // The rows.
  std::vector<at::Tensor> in_parts = r.in.split_with_sizes(r.send_rows, 0);
  std::vector<at::Tensor> out_parts(static_cast<size_t>(n));
  ops.clear();
  for (int k = 0; k < n; ++k) {
    const auto kk = static_cast<size_t>(k);
    if (k == index_) {
      out_parts[kk] = in_parts[kk].clone();
      continue;
    }
    out_parts[kk] = torch::empty({r.recv_rows[kk], cols}, r.in.options());
    if (r.send_rows[kk] > 0) ops.push_back({true, group_[kk], in_parts[kk].contiguous()});
    if (r.recv_rows[kk] > 0) ops.push_back({false, group_[kk], out_parts[kk]});
  }
  world_.exchange(ops, tag);
  progress_.waiting_on = -1;
  progress_.collective = -1;
  r.out = torch::cat(out_parts, 0);
  if (clock) {
    TracedInterval iv;
    iv.step_index = r.slot.index;
    iv.sub = r.slot.sub;
    iv.lane = Lane::Comm;
    int64_t rows = 0;
    for (int k = 0; k < size(); ++k)
      if (k != index_) rows += r.send_rows[static_cast<size_t>(k)];
    iv.bytes = static_cast<double>(rows * cols * static_cast<int64_t>(r.in.element_size()));
    iv.layer = r.layer;
    if (r.slot.op >= 0) {
      const auto& phases = info(static_cast<Op>(r.slot.op)).moe_phases;
      for (size_t k = 0; k < phases.size(); ++k)
        if (phases[k].name == a2a_name(r.kind)) iv.phase = static_cast<int>(k);
    }
    clock->end(mark, iv);
  }
}

at::Tensor ExpertLink::all_to_all(A2aKind kind, int layer, const at::Tensor& in, const std::vector<int64_t>& send_rows,
                                  std::vector<int64_t>& recv_rows) {
  if (static_cast<int>(send_rows.size()) != size()) throw std::logic_error("all_to_all: one row count per member");
  Request r{kind, layer, current, in.detach().contiguous(), send_rows, {}, {}, false, nullptr};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.empty()) throw TransportError(describe(r) + " not run: " + failed_);
  }
  // The baton goes first: the comm thread counts an all-to-all as overlapped when another
  // compute thread holds it.
  release();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(&r);
  }
  cv_.notify_all();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return r.done; });
  }
  acquire();
  if (r.error) std::rethrow_exception(r.error);
  recv_rows = r.recv_rows;
  return r.out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

A2aKind backward_kind(A2aKind k) { return k == A2aKind::DispatchFwd ? A2aKind::DispatchBwd : A2aKind::CombineBwd; }

struct AllToAllFn : public torch::autograd::Function<AllToAllFn> {
  // `recv_out`: where the caller wants the row counts that arrived (a std::vector<int64_t>*).
  static variable_list forward(AutogradContext* ctx, at::Tensor in, int64_t link, int64_t kind, int64_t layer,
                               std::vector<int64_t> send_rows, int64_t recv_out) {
    auto* l = reinterpret_cast<ExpertLink*>(link);
    std::vector<int64_t> recv_rows;
    at::Tensor out = l->all_to_all(static_cast<A2aKind>(kind), static_cast<int>(layer), in, send_rows, recv_rows);
    ctx->saved_data["layer"] = layer;
    *reinterpret_cast<std::vector<int64_t>*>(recv_out) = recv_rows;
    ctx->saved_data["link"] = link;
    ctx->saved_data["kind"] = kind;
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    ctx->saved_data["cols"] = in.size(1);
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // BWD_WEIGHT re-traverses what BWD_INPUT ran: the same incoming gradient, the same answer.
    auto done = ctx->saved_data.find("grad");
    if (done != ctx->saved_data.end())
      return {done->second.toTensor().clone(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    auto* l = reinterpret_cast<ExpertLink*>(ctx->saved_data["link"].toInt());
    const auto kind = static_cast<A2aKind>(ctx->saved_data["kind"].toInt());
    std::vector<int64_t> back_rows;
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    at::Tensor g = grads.at(0);
    if (!g.defined()) {  // no gradient reached the output: every member still takes part
      int64_t rows = 0;
      for (int64_t v : recv) rows += v;
      g = torch::zeros({rows, ctx->saved_data["cols"].toInt()});
    }
    at::Tensor out = l->all_to_all(backward_kind(kind), static_cast<int>(ctx->saved_data["layer"].toInt()), g.contiguous(), recv,
                                   back_rows);
    if (back_rows != send) throw std::logic_error("an expert all-to-all's backward came back with other row counts");
    ctx->saved_data["grad"] = out;
    return {out.clone(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor expert_all_to_all(ExpertLink& link, A2aKind forward_kind, int layer, const at::Tensor& in,
                             const std::vector<int64_t>& send_rows, std::vector<int64_t>& recv_rows) {
  return AllToAllFn::apply(in, reinterpret_cast<int64_t>(&link), static_cast<int64_t>(forward_kind), static_cast<int64_t>(layer),
                           send_rows, reinterpret_cast<int64_t>(&recv_rows))[0];
}

}  // namespace ppsched::exec
