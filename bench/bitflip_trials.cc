// Bit-flip trials (docs/reliability.md): a checkpoint saved by 4 thread ranks
// (two tensors split along dim 0, an object, common state, metadata) gets one
// random bit flipped in one of its files (manifest or data file, chosen with
// probability proportional to size), then:
//   * VerifyCheckpoint must report a fault (or fail to read the manifest);
//   * a same-layout load (4 ranks, dim 0) and a resharded load (3 ranks along
//     dim 1, cooperative off and on alternately) must each either fail with an
//     error or return exactly the saved bytes: a load that succeeds with
//     different bytes is a silent wrong load, the failure this counts;
// then the bit is flipped back. Exit status 1 on any silent wrong load or any
// flip verify did not see.
//
//   bitflip_trials [--trials N=300] [--seed S=1] [--dir DIR]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "shardpoint/verify.h"
#include "tests/testing/ranks.h"

namespace fs = std::filesystem;
using namespace shardpoint;

namespace {

struct Spec {
  std::string key;
  DType dtype;
  Shape shape;
};
const std::vector<Spec> kSpecs = {{"w", DType::kF32, {256, 96}}, {"e", DType::kBF16, {160, 64}}};

struct Reference {
  std::vector<std::string> bytes;  // per spec, row-major
  std::string object = "rng state \x01\x02\x03";
  std::string common = "{\"iteration\": 7}";
};

int64_t Rows(const Spec& s) { return s.shape[0]; }
int64_t RowBytes(const Spec& s) { return s.shape[1] * static_cast<int64_t>(DTypeSize(s.dtype)); }

// Rank r of `n` along `dim`, copying its part of `ref` in when `fill`.
Status Build(const Reference& ref, int dim, int r, int n, bool fill, testing::TestRank* out) {
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    const Spec& s = kSpecs[i];
    const std::vector<int64_t> sizes = ChunkSizes(s.shape[dim], n);
    int64_t begin = 0;
    for (int k = 0; k < r; ++k) begin += sizes[k];
    const int64_t count = sizes[r];
    Shape local = s.shape;
    local[dim] = count;
    const int64_t es = static_cast<int64_t>(DTypeSize(s.dtype));
    char* data = static_cast<char*>(out->arena.Alloc(local[0] * local[1], s.dtype));
    if (fill) {
      for (int64_t row = 0; row < local[0]; ++row) {
        const int64_t grow = dim == 0 ? begin + row : row;
        const int64_t gcol = dim == 1 ? begin : 0;
        std::memcpy(data + row * local[1] * es,
                    ref.bytes[i].data() + grow * RowBytes(s) + gcol * es, local[1] * es);
      }
    }
    Result<LocalTensor> t = SplitTensor(s.key, s.dtype, data, s.shape, dim, r, n);
    if (!t.ok()) return t.status();
    out->state.tensors.push_back(std::move(*t));
  }
  out->state.objects.push_back(Object{"rng", fill ? ref.object : "", {}, {}});
  out->state.common = fill ? ref.common : "";
  if (fill) out->state.metadata_json = "{\"run\": \"bitflip\"}";
  return OkStatus();
}

// True when every rank's tensors, object and common equal the reference.
bool Matches(const Reference& ref, int dim, std::vector<testing::TestRank>& ranks) {
  const int n = static_cast<int>(ranks.size());
  for (int r = 0; r < n; ++r) {
    const State& st = ranks[r].state;
    for (size_t i = 0; i < kSpecs.size(); ++i) {
      const Spec& s = kSpecs[i];
      const std::vector<int64_t> sizes = ChunkSizes(s.shape[dim], n);
      int64_t begin = 0;
      for (int k = 0; k < r; ++k) begin += sizes[k];
      Shape local = s.shape;
      local[dim] = sizes[r];
      const int64_t es = static_cast<int64_t>(DTypeSize(s.dtype));
      const char* data = static_cast<const char*>(st.tensors[i].data);
      for (int64_t row = 0; row < local[0]; ++row) {
        const int64_t grow = dim == 0 ? begin + row : row;
        const int64_t gcol = dim == 1 ? begin : 0;
        if (std::memcmp(data + row * local[1] * es,
                        ref.bytes[i].data() + grow * RowBytes(s) + gcol * es, local[1] * es) != 0) {
          return false;
        }
      }
    }
    if (st.objects[0].bytes != ref.object || st.common != ref.common) return false;
  }
  return true;
}

enum class Outcome { kError, kIdentical, kWrong };

