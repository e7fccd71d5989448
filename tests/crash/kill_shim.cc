// LD_PRELOAD shim for the crash trials: counts the process's metadata system
// calls (rename, renameat, renameat2, unlink, unlinkat, rmdir, remove, mkdir,
// mkdirat, fsync, fdatasync), from every thread, and kills the process with
// SIGKILL at the Nth one.
//
//   SP_CRASH_KILL_AT=N        kill at the Nth call (1-based); unset: never
//   SP_CRASH_KILL_AFTER=1     kill right after the Nth call returns (default:
//                             right before it reaches the kernel)
//   SP_CRASH_COUNT_FILE=path  at a normal exit, write the number of calls
//                             made (how a driver learns the range of N)
//   SP_CRASH_LOG=1            print each counted call to stderr
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace {

std::atomic<int64_t> g_calls{0};

int64_t KillAt() {
  static const int64_t at = [] {
    const char* v = getenv("SP_CRASH_KILL_AT");
    return v ? atoll(v) : int64_t{-1};
  }();
  return at;
}

bool KillAfter() {
  static const bool after = [] {
    const char* v = getenv("SP_CRASH_KILL_AFTER");
    return v != nullptr && v[0] == '1';
  }();
  return after;
}

[[noreturn]] void Die() {
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

// Counts one call; returns its number and kills before it if that is the one.
int64_t Before(const char* name, const char* path) {
  int64_t n = ++g_calls;
  if (getenv("SP_CRASH_LOG")) fprintf(stderr, "kill_shim: %lld %s %s\n", (long long)n, name, path);
  if (n == KillAt() && !KillAfter()) Die();
  return n;
}

void After(int64_t n) {
  if (n == KillAt() && KillAfter()) Die();
}

struct CountAtExit {
  ~CountAtExit() {
    const char* path = getenv("SP_CRASH_COUNT_FILE");
    if (!path) return;
    FILE* f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%lld\n", static_cast<long long>(g_calls.load()));
    fclose(f);
  }
} count_at_exit;

template <typename F>
F Next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

// Each wrapper: count, maybe die, call the real function, maybe die.
#define SP_WRAP(ret, name, params, args, path) \
  extern "C" ret name params {                 \
    using Fn = ret(*) params;                  \
    static Fn real = Next<Fn>(#name);          \
    int64_t n = Before(#name, path);           \
    ret r = real args;                         \
    After(n);                                  \
    return r;                                  \
  }

SP_WRAP(int, rename, (const char* a, const char* b), (a, b), a)
SP_WRAP(int, renameat, (int fa, const char* a, int fb, const char* b), (fa, a, fb, b), a)
SP_WRAP(int, renameat2, (int fa, const char* a, int fb, const char* b, unsigned flags),
        (fa, a, fb, b, flags), a)
SP_WRAP(int, unlink, (const char* p), (p), p)
SP_WRAP(int, unlinkat, (int fd, const char* p, int flags), (fd, p, flags), p)
SP_WRAP(int, rmdir, (const char* p), (p), p)
SP_WRAP(int, remove, (const char* p), (p), p)
SP_WRAP(int, mkdir, (const char* p, mode_t m), (p, m), p)
SP_WRAP(int, mkdirat, (int fd, const char* p, mode_t m), (fd, p, m), p)
SP_WRAP(int, fsync, (int fd), (fd), "<fd>")
SP_WRAP(int, fdatasync, (int fd), (fd), "<fd>")
