// rammer's CUDA-semantics emulator: runs an UNCHANGED CUDA C (or HIP) source on the CPU.
//
// Compile:  g++ -std=c++20 -O1 -shared -fPIC -x c++ -include cuda_emu.h -I<this folder> wrapper.cc
// where wrapper.cc is `#include "program.cu"` followed by one EMU_EXPORT(kernel) per kernel; load
// the runtime (emu_runtime.cc built as a shared library) first, RTLD_GLOBAL (emulation/__init__.py
// does both).
//
// The model (serial grid, deterministic):
//  - All blocks and all their threads run in ONE OS thread.  A CUDA thread is a fiber (its own stack,
//    switched by emu_switch); a block's fibers are switched at __syncthreads, at warp collectives (shuffles, __syncwarp)
//    and when a thread polls an atomic (an atomic that leaves memory unchanged: a spin).
//  - The grid scheduler runs one block at a time and switches block when its thread polls; the
//    policy says which block runs next: in order, seeded random, or "starve v" (block v runs only
//    when every other live block is stuck), so a too-early consumer is exposed by sweeping v.
//  - At most `resident` blocks are live at once (0 = all): a grid larger than what the device
//    holds deadlocks here as it would on a GPU.
//  - Deadlock (every live block polls and nothing changed since) is named: the block, thread
//    and counter each spins on.  A poll budget is the watchdog for anything else.
//  - Every thread of a block must reach the SAME __syncthreads (same line) or all exit:
//    anything else is reported as divergence.
//  - __shared__ arrays live in one ELF section, swapped per block at a block switch and
//    filled with NaN bytes when a block starts (reading shared memory nobody wrote shows).
//  - A segfault (the host side puts guard pages after every device buffer) is caught and
//    named: block, thread, address, and the registered buffer it falls past.
// Not modelled: memory ordering (x86 is TSO), the non-coherent read-only cache, warp lockstep
// (threads of a warp run one after another between collectives), FMA contraction.
#pragma once
// The program side: CUDA's names, the atomics and shuffles; the scheduler behind them is in
// emu_runtime.cc (one shared library for every program, loaded first), the ABI in emu_abi.h.

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "emu_abi.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section("emu_shared")))
#define __syncthreads() emu_syncthreads(__LINE__)

extern "C" char __start_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_emu_shared[] __attribute__((weak, visibility("hidden")));

