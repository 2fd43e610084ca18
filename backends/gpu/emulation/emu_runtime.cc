// rammer's CUDA-semantics emulator: the runtime (grid scheduler, fibers, diagnostics), built once
// into its own shared library; programs compiled against cuda_emu.h call into it (emu_abi.h).
// Compile:  g++ -std=c++20 -O1 -shared -fPIC -I<this folder> emu_runtime.cc -o runtime.so
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
#include "emu_abi.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

extern "C" {
uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
int emu_warp_size = 32;
}

namespace emu {

// The fiber switch: save the callee-saved registers, MXCSR and the x87 control word on the
// current stack, store its pointer in *save, load `to` and restore from there.  (ucontext's
// swapcontext makes two sigprocmask system calls per switch; this makes none.)
extern "C" void emu_switch(void** save, void* to) __attribute__((visibility("hidden")));
asm(R"(
  .text
  .p2align 4
  .globl emu_switch
  .hidden emu_switch
  .type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
)");

enum State { RUNNABLE, AT_BARRIER, AT_WARP, POLLED, DONE };

struct Thread {
  void* sp = nullptr;  // saved stack pointer while switched out
  int tid = 0, state = RUNNABLE, line = 0;
  const void* polled = nullptr;
  long long polled_value = 0;
};

struct Block {
  int id = 0;
  bool started = false, done = false, stalled = false, fresh = false;
  std::vector<Thread> threads;
  char* stacks = nullptr;
  size_t stack_bytes = 0;
  std::vector<char> shared;
};

constexpr size_t kStack = 32 * 1024;

struct Grid {
  const Config* cfg = nullptr;
  std::vector<Block> blocks;
  Block* cur_block = nullptr;
  Thread* cur = nullptr;
  void* sched = nullptr;  // the scheduler's saved stack pointer
  unsigned long long progress = 0;
  long long polls = 0;
  std::string error;
  bool failed = false;
  std::vector<uint64_t> slot;  // per thread of the running block: shuffle values
  sigjmp_buf on_fault;
  char fault_msg[512];
  char* shared = nullptr;  // the program's __shared__ section
  size_t shared_bytes = 0;
};

inline Grid g;

inline std::string where(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  char buf[256];
  for (int i = 0; g.cfg && i < g.cfg->nbuffers; i++) {
    const Buffer& b = g.cfg->buffers[i];
    if (a >= b.start && a < b.start + b.bytes) {
      snprintf(buf, sizeof buf, "%s[%llu]", b.name, (unsigned long long)((a - b.start) / 4));
      return buf;
    }
  }
  snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Leave the running fiber for the scheduler.
inline void yield(int state) {
  Thread* t = g.cur;
  t->state = state;
  emu_switch(&t->sp, g.sched);
}

[[noreturn]] inline void fail_in_fiber(const std::string& msg) {
  g.error = msg;
  g.failed = true;
  Thread* t = g.cur;
  t->state = DONE;
  emu_switch(&t->sp, g.sched);
  __builtin_unreachable();
}

inline void syncthreads(int line) {
  g.cur->line = line;
  yield(AT_BARRIER);
}

inline void syncwarp() { yield(AT_WARP); }

// An atomic that changed memory is progress; one that did not is a poll: the block may be
// spinning on another block, so the scheduler switches block.  A poll that reads a value this
// thread has not seen there before is not yet a sign of being stuck (the spin may now exit).
inline void after_atomic(const void* p, bool changed, long long v) {
  if (changed) {
    g.progress++;
    return;
  }
  Thread* t = g.cur;
  if (t->polled != p || t->polled_value != v) g.cur_block->fresh = true;
  t->polled = p;
  t->polled_value = v;
  yield(POLLED);
}

inline unsigned long long shfl(unsigned long long bits, int src, int width) {
  int tid = g.cur->tid, base = (tid / width) * width;
  g.slot[tid] = bits;
  syncwarp();  // every lane has written its value
  unsigned long long out = bits;
  if (src >= base && src < base + width && src < (int)g.slot.size()) out = g.slot[src];
  syncwarp();  // every lane has read before any lane writes again
  return out;
}

// ---- the grid scheduler ----

inline void (*kernel_body)() = nullptr;

[[noreturn]] inline void fiber_main() {
  kernel_body();
  g.cur->state = DONE;
  emu_switch(&g.cur->sp, g.sched);
  __builtin_trap();  // a finished fiber is never resumed
}

constexpr uint64_t kCanary = 0x5ca1ab1e0ddba11ull;

// A fresh fiber's stack: the frame emu_switch pops, returning into fiber_main.
inline void* fiber_stack(char* lo, size_t bytes) {
  *reinterpret_cast<uint64_t*>(lo) = kCanary;
  uintptr_t top = (reinterpret_cast<uintptr_t>(lo + bytes) & ~uintptr_t(15)) - 8;  // 8 mod 16 at entry
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *sp = 0;                                                       // fiber_main's return address
  *--sp = reinterpret_cast<uint64_t>(&fiber_main);              // popped by ret
  for (int i = 0; i < 6; i++) *--sp = 0;                        // rbp rbx r12 r13 r14 r15
  *--sp = 0x1F80ull | (0x037Full << 32);                        // MXCSR, x87 control word
  return sp;
}

// Stacks of finished blocks are kept for the next block (mapping and faulting in fresh pages
// for every block of every wave launch would dominate the run time).
inline std::vector<std::pair<char*, size_t>> stack_pool;

inline void shared_save(Block& b) {
  if (g.shared_bytes) memcpy(b.shared.data(), g.shared, g.shared_bytes);
}
inline void shared_load(Block& b) {
  if (g.shared_bytes) memcpy(g.shared, b.shared.data(), g.shared_bytes);
}

inline bool start_block(Block& b) {
  int n = g.cfg->block;
  b.stack_bytes = kStack * (size_t)n;
  for (size_t i = 0; i < stack_pool.size(); i++)
    if (stack_pool[i].second == b.stack_bytes) {
      b.stacks = stack_pool[i].first;
      stack_pool.erase(stack_pool.begin() + i);
      break;
    }
  if (!b.stacks) {
    void* mem = mmap(nullptr, b.stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (mem == MAP_FAILED) {
      g.error = "could not map the fiber stacks of block " + std::to_string(b.id);
      return false;
    }
    b.stacks = static_cast<char*>(mem);
  }
  b.threads.assign(n, Thread{});
  for (int t = 0; t < n; t++) {
    Thread& th = b.threads[t];
    th.tid = t;
    th.sp = fiber_stack(b.stacks + kStack * t, kStack);
  }
  b.shared.assign(g.shared_bytes, (char)0xff);  // NaN floats: shared memory is uninitialised on a GPU
  b.started = true;
  g.progress++;
  return true;
}

inline bool finish_block(Block& b) {
  for (size_t t = 0; t < b.threads.size(); t++)
    if (*reinterpret_cast<uint64_t*>(b.stacks + kStack * t) != kCanary) {
      g.error = "fiber stack overflow in block " + std::to_string(b.id) + " thread " + std::to_string(t) +
                " (the emulator gives each CUDA thread " + std::to_string(kStack / 1024) + " KiB)";
      return false;
    }
  stack_pool.emplace_back(b.stacks, b.stack_bytes);
  b.stacks = nullptr;
  b.threads.clear();
  b.threads.shrink_to_fit();
  b.done = true;
  g.progress++;
  return true;
}

inline std::string describe_barriers(const Block& b) {
  std::string s;
  int shown = 0;
  for (const Thread& t : b.threads) {
    if (shown >= 4) break;
    if (t.state == AT_BARRIER && (t.tid == 0 || b.threads[t.tid - 1].state != AT_BARRIER ||
                                  b.threads[t.tid - 1].line != t.line)) {
      s += " thread " + std::to_string(t.tid) + " waits at __syncthreads on line " + std::to_string(t.line) + ";";
      shown++;
    } else if (t.state == DONE && (t.tid == 0 || b.threads[t.tid - 1].state != DONE)) {
      s += " thread " + std::to_string(t.tid) + " has returned;";
      shown++;
    } else if (t.state == AT_WARP && (t.tid == 0 || b.threads[t.tid - 1].state != AT_WARP)) {
      s += " thread " + std::to_string(t.tid) + " waits at a warp collective;";
      shown++;
    }
  }
  return s;
}

// Run block `b` until every thread has returned (1), a thread polled (0), or an error (-1).
inline int run_block(Block& b) {
  g.cur_block = &b;
  blockIdx = uint3{(unsigned)b.id, 0, 0};
  shared_load(b);
  g.slot.assign(b.threads.size(), 0);
  for (;;) {
    bool polled = false, ran = false;
    for (Thread& t : b.threads) {
      if (t.state != RUNNABLE) continue;
      ran = true;
      g.cur = &t;
      threadIdx = uint3{(unsigned)t.tid, 0, 0};
      emu_switch(&g.sched, t.sp);
      if (g.failed) return -1;
      if (t.state == POLLED) {
        polled = true;
        t.state = RUNNABLE;
      }
    }
    int at_barrier = 0, done = 0, at_warp = 0, n = (int)b.threads.size();
    for (const Thread& t : b.threads) {
      at_barrier += t.state == AT_BARRIER;
      done += t.state == DONE;
      at_warp += t.state == AT_WARP;
    }
    // Warp collectives: a warp whose live lanes all wait is released together.
    if (at_warp) {
      for (int w0 = 0; w0 < n; w0 += emu_warp_size) {
        int w1 = std::min(n, w0 + emu_warp_size), waiting = 0, lane_done = 0;
        for (int i = w0; i < w1; i++) {
          waiting += b.threads[i].state == AT_WARP;
          lane_done += b.threads[i].state == DONE;
        }
        if (waiting && waiting + lane_done == w1 - w0) {
          if (lane_done) {
            g.error = "divergence in block " + std::to_string(b.id) + ": a warp collective on warp " +
                      std::to_string(w0 / emu_warp_size) + " with lanes that have returned;" + describe_barriers(b);
            return -1;
          }
          for (int i = w0; i < w1; i++) b.threads[i].state = RUNNABLE;
          ran = true;
        }
      }
      if (ran) continue;
    }
    if (done == n) {
      shared_save(b);
      return 1;
    }
    if (at_barrier && at_barrier + done == n) {
      int line = -1;
      bool same = done == 0;
      for (const Thread& t : b.threads) {
        if (t.state != AT_BARRIER) continue;
        if (line < 0) line = t.line;
        same = same && t.line == line;
      }
      if (!same) {
        g.error = "divergence in block " + std::to_string(b.id) +
                  ": the threads of a block did not all reach the same __syncthreads;" + describe_barriers(b);
        return -1;
      }
      for (Thread& t : b.threads) t.state = RUNNABLE;
      g.progress++;
      continue;
    }
    if (polled) {
      shared_save(b);
      return 0;
    }
    if (!ran) {
      g.error = "divergence in block " + std::to_string(b.id) + ": threads wait at different barriers;" +
                describe_barriers(b);
      return -1;
    }
  }
}

inline std::string spinning(const Block& b) {
  for (const Thread& t : b.threads)
    if (t.polled && t.state == RUNNABLE)
      return "block " + std::to_string(b.id) + " thread " + std::to_string(t.tid) + " spins on " + where(t.polled) +
             " = " + std::to_string(*static_cast<const volatile int*>(t.polled));
  return "block " + std::to_string(b.id) + " spins";
}

inline void on_segv(int sig, siginfo_t* info, void*) {
  const Thread* t = g.cur;
  const Block* b = g.cur_block;
  uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  const char* near = "no registered buffer";
  long long past = 0;
  for (int i = 0; g.cfg && i < g.cfg->nbuffers; i++) {
    const Buffer& bf = g.cfg->buffers[i];
    if (a >= bf.start + bf.bytes && a < bf.start + bf.bytes + 65536) {
      near = bf.name;
      past = (long long)(a - (bf.start + bf.bytes));
    } else if (a < bf.start && a + 65536 >= bf.start) {
      near = bf.name;
      past = -(long long)(bf.start - a);
    }
  }
  snprintf(g.fault_msg, sizeof g.fault_msg,
           "out-of-bounds access (signal %d) in block %d thread %d at %p: %lld bytes %s the end of %s", sig,
           b ? b->id : -1, t ? t->tid : -1, info->si_addr, past < 0 ? -past : past, past < 0 ? "before" : "past",
           near);
  siglongjmp(g.on_fault, 1);
}

// Launch `body` (the kernel with its arguments bound) on the configured grid.
inline int launch(const Config* cfg, char* err, int errlen, void (*body)(), char* shared, size_t shared_bytes) {
  g = Grid{};
  g.cfg = cfg;
  g.shared = shared;
  g.shared_bytes = shared_bytes;
  emu_warp_size = cfg->warp > 0 ? cfg->warp : 32;
  kernel_body = body;
  gridDim = dim3{(unsigned)cfg->grid, 1, 1};
  blockDim = dim3{(unsigned)cfg->block, 1, 1};
  g.blocks.resize(cfg->grid);
  for (int i = 0; i < cfg->grid; i++) g.blocks[i].id = i;

  // Start order: in order; seeded random; the victim last.
  std::vector<int> order(cfg->grid);
  for (int i = 0; i < cfg->grid; i++) order[i] = i;
  unsigned long long rng = 0x9e3779b97f4a7c15ull ^ (unsigned long long)cfg->seed;
  auto next_rand = [&]() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
  if (cfg->policy == 1)
    for (int i = cfg->grid - 1; i > 0; i--) std::swap(order[i], order[next_rand() % (i + 1)]);
  if (cfg->policy == 2 && cfg->victim >= 0 && cfg->victim < cfg->grid) {
    order.erase(order.begin() + cfg->victim);
    order.push_back(cfg->victim);
  }
  int resident = cfg->resident > 0 ? cfg->resident : cfg->grid;

  stack_t alt{};
  static char altstack[64 * 1024];
  alt.ss_sp = altstack;
  alt.ss_size = sizeof altstack;
  stack_t old_alt{};
  sigaltstack(&alt, &old_alt);
  struct sigaction sa{}, old_segv{}, old_bus{};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);

  int rc = 0;
  if (sigsetjmp(g.on_fault, 1)) {
    g.error = g.fault_msg;
    rc = -1;
  } else {
    size_t next_start = 0;
    std::vector<int> live;
    size_t rr = 0;
    unsigned long long seen_progress = ~0ull;
    while (true) {
      while ((int)live.size() < resident && next_start < order.size()) {
        Block& b = g.blocks[order[next_start++]];
        if (!start_block(b)) { rc = -1; break; }
        live.push_back(b.id);
      }
      if (rc || live.empty()) break;
      if (g.progress != seen_progress) {
        for (int id : live) g.blocks[id].stalled = false;
        seen_progress = g.progress;
      }
      // Pick the next block: round robin over live blocks that are not stalled; the victim of
      // policy 2 only when no other block can move.
      int pick = -1;
      for (size_t k = 0; k < live.size() && pick < 0; k++) {
        size_t i = cfg->policy == 1 ? next_rand() % live.size() : (rr + k) % live.size();
        Block& b = g.blocks[live[i]];
        if (b.stalled || (cfg->policy == 2 && b.id == cfg->victim && live.size() > 1)) continue;
        pick = (int)i;
      }
      if (pick < 0 && cfg->policy == 2)
        for (size_t i = 0; i < live.size(); i++)
          if (live[i] == cfg->victim && !g.blocks[live[i]].stalled) pick = (int)i;
      if (pick < 0 && cfg->policy == 1)
        for (size_t i = 0; i < live.size(); i++)
          if (!g.blocks[live[i]].stalled) { pick = (int)i; break; }
      if (pick < 0) {
        std::string s = "deadlock: every resident block spins and none can move:";
        int shown = 0;
        for (int id : live) {
          if (shown++ == 8) { s += " ..."; break; }
          s += " " + spinning(g.blocks[id]) + ";";
        }
        if (next_start < order.size())
          s += " " + std::to_string(order.size() - next_start) + " blocks never started (" +
               std::to_string(resident) + " resident at once)";
        g.error = s;
        rc = -1;
        break;
      }
      rr = (size_t)pick + 1;
      Block& b = g.blocks[live[pick]];
      unsigned long long before = g.progress;
      b.fresh = false;
      int r = run_block(b);
      if (r < 0) { rc = -1; break; }
      if (r == 1) {
        if (!finish_block(b)) { rc = -1; break; }
        live.erase(live.begin() + pick);
        rr = (size_t)pick;
        continue;
      }
      if (g.progress == before && !b.fresh) b.stalled = true;
      if (g.progress != before) g.polls = 0;
      if (++g.polls > cfg->max_polls && cfg->max_polls > 0) {
        g.error = "watchdog: " + std::to_string(g.polls) + " block switches on polls with no progress; " +
                  spinning(b);
        rc = -1;
        break;
      }
    }
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaltstack(&old_alt, nullptr);
  for (Block& b : g.blocks)
    if (b.stacks) stack_pool.emplace_back(b.stacks, b.stack_bytes);
  g.blocks.clear();
  if (rc && err && errlen > 0) snprintf(err, errlen, "%s", g.error.c_str());
  return rc;
}

}  // namespace emu


extern "C" {
void emu_syncthreads(int line) { emu::syncthreads(line); }
void emu_syncwarp(void) { emu::syncwarp(); }
void emu_after_atomic(const void* p, int changed, long long seen) { emu::after_atomic(p, changed != 0, seen); }
unsigned long long emu_shfl(unsigned long long bits, int src, int width) { return emu::shfl(bits, src, width); }
int emu_thread_id(void) { return emu::g.cur->tid; }
int emu_launch(const emu::Config* cfg, char* err, int errlen, void (*body)(), char* shared,
               unsigned long shared_bytes) {
  return emu::launch(cfg, err, errlen, body, shared, shared_bytes);
}
}
