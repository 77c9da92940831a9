// One process's whole run, behind a torch-free interface so the command line
// (tools/exec_main.cpp) compiles without libtorch headers. The run never prints its results
// nor picks an exit code: it returns them (exec/outcome.hpp).
#pragma once

#include <exception>
#include <string>

#include "exec/config.hpp"
#include "exec/model_layout.hpp"
#include "exec/outcome.hpp"
#include "lowering/comm_model.hpp"
#include "lowering/stream_program.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::exec {

// Connects to the other ranks, runs the iterations and gathers the results on rank 0. A
// refusal that needs the libtorch build to notice (--transport nccl without CUDA, ranks
// started with different arguments) is Refused, before any rank talked to another.
// `streams`: with --model moe --ep > 1, the run's multi-stream program (exec/moe_streams.hpp),
// the one the verifier judged: the expert all-to-alls follow its order.
ExecOutcome run_executor(const ExecConfig& cfg, const Schedule& s, const ModelLayout& layout, const CommModel& lowering,
                         const StreamProgram* streams = nullptr);

// The process prints one final error: the watchdog thread prints its own when it ends a hung
// or orphaned process; the command line prints a Failed outcome's message only when this
// returns true (no final error was printed yet).
bool claim_final_error();

// Whether the executor has a handler for `op` (the dispatch table, runtime.cpp).
bool executor_has_handler(Op op);

// An exception's message for the user: c10::Error without its C++ backtrace (unless
// --verbose, exec/error_file.hpp).
std::string describe_exception(const std::exception& e);

}  // namespace ppsched::exec
