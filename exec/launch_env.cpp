#include "exec/launch_env.hpp"

#include <cstdlib>
#include <string>

#include "model/errors.hpp"

namespace ppsched::exec {
namespace {

int parse_int(const GetEnv& get, const char* name, int fallback, int min_value) {
  const char* v = get(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < min_value || n > (1 << 30))
    throw InputError({}, std::string("environment variable ") + name + "='" + v + "' is not an integer >= " +
                             std::to_string(min_value));
  return static_cast<int>(n);
}

}  // namespace

LaunchEnv read_launch_env(const GetEnv& get) {
  LaunchEnv e;
  const bool have_rank = get("RANK") && *get("RANK");
  const bool have_slurm = !have_rank && get("SLURM_PROCID") && *get("SLURM_PROCID");
  if (have_rank) {
    e.rank = parse_int(get, "RANK", 0, 0);
    e.world_size = parse_int(get, "WORLD_SIZE", -1, 1);
    if (e.world_size < 0) throw InputError({}, "RANK is set but WORLD_SIZE is not");
    e.local_rank = parse_int(get, "LOCAL_RANK", 0, 0);
    e.source = "RANK/WORLD_SIZE";
  } else if (have_slurm) {
    // Slurm starts one task per rank; srun sets these for every task.
    e.rank = parse_int(get, "SLURM_PROCID", 0, 0);
    e.world_size = parse_int(get, "SLURM_NTASKS", -1, 1);
    if (e.world_size < 0) throw InputError({}, "SLURM_PROCID is set but SLURM_NTASKS is not");
    e.local_rank = parse_int(get, "SLURM_LOCALID", 0, 0);
    e.source = "SLURM_*";
  } else {
    e.source = "defaults (single process)";
  }
  if (e.rank >= e.world_size)
    throw InputError({}, "rank " + std::to_string(e.rank) + " is not below the world size " +
                             std::to_string(e.world_size));
  if (const char* a = get("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = parse_int(get, "MASTER_PORT", e.master_port, 1);
  if (e.master_port > 65535) throw InputError({}, "MASTER_PORT " + std::to_string(e.master_port) + " is not a TCP port");
  if (e.world_size > 1 && !(get("MASTER_ADDR") && *get("MASTER_ADDR")) && have_slurm)
    throw InputError({}, "under Slurm set MASTER_ADDR (and MASTER_PORT) to the first node of the allocation");
  return e;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const char* n) -> const char* { return std::getenv(n); });
}

}  // namespace ppsched::exec
