// Reading the launchers' variables. Three launchers, each with its own contract:
//  - torchrun (TORCHELASTIC_RUN_ID set): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//    GROUP_RANK (the node), ROLE_RANK, MASTER_ADDR/MASTER_PORT, and
//    TORCHELASTIC_USE_AGENT_STORE: "True" under the static rendezvous, where the agent already
//    hosts a TCPStore on MASTER_ADDR:MASTER_PORT and every worker is a client of it;
//    TORCHELASTIC_RESTART_COUNT (our keys live under the attempt, as torch's own env://
//    rendezvous does) and TORCHELASTIC_ERROR_FILE (exec/error_file.hpp).
//  - RANK/WORLD_SIZE set by hand or by tools/launch-local: LOCAL_RANK and (with more than one
//    rank) MASTER_ADDR and MASTER_PORT are required, never defaulted.
//  - Slurm's srun (SLURM_PROCID set, RANK unset): SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/
//    SLURM_NODEID; MASTER_ADDR from the environment or the first host of the step's (else the
//    job's) node list; MASTER_PORT from the environment or derived from SLURM_JOB_ID.
// No variable at all is one process, rank 0 of 1, hosting its store on a free port.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exec/config.hpp"

namespace ppsched::exec {

using GetEnv = std::function<const char*(const char*)>;

// Throws InputError naming the variable when one is missing, malformed or out of range.
LaunchEnv read_launch_env(const GetEnv& get);
LaunchEnv read_launch_env();  // from the process environment

// Slurm's compressed host lists ("gpu[01-04,07],cpu3", "rack[1-2]n[1-4]"), as Slurm's
// hostlist parser reads them: hosts separated by commas or white space outside brackets; a
// bracket holds comma-separated numbers and lo-hi ranges, printed with the width of `lo`
// (zero padding kept); brackets may repeat within a host name, the rightmost one varying
// fastest, but nothing may follow the last ']'. A '[' without a ']' is part of the name.
// Throws InputError naming `variable` and the character position of the first mistake.
std::string first_slurm_host(const std::string& nodelist, const std::string& variable);
// The whole list, expanded; refuses lists of more than `max_hosts` hosts (Slurm's limit is
// 64K per range).
std::vector<std::string> expand_slurm_hostlist(const std::string& nodelist, const std::string& variable,
                                               size_t max_hosts = 65536);

// MASTER_PORT under Slurm when the job does not set one: 10000 + SLURM_JOB_ID % 20000, in
// 10000..29999 (below Linux's ephemeral range, 32768+), so every rank of a job computes the
// same port and two jobs sharing a node differ unless their ids are 20000 apart.
int slurm_master_port(long long job_id);

// Why this rank could not open its connection to the rendezvous store, `waited_s` after it
// tried, in words that say which: hosting it failed at once (the port is taken), or reaching
// it failed at once or after the whole timeout.
std::string store_failure_message(const LaunchEnv& env, double waited_s, double timeout_s, const std::string& what);

}  // namespace ppsched::exec
