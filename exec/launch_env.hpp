// Reading the launcher's variables: RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
// MASTER_PORT (torchrun, tools/launch-local), or Slurm's SLURM_PROCID / SLURM_NTASKS /
// SLURM_LOCALID when RANK is unset. No variables at all means one process, rank 0 of 1.
#pragma once

#include <functional>
#include <string>

#include "exec/config.hpp"

namespace ppsched::exec {

using GetEnv = std::function<const char*(const char*)>;

// Throws InputError naming the variable when one is malformed or out of range.
LaunchEnv read_launch_env(const GetEnv& get);
LaunchEnv read_launch_env();  // from the process environment

}  // namespace ppsched::exec
