// One process's whole run, behind a torch-free interface so the command line (main.cpp)
// compiles without libtorch headers.
#pragma once

#include <exception>
#include <string>

#include "exec/config.hpp"
#include "exec/model_layout.hpp"
#include "model/schedule.hpp"

namespace ppsched::exec {

// Connects to the other ranks, runs the iterations, reports (rank 0), returns the exit code:
// 0 ok, 1 a run failed (a step, a peer, the parity check), 2 a refusal that needs the
// libtorch build to notice (--transport nccl without CUDA, ranks started with different
// arguments).
int run_executor(const ExecConfig& cfg, const Schedule& s, const ModelLayout& layout);

// Whether the executor has a handler for `op` (the dispatch table, runtime.cpp).
bool executor_has_handler(Op op);

// An exception's message for the user: c10::Error without its C++ backtrace (unless
// --verbose, exec/error_file.hpp).
std::string describe_exception(const std::exception& e);

}  // namespace ppsched::exec
