// readback_probe: why is a read right after an O_DIRECT + preallocated write
// slower than the same read later? Isolates the file system from shardpoint.
//
//   readback_probe [--dir DIR] [--mib N] [--reps K] [--pause S]
//
// Each rep, for each write variant (order rotated per rep), writes one file of
// N MiB in 16 MiB requests and makes it durable, then reads it back with
// buffered 16 MiB preads: at once ("right after"), then after a pause of S
// seconds and `echo 3 > /proc/sys/vm/drop_caches` ("later"). Before every
// read the file's page cache is dropped (POSIX_FADV_DONTNEED). Variants:
//   direct+falloc+fsync   O_DIRECT into fallocate'd space, fsync (what Save does)
//   direct+fsync          O_DIRECT, no fallocate, fsync
//   direct+falloc+fdatasync
//   direct+falloc+fsync+syncfs   then syncfs(2) (journal commit) before the read
//   buffered+fsync+dontneed      page cache writes, fsync, POSIX_FADV_DONTNEED
// Prints median GB/s per variant and read kind.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Die(const std::string& m) {
  std::fprintf(stderr, "readback_probe: %s: %s\n", m.c_str(), std::strerror(errno));
  std::exit(1);
}

constexpr size_t kReq = size_t{16} << 20;

struct Variant {
  const char* name;
  bool direct, falloc, datasync, syncfs, dontneed;
};

void Write(const std::string& path, const Variant& v, size_t bytes, char* buf) {
  ::unlink(path.c_str());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (v.direct ? O_DIRECT : 0), 0644);
  if (fd < 0) Die("open " + path);
  if (v.falloc && ::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) Die("fallocate");
  for (size_t at = 0; at < bytes; at += kReq) {
    if (::pwrite(fd, buf, kReq, static_cast<off_t>(at)) != static_cast<ssize_t>(kReq)) {
      Die("pwrite");
    }
  }
  if ((v.datasync ? ::fdatasync(fd) : ::fsync(fd)) != 0) Die("sync");
  if (v.syncfs && ::syncfs(fd) != 0) Die("syncfs");
  if (v.dontneed) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double Read(const std::string& path, size_t bytes, char* buf) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const double t0 = Now();
  for (size_t at = 0; at < bytes; at += kReq) {
    if (::pread(fd, buf, kReq, static_cast<off_t>(at)) != static_cast<ssize_t>(kReq)) Die("pread");
  }
  const double dt = Now() - t0;
  ::close(fd);
  return bytes / dt / 1e9;
}

void DropCaches() {
  ::sync();
  FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (f) {
    std::fputs("3", f);
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = ".";
  size_t mib = 1024;
  int reps = 3;
  double pause = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--dir")
      dir = v;
    else if (a == "--mib")
      mib = std::stoul(v);
    else if (a == "--reps")
      reps = std::stoi(v);
    else if (a == "--pause")
      pause = std::stod(v);
    else {
      std::fprintf(stderr, "usage: readback_probe [--dir DIR] [--mib N] [--reps K] [--pause S]\n");
      return 2;
    }
  }
  const size_t bytes = (mib << 20) / kReq * kReq;
  const Variant variants[] = {
      {"direct+falloc+fsync", true, true, false, false, false},
      {"direct+fsync", true, false, false, false, false},
      {"direct+falloc+fdatasync", true, true, true, false, false},
      {"direct+falloc+fsync+syncfs", true, true, false, true, false},
      {"buffered+fsync+dontneed", false, false, false, false, true},
  };
  const size_t nv = sizeof variants / sizeof variants[0];
  void* mem = nullptr;
  if (::posix_memalign(&mem, 4096, kReq) != 0) Die("posix_memalign");
  char* buf = static_cast<char*>(mem);
  for (size_t i = 0; i < kReq; ++i) buf[i] = static_cast<char>(i * 131 + 7);
  const std::string path = dir + "/readback_probe.bin";
  std::map<std::string, std::vector<double>> now, later;
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k = 0; k < nv; ++k) {
      const Variant& v = variants[(k + rep) % nv];
      Write(path, v, bytes, buf);
      now[v.name].push_back(Read(path, bytes, buf));
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
      DropCaches();
      later[v.name].push_back(Read(path, bytes, buf));
    }
  }
  ::unlink(path.c_str());
  std::printf("%zu MiB file, 16 MiB requests, %d reps, pause %.1f s\n", bytes >> 20, reps, pause);
  std::printf("%-30s %12s %12s   %s\n", "write variant", "right after", "later", "(GB/s, medians)");
  for (const Variant& v : variants) {
    std::printf("%-30s %12.3f %12.3f\n", v.name, shardpoint::bench::Median(now[v.name]),
                shardpoint::bench::Median(later[v.name]));
  }
  return 0;
}
