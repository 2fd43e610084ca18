// Stand-in for <hip/hip_runtime.h> under rammer's CPU emulator: HIP's device names are the ones
// cuda_emu.h (force-included before the program) already defines.
#pragma once
