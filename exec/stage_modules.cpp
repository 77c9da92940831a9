// --stage-module: the user's TorchScript modules as the stages of the pipeline.
//
// The contract (exec/README.md, "Stage modules"): stage k < N-1 has forward(x) -> Tensor;
// the last stage has forward(x, target) -> Tensor, the loss of its micro-batch as a scalar;
// stage 0 takes the manifest's input, every other stage the previous stage's output. The
// module's parameters are the stage's parameters. A single-stage model is stage 0 and the
// last stage at once: forward(input, target) -> loss.
//
// The modules run with TorchScript's graph optimizations off (compat::plain_script_execution):
// the optimizing executor would fuse ops into differentiable subgraphs whose backward is one
// autograd node with its own rounding, while the split backward (BWD_INPUT with the graph
// retained, then BWD_WEIGHT restricted to the parameters) and the parity check want the
// operator-by-operator autograd graph eager libtorch builds.
#include <torch/script.h>
#include <torch/torch.h>

#include <sstream>

#include "exec/models.hpp"
#include "exec/torch_compat.hpp"

namespace ppsched::exec {
namespace {

std::string shape_text(const at::Tensor& t) {
  return c10::str(t.sizes()) + " " + std::string(c10::toString(t.scalar_type()));
}

// TorchScript errors carry the script's traceback; the line that says what went wrong is the
// last one ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x16 and 8x8)"), or the
// first one for errors raised before the interpreter ran (argument count, types).
std::string reason_of(const std::exception& e) {
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  std::string msg = ce ? ce->what_without_backtrace() : e.what();
  std::vector<std::string> lines;
  std::istringstream in(msg);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  if (lines.empty()) return "(no message)";
  const bool traceback = msg.find("Traceback of TorchScript") != std::string::npos;
  std::string pick = traceback ? lines.back() : lines.front();
  return pick.substr(pick.find_first_not_of(" \t"));
}

class ScriptStage final : public Unit {
 public:
  explicit ScriptStage(torch::jit::Module m) : module_(std::move(m)) {}
  using torch::nn::Module::to;
  void to(torch::Device device, bool non_blocking) override { module_.to(device, non_blocking); }

  at::Tensor forward(const at::Tensor& x) override { return tensor_of(module_.forward({x}), "forward(x)"); }
  bool computes_loss() const override { return forward_arguments() == 2; }
  at::Tensor forward_loss(const at::Tensor& x, const at::Tensor& target) override {
    return tensor_of(module_.forward({x, target}), "forward(x, target)");
  }
  std::vector<std::pair<std::string, at::Tensor>> unit_parameters() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) out.emplace_back(p.name, p.value);
    return out;
  }
  // Arguments of forward, self excluded.
  size_t forward_arguments() const {
    return module_.get_method("forward").function().getSchema().arguments().size() - 1;
  }

 private:
  static at::Tensor tensor_of(const c10::IValue& v, const char* call) {
    if (!v.isTensor())
      throw std::runtime_error(std::string(call) + " returned a " + v.tagKind() + "; a stage must return one tensor");
    return v.toTensor();
  }
  torch::jit::Module module_;
};

std::shared_ptr<ScriptStage> load(const StageModules& sm, int stage, at::Device device) {
  compat::plain_script_execution();
  const std::string path = sm.module_path(stage);
  torch::jit::Module m;
  try {
    m = torch::jit::load(path, device);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": torch::jit::load cannot read it (" + reason_of(e) +
                             "); export it with torch.jit.script(stage).save(path)");
  }
  if (!m.find_method("forward")) throw std::runtime_error(path + ": the module has no forward method");
  return std::make_shared<ScriptStage>(std::move(m));
}

}  // namespace

std::shared_ptr<Unit> load_stage_module(const StageModules& sm, int stage, at::Device device) {
  return load(sm, stage, device);
}

std::vector<std::string> check_stage_chain(const ModelConfig& m) {
  const StageModules& sm = *m.stage_modules;
  std::vector<std::shared_ptr<ScriptStage>> stages;
  std::vector<std::string> errors;
  for (int k = 0; k < sm.stages; ++k) {
    try {
      stages.push_back(load(sm, k, torch::kCPU));
    } catch (const std::exception& e) {
      errors.push_back(e.what());
      continue;
    }
    const size_t want = k == sm.stages - 1 ? 2 : 1, got = stages.back()->forward_arguments();
    if (got != want)
      errors.push_back(sm.module_path(k) + ": forward takes " + std::to_string(got) + " argument(s) but " +
                       (want == 2 ? "the last stage's forward must take (x, target) and return the loss"
                                  : "a stage before the last must take one tensor x and return one tensor"));
  }
  if (!errors.empty()) return errors;

  // One micro-batch through the chain, with autograd on as in the run: every stage must accept
  // what the previous one returns, and the gradient must be able to flow back.
  Dataset data(m, torch::kCPU);
  const at::Tensor d = data.micro_batch(0, 0);
  at::Tensor x = data.inputs_of(d);
  for (int k = 0; k < sm.stages; ++k) {
    const std::string path = sm.module_path(k);
    const std::string fed = k == 0 ? "the manifest's input " + shape_text(x)
                                   : "stage " + std::to_string(k - 1) + "'s output " + shape_text(x);
    try {
      if (k > 0) x = x.detach().requires_grad_(x.is_floating_point());
      if (k < sm.stages - 1) {
        x = stages[static_cast<size_t>(k)]->forward(x);
        if (!x.is_floating_point() || !x.requires_grad())
          return {path + ": its output " + shape_text(x) +
                  " does not require grad, so no gradient could flow back through it (stage outputs must be "
                  "floating-point and depend on the input or on parameters)"};
      } else {
        at::Tensor target = data.labels_of(d);
        at::Tensor loss = stages[static_cast<size_t>(k)]->forward_loss(x, target);
        if (loss.numel() != 1 || !loss.is_floating_point())
          return {path + ": the last stage must return the loss as a floating-point scalar, but forward(x, target) "
                         "returned " + shape_text(loss)};
        if (!loss.requires_grad())
          return {path + ": the loss does not require grad (nothing in the model is trainable)"};
      }
    } catch (const std::exception& e) {
      return {path + " cannot take " + fed + (k == sm.stages - 1 ? " with the target " + shape_text(data.labels_of(d)) : "") +
              ": " + reason_of(e)};
    }
  }
  return {};
}

}  // namespace ppsched::exec
