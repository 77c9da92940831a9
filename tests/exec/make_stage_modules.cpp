// Writes a --stage-module directory (stages.json + stage0.pt ...) from C++, so the executor's
// tests need no Python torch: each stage is a torch::jit::Module with registered parameters
// and a TorchScript forward compiled by define(), saved like torch.jit.script(m).save(path).
//
//   make_stage_modules DIR --stages N [--kind mlp|lm] [--hidden H] [--batch B] [--seq T]
//                          [--vocab V] [--seed S] [--omit K] [--manifest-stages N2]
//                          [--bad-width K] [--last-returns-output]
//
// mlp: input [B, H] float32, target [B, H] float32; stages tanh(x @ w + b), the last one
//      returns mse_loss(x @ w + b, target).
// lm:  input [B, T] int64 token ids, target [B, T] int64; stage 0 starts with an embedding,
//      the last one ends with a vocabulary projection and cross-entropy (log_softmax + nll).
// Mistakes for the refusal tests: --omit K leaves out stageK.pt, --manifest-stages declares
// another count, --bad-width K gives stage K a weight that does not fit its input,
// --last-returns-output makes the last stage forward(x) return its output (no loss).
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace {

struct Options {
  std::string dir, kind = "mlp";
  int stages = 0, hidden = 16, batch = 2, seq = 4, vocab = 32, omit = -1, manifest_stages = -1, bad_width = -1;
  uint64_t seed = 7;
  bool last_returns_output = false;
};

at::Tensor param(std::vector<int64_t> shape, double scale) {
  return (torch::randn(shape) * scale).set_requires_grad(true);
}

void write_stage(const Options& o, int k) {
  const bool first = k == 0, last = k == o.stages - 1, lm = o.kind == "lm";
  torch::manual_seed(o.seed * 1000 + static_cast<uint64_t>(k));
  torch::jit::Module m(c10::QualifiedName("__torch__.ppsched_test.Stage" + std::to_string(k)));
  const int64_t in_width = o.hidden + (k == o.bad_width ? 3 : 0);
  std::string body;
  if (first && lm) {
    m.register_parameter("emb", param({o.vocab, o.hidden}, 0.5), false);
    body += "        x = torch.embedding(self.emb, x)\n";
  }
  if (last && !o.last_returns_output) {
    const int64_t out = lm ? o.vocab : o.hidden;
    m.register_parameter("w", param({in_width, out}, 0.3), false);
    m.register_parameter("b", param({out}, 0.1), false);
    body += "        y = torch.matmul(x, self.w) + self.b\n";
    body += lm ? "        return torch.nll_loss(torch.log_softmax(y.reshape([-1, y.size(-1)]), -1), target.reshape([-1]))\n"
               : "        return torch.mse_loss(y, target)\n";
    m.define("def forward(self, x, target):\n" + body);
  } else {
    m.register_parameter("w", param({in_width, o.hidden}, 0.3), false);
    m.register_parameter("b", param({o.hidden}, 0.1), false);
    body += "        return torch.tanh(torch.matmul(x, self.w) + self.b)\n";
    m.define("def forward(self, x):\n" + body);
  }
  m.save((std::filesystem::path(o.dir) / ("stage" + std::to_string(k) + ".pt")).string());
}

std::string spec(const Options& o, bool target) {
  if (o.kind == "lm")
    return "{\"shape\": [" + std::to_string(o.batch) + ", " + std::to_string(o.seq) + "], \"dtype\": \"int64\", \"high\": " +
           std::to_string(o.vocab) + "}";
  (void)target;
  return "{\"shape\": [" + std::to_string(o.batch) + ", " + std::to_string(o.hidden) + "], \"dtype\": \"float32\"}";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--stages") o.stages = std::stoi(next());
      else if (a == "--kind") o.kind = next();
      else if (a == "--hidden") o.hidden = std::stoi(next());
      else if (a == "--batch") o.batch = std::stoi(next());
      else if (a == "--seq") o.seq = std::stoi(next());
      else if (a == "--vocab") o.vocab = std::stoi(next());
      else if (a == "--seed") o.seed = std::stoull(next());
      else if (a == "--omit") o.omit = std::stoi(next());
      else if (a == "--manifest-stages") o.manifest_stages = std::stoi(next());
      else if (a == "--bad-width") o.bad_width = std::stoi(next());
      else if (a == "--last-returns-output") o.last_returns_output = true;
      else if (!a.empty() && a[0] != '-' && o.dir.empty()) o.dir = a;
      else throw std::invalid_argument("unknown argument " + a);
    }
    if (o.dir.empty() || o.stages < 1 || (o.kind != "mlp" && o.kind != "lm"))
      throw std::invalid_argument("usage: make_stage_modules DIR --stages N [--kind mlp|lm] ...");
  } catch (const std::exception& e) {
    std::cerr << "make_stage_modules: " << e.what() << "\n";
    return 2;
  }
  std::filesystem::create_directories(o.dir);
  for (int k = 0; k < o.stages; ++k)
    if (k != o.omit) write_stage(o, k);
  std::ofstream(std::filesystem::path(o.dir) / "stages.json")
      << "{\"format\": \"ppsched-stage-modules\", \"version\": 1, \"stages\": "
      << (o.manifest_stages > 0 ? o.manifest_stages : o.stages) << ",\n \"input\": " << spec(o, false)
      << ",\n \"target\": " << spec(o, true) << "}\n";
  std::cout << "wrote " << o.stages - (o.omit >= 0 ? 1 : 0) << " stage module(s) to " << o.dir << "\n";
  return 0;
}
