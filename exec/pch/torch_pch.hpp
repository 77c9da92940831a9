// Precompiled header of the ppsched_exec_torch library (the only target that includes
// libtorch). torch/torch.h alone is ~330 k lines; with this PCH a translation unit compiles in
// seconds instead of ~30 s (reference toolchain.md §1). Meson 1.0 builds one PCH per target,
// so every torch translation unit lives in that one static library.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