Outcome LoadOnce(const Reference& ref, const std::string& dir, int dim, int n, bool cooperative) {
  std::vector<testing::TestRank> ranks(n);
  for (int r = 0; r < n; ++r) {
    if (!Build(ref, dim, r, n, /*fill=*/false, &ranks[r]).ok()) std::abort();
  }
  LoadOptions o;
  o.cooperative = cooperative;
  o.io_threads = 2;
  Status s = testing::LoadRanks(testing::StatesOf(ranks), dir, o);
  if (!s.ok()) return Outcome::kError;
  return Matches(ref, dim, ranks) ? Outcome::kIdentical : Outcome::kWrong;
}

void FlipBit(const std::string& path, uint64_t bit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(bit / 8));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ (1 << (bit % 8)));
  f.seekp(static_cast<std::streamoff>(bit / 8));
  f.write(&c, 1);
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 300;
  uint64_t seed = 1;
  std::string dir = (fs::temp_directory_path() / "shardpoint_bitflip").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--trials") {
      trials = std::atoi(argv[i + 1]);
    } else if (a == "--seed") {
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--dir") {
      dir = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: bitflip_trials [--trials N] [--seed S] [--dir DIR]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(seed);
  Reference ref;
  for (const Spec& s : kSpecs) {
    std::string b(static_cast<size_t>(Rows(s) * RowBytes(s)), '\0');
    for (char& c : b) c = static_cast<char>(rng());
    ref.bytes.push_back(std::move(b));
  }
  const std::string ckpt = dir + "/bitflip_ckpt";  // only this is created and removed
  fs::create_directories(dir);
  fs::remove_all(ckpt);
  std::vector<testing::TestRank> savers(4);
  for (int r = 0; r < 4; ++r) {
    if (!Build(ref, 0, r, 4, /*fill=*/true, &savers[r]).ok()) return 2;
  }
  Status s = testing::SaveRanks(testing::StatesOf(savers), ckpt);
  if (!s.ok()) {
    std::fprintf(stderr, "save: %s\n", s.ToString().c_str());
    return 2;
  }
  if (LoadOnce(ref, ckpt, 0, 4, true) != Outcome::kIdentical ||
      LoadOnce(ref, ckpt, 1, 3, false) != Outcome::kIdentical) {
    std::fprintf(stderr, "the unflipped checkpoint does not load back\n");
    return 2;
  }
  std::vector<std::pair<std::string, uint64_t>> files;  // path, size
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(ckpt)) {
    if (!e.is_regular_file()) continue;
    files.emplace_back(e.path().string(), e.file_size());
    total += e.file_size();
  }
  int verify_missed = 0, wrong = 0, manifest_flips = 0;
  int same_error = 0, same_identical = 0, re_error = 0, re_identical = 0;
  for (int t = 0; t < trials; ++t) {
    uint64_t pick = rng() % total, bit = 0;
    size_t f = 0;
    while (pick >= files[f].second) pick -= files[f++].second;
    bit = pick * 8 + rng() % 8;
    const std::string& path = files[f].first;
    const bool manifest = fs::path(path).filename() == "manifest";
    manifest_flips += manifest;
    FlipBit(path, bit);
    Result<VerifyReport> v = VerifyCheckpoint(ckpt);
    const bool caught = !v.ok() || !v->faults.empty();
    const Outcome same = LoadOnce(ref, ckpt, 0, 4, t % 2 == 0);
    const Outcome re = LoadOnce(ref, ckpt, 1, 3, t % 2 == 1);
    FlipBit(path, bit);
    if (!caught) {
      ++verify_missed;
      std::printf("trial %d: verify passed with bit %llu of %s flipped\n", t,
                  static_cast<unsigned long long>(bit), path.c_str());
    }
    for (Outcome o : {same, re}) {
      if (o == Outcome::kWrong) {
        ++wrong;
        std::printf("trial %d: SILENT WRONG LOAD with bit %llu of %s flipped\n", t,
                    static_cast<unsigned long long>(bit), path.c_str());
      }
    }
    same_error += same == Outcome::kError;
    same_identical += same == Outcome::kIdentical;
    re_error += re == Outcome::kError;
    re_identical += re == Outcome::kIdentical;
  }
  std::printf(
      "bitflip_trials: %d single-bit flips (%d in the manifest, %d in data files of %llu bytes in "
      "all); verify saw %d; same-layout load: %d errors, %d identical; resharded load: %d errors, "
      "%d identical; silent wrong loads: %d\n",
      trials, manifest_flips, trials - manifest_flips, static_cast<unsigned long long>(total),
      trials - verify_missed, same_error, same_identical, re_error, re_identical, wrong);
  fs::remove_all(ckpt);
  return wrong == 0 && verify_missed == 0 ? 0 : 1;
}