namespace emu {

template <class T> void after_atomic(const T* p, bool changed, T seen) {
  long long v = 0;
  memcpy(&v, &seen, sizeof(T) < 8 ? sizeof(T) : 8);
  emu_after_atomic(p, changed, v);
}

template <class T> using aref = std::atomic_ref<T>;

template <class T> T atomicAdd_(T* p, T v) {
  T old = aref<T>(*p).fetch_add(v, std::memory_order_seq_cst);
  after_atomic(p, v != T(0), old);
  return old;
}
template <class T> T atomicSub_(T* p, T v) {
  T old = aref<T>(*p).fetch_sub(v, std::memory_order_seq_cst);
  after_atomic(p, v != T(0), old);
  return old;
}
template <class T> T atomicExch_(T* p, T v) {
  T old = aref<T>(*p).exchange(v, std::memory_order_seq_cst);
  after_atomic(p, !(old == v), old);
  return old;
}
template <class T> T atomicCAS_(T* p, T cmp, T v) {
  T expected = cmp;
  aref<T>(*p).compare_exchange_strong(expected, v, std::memory_order_seq_cst);
  after_atomic(p, expected == cmp && !(cmp == v), expected);
  return expected;
}
template <class T> T atomicMax_(T* p, T v) {
  T old = aref<T>(*p).load();
  while (old < v && !aref<T>(*p).compare_exchange_weak(old, v)) {}
  after_atomic(p, old < v, old);
  return old;
}
template <class T> T atomicMin_(T* p, T v) {
  T old = aref<T>(*p).load();
  while (v < old && !aref<T>(*p).compare_exchange_weak(old, v)) {}
  after_atomic(p, v < old, old);
  return old;
}
template <class T> T atomicOr_(T* p, T v) {
  T old = aref<T>(*p).fetch_or(v);
  after_atomic(p, (old | v) != old, old);
  return old;
}
template <class T> T atomicAnd_(T* p, T v) {
  T old = aref<T>(*p).fetch_and(v);
  after_atomic(p, (old & v) != old, old);
  return old;
}

template <class T> T shfl(T v, int src, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  bits = emu_shfl(bits, src, width);
  T out;
  memcpy(&out, &bits, sizeof(T));
  return out;
}

// The kernel's parameter kinds, comma-separated: "p:f4" (float *), "i4" (int), "f4" (float).
template <class T> void kind(char*& o) {
  using U = std::remove_cv_t<T>;
  using E = std::remove_cv_t<std::remove_pointer_t<U>>;
  if constexpr (std::is_pointer_v<U>) {
    *o++ = 'p';
    *o++ = ':';
    if constexpr (std::is_void_v<E>) {
      *o++ = 'v';
      return;
    }
  }
  *o++ = std::is_floating_point_v<E> ? 'f' : std::is_unsigned_v<E> ? 'u' : 'i';
  *o++ = (char)('0' + sizeof(E));
}
template <class... A> const char* signature(void (*)(A...)) {
  static char buf[8 * sizeof...(A) + 1];
  char* o = buf;
  bool first = true;
  ((first ? (void)(first = false) : (void)(*o++ = ','), kind<A>(o)), ...);
  *o = 0;
  return buf;
}

template <class... A, size_t... I>
void call_with(void (*k)(A...), void** args, std::index_sequence<I...>) {
  k(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}
template <class... A> void call(void (*k)(A...), void** args) { call_with(k, args, std::index_sequence_for<A...>{}); }

}  // namespace emu

// ---- CUDA's names ----
inline int atomicAdd(int* p, int v) { return emu::atomicAdd_(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return emu::atomicAdd_(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return emu::atomicAdd_(p, v); }
inline float atomicAdd(float* p, float v) { return emu::atomicAdd_(p, v); }
inline double atomicAdd(double* p, double v) { return emu::atomicAdd_(p, v); }
inline int atomicSub(int* p, int v) { return emu::atomicSub_(p, v); }
inline unsigned atomicSub(unsigned* p, unsigned v) { return emu::atomicSub_(p, v); }
inline int atomicExch(int* p, int v) { return emu::atomicExch_(p, v); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return emu::atomicExch_(p, v); }
inline float atomicExch(float* p, float v) { return emu::atomicExch_(p, v); }
inline int atomicCAS(int* p, int c, int v) { return emu::atomicCAS_(p, c, v); }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { return emu::atomicCAS_(p, c, v); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) {
  return emu::atomicCAS_(p, c, v);
}
inline int atomicMax(int* p, int v) { return emu::atomicMax_(p, v); }
inline unsigned atomicMax(unsigned* p, unsigned v) { return emu::atomicMax_(p, v); }
inline int atomicMin(int* p, int v) { return emu::atomicMin_(p, v); }
inline unsigned atomicMin(unsigned* p, unsigned v) { return emu::atomicMin_(p, v); }
inline int atomicOr(int* p, int v) { return emu::atomicOr_(p, v); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return emu::atomicOr_(p, v); }
inline int atomicAnd(int* p, int v) { return emu::atomicAnd_(p, v); }
inline unsigned atomicAnd(unsigned* p, unsigned v) { return emu::atomicAnd_(p, v); }

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_syncwarp(); }

#define warpSize (emu_warp_size)
template <class T> T __shfl_sync(unsigned, T v, int src, int width = warpSize) {
  int base = (emu_thread_id() / width) * width;
  return emu::shfl(v, base + (src % width), width);
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d, int width = warpSize) {
  return emu::shfl(v, emu_thread_id() + (int)d, width);
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d, int width = warpSize) {
  return emu::shfl(v, emu_thread_id() - (int)d, width);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m, int width = warpSize) {
  return emu::shfl(v, emu_thread_id() ^ m, width);
}
// HIP spells them without the mask.
template <class T> T __shfl(T v, int src, int width = warpSize) { return __shfl_sync(0u, v, src, width); }
template <class T> T __shfl_down(T v, unsigned d, int width = warpSize) { return __shfl_down_sync(0u, v, d, width); }
template <class T> T __shfl_up(T v, unsigned d, int width = warpSize) { return __shfl_up_sync(0u, v, d, width); }
template <class T> T __shfl_xor(T v, int m, int width = warpSize) { return __shfl_xor_sync(0u, v, m, width); }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> inline T __ldg(const T* p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

// Static shared memory of the whole program (every __shared__ array), for the host's attributes.
extern "C" unsigned long emu_shared_bytes() { return (unsigned long)(__stop_emu_shared - __start_emu_shared); }

// One exported launcher and signature per kernel (the host writes these after the #include).
#define EMU_EXPORT(k)                                                                             \
  static void** emu_args_##k = nullptr;                                                           \
  static void emu_body_##k() { ::emu::call(k, emu_args_##k); }                                    \
  extern "C" int emu_launch_##k(const ::emu::Config* cfg, void** args, char* err, int errlen) {   \
    emu_args_##k = args;                                                                          \
    return emu_launch(cfg, err, errlen, emu_body_##k, __start_emu_shared,                         \
                      (unsigned long)(__stop_emu_shared - __start_emu_shared));                   \
  }                                                                                               \
  extern "C" const char* emu_signature_##k() { return ::emu::signature(k); }
