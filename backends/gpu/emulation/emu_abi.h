// The interface between a program compiled against cuda_emu.h and the emulator's runtime
// (emu_runtime.cc, built once into its own shared library and loaded first, RTLD_GLOBAL).
#pragma once
#include <stdint.h>

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

namespace emu {
// What the host passes to a launch (the Python side mirrors this layout with ctypes).
struct Buffer { const char* name; uintptr_t start; uint64_t bytes; };
struct Config {
  int grid, block, policy;  // policy: 0 in order, 1 seeded random, 2 starve `victim`
  int seed, victim, resident, warp;
  int nbuffers;
  const Buffer* buffers;
  long long max_polls;      // watchdog: polls with no progress at all
};

}  // namespace emu

extern "C" {
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
extern int emu_warp_size;
void emu_syncthreads(int line);
void emu_syncwarp(void);
// After an atomic on p: `changed` when it changed memory (progress), else a poll (`seen` is the value read).
void emu_after_atomic(const void* p, int changed, long long seen);
// A warp shuffle of up to 8 bytes: every lane of the warp passes its value, gets lane `src`'s.
unsigned long long emu_shfl(unsigned long long bits, int src, int width);
int emu_thread_id(void);
// Run `body` (the kernel with its arguments bound) on cfg's grid; `shared` is the program's
// __shared__ section, swapped per block.  0, or -1 with the diagnosis in err.
int emu_launch(const emu::Config* cfg, char* err, int errlen, void (*body)(), char* shared,
               unsigned long shared_bytes);
}
