// tmpfs_write_micro: writes 200 MiB into tmpfs several ways; CPU seconds of
// this thread, median of 5. Not built by CMake: the one-off measurement
// behind docs/local-tier.md (Measured). Build and run:
//   g++ -O2 -march=native -o micro tmpfs_write_micro_2026-11-28.cc -lxxhash
//   ./micro /dev/shm
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
static double Cpu() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}
static long Flt() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}
const size_t N = 200u << 20, B = 1u << 20;
std::vector<char> src(N, 1), dst(N, 2);
volatile uint64_t sink;
void Run(const char* name, std::function<void()> prep, std::function<void()> fn) {
  std::vector<double> c;
  long f = 0;
  for (int i = 0; i < 5; ++i) {
    prep();
    double t = Cpu();
    long f0 = Flt();
    fn();
    c.push_back(Cpu() - t);
    f = Flt() - f0;
  }
  std::sort(c.begin(), c.end());
  std::printf("%-44s %.4f CPU s (faults %ld)\n", name, c[2], f);
}
int main(int argc, char** argv) {
  std::string d = argc > 1 ? argv[1] : "/dev/shm";
  std::string p = d + "/micro_f", q = d + "/micro_g";
  for (size_t i = 0; i < N; ++i) src[i] = char(i * 7);
  auto none = [] {};
  auto fresh = [&] { unlink(p.c_str()); };
  auto existing = [&] {
    int fd = open(p.c_str(), O_WRONLY | O_CREAT, 0644);
    for (size_t o = 0; o < N; o += B) pwrite(fd, src.data() + o, B, o);
    close(fd);
  };
  Run("memcpy", none, [&] {
    for (size_t o = 0; o < N; o += B) memcpy(dst.data() + o, src.data() + o, B);
  });
  Run("xxh3 (one sum)", none, [&] {
    uint64_t h = 0;
    for (size_t o = 0; o < N; o += B) h ^= XXH3_64bits(src.data() + o, B);
    sink = h;
  });
  Run("xxh3 x2 + memcpy per 1MiB", none, [&] {
    uint64_t h = 0;
    for (size_t o = 0; o < N; o += B) {
      h ^= XXH3_64bits(src.data() + o, B);
      h ^= XXH3_64bits(src.data() + o, B);
      memcpy(dst.data() + o, src.data() + o, B);
    }
    sink = h;
  });
  Run("pwrite new file", fresh, [&] {
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (size_t o = 0; o < N; o += B) pwrite(fd, src.data() + o, B, o);
    close(fd);
  });
  Run("pwrite existing file (no trunc)", existing, [&] {
    int fd = open(p.c_str(), O_WRONLY, 0644);
    for (size_t o = 0; o < N; o += B) pwrite(fd, src.data() + o, B, o);
    close(fd);
  });
  Run("pwrite existing, 2x xxh3 per 1MiB", existing, [&] {
    uint64_t h = 0;
    int fd = open(p.c_str(), O_WRONLY, 0644);
    for (size_t o = 0; o < N; o += B) {
      h ^= XXH3_64bits(src.data() + o, B);
      h ^= XXH3_64bits(src.data() + o, B);
      pwrite(fd, src.data() + o, B, o);
    }
    close(fd);
    sink = h;
  });
  Run("mmap existing, populate, memcpy", existing, [&] {
    int fd = open(p.c_str(), O_RDWR);
    char* m = (char*)mmap(nullptr, N, PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    for (size_t o = 0; o < N; o += B) memcpy(m + o, src.data() + o, B);
    munmap(m, N);
    close(fd);
  });
  Run("mmap existing, no populate, memcpy", existing, [&] {
    int fd = open(p.c_str(), O_RDWR);
    char* m = (char*)mmap(nullptr, N, PROT_WRITE, MAP_SHARED, fd, 0);
    for (size_t o = 0; o < N; o += B) memcpy(m + o, src.data() + o, B);
    munmap(m, N);
    close(fd);
  });
  Run("mmap new file (ftruncate), populate, memcpy", fresh, [&] {
    int fd = open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ftruncate(fd, N);
    char* m = (char*)mmap(nullptr, N, PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    for (size_t o = 0; o < N; o += B) memcpy(m + o, src.data() + o, B);
    munmap(m, N);
    close(fd);
  });
  unlink(p.c_str());
  return 0;
}
