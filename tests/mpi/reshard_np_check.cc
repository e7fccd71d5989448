// Resharding across process counts: a checkpoint saved by one mpirun (np 4,
// TP=2 x DP=2 with a distributed optimizer) loads, bit for bit, in another
// mpirun with a different number of processes and another layout.
//
//   mpirun -np 4 reshard_np_check save DIR
//   mpirun -np N reshard_np_check load DIR TP PP DP DISTOPT   (TP*PP*DP == N)
//
// `load` runs Load twice, cooperative on and off, and checks that:
//  - both results equal the reference bit for bit, and each other;
//  - cooperative off: every rank read exactly the bytes of its own tensors;
//  - cooperative on: no rank receives more than its own tensor bytes, and the
//    needed bytes in the blocks the ranks read sum to the stored tensor bytes
//    (each stored block read by one rank), strictly less than with it off
//    when ranks hold replicas.
// Rank 0 gathers and prints the bytes read / received of every rank.
// The exit code is non-zero on every rank if any check failed on any rank.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/mpi_comm.h"
#include "src/base/bytes.h"
#include "tests/testing/reference.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using internal_base::ByteReader;
using internal_base::ByteWriter;
using testing::ParallelConfig;
using testing::RankState;

// Tiny (np 8 runs on 2 cores), and every dim divisible by TP 1, 2, 3, 4, 8;
// 4 layers: PP 1, 2, 4.
const testing::ModelConfig kModel{4, 48, 96, 240};
constexpr uint64_t kSeed = 20240604;
const ParallelConfig kSaveLayout{2, 1, 2, true};

int g_rank = 0;
int g_failures = 0;

void Fail(const std::string& msg) {
  std::fprintf(stderr, "[rank %d] FAILED: %s\n", g_rank, msg.c_str());
  ++g_failures;
}

bool Check(bool ok, const std::string& msg) {
  if (!ok) Fail(msg);
  return ok;
}

uint64_t ReferenceBytes(const testing::RefModel& ref) {
  uint64_t total = 0;
  for (const auto& [key, t] : ref) total += t.bytes.size();
  return total;
}

int RunSave(Comm& world, const std::string& dir) {
  if (!Check(world.size() == kSaveLayout.world(),
             "save needs np " + std::to_string(kSaveLayout.world()))) {
    return 1;
  }
  const testing::RefModel ref = testing::MakeReference(kModel, kSeed);
  Result<RankState> rs = testing::BuildRankState(kModel, kSaveLayout, world.rank());
  if (!Check(rs.ok(), "BuildRankState: " + rs.status().ToString())) return 1;
  Status fill = testing::FillFromReference(ref, rs->state.tensors);
  Check(fill.ok(), "FillFromReference: " + fill.ToString());
  SaveOptions o;
  o.overwrite = true;  // ctest reruns
  Result<SaveStats> saved = Save(rs->state, dir, world, o);
  if (Check(saved.ok(), "Save: " + saved.status().ToString()) && world.rank() == 0) {
    Check(saved->num_files == world.size(),
          "expected one data file per rank, got " + std::to_string(saved->num_files));
    Check(saved->bytes_written >= ReferenceBytes(ref), "bytes_written below the model bytes");
    std::printf("saved %s at np %d into %s: %" PRIu64 " bytes in %d files, %.3f s\n",
                kSaveLayout.ToString().c_str(), world.size(), dir.c_str(), saved->bytes_written,
                saved->num_files, saved->seconds);
  }
  return 0;
}

struct Outcome {
  bool ok = false;
  uint64_t read = 0, received = 0;
};

Outcome LoadOnce(Comm& world, const std::string& dir, const ParallelConfig& to, bool cooperative,
                 const testing::RefModel& ref, RankState* dst) {
  Outcome out;
  Result<RankState> rs = testing::BuildRankState(kModel, to, world.rank());
  if (!Check(rs.ok(), "BuildRankState: " + rs.status().ToString())) return out;
  *dst = std::move(*rs);
  // Garbage in the destination, so a byte left unwritten cannot pass.
  for (const LocalTensor& t : dst->state.tensors) {
    const int64_t n = t.flat ? t.flat->size() : Box::Whole(t.shape).num_elements();
    std::memset(t.data, 0xA5, static_cast<size_t>(n) * DTypeSize(t.dtype));
  }
  dst->state.objects.clear();  // the saver's per-rank RNG objects do not map onto these ranks
  LoadOptions o;
  o.cooperative = cooperative;
  // Small rounds, so bytes move in many AllToAll rounds even for this tiny model.
  o.cooperative_round_bytes = 64 << 10;
  o.allow_unexpected_keys = true;
  Result<LoadResult> r = Load(dst->state, dir, world, o);
  const std::string what = std::string("cooperative ") + (cooperative ? "on" : "off");
  if (!Check(r.ok(), what + ": Load: " + r.status().ToString())) return out;
  Check(r->missing_keys.empty(), what + ": missing keys");
  Check(r->unexpected_keys == std::vector<std::string>{"rng_state"},
        what + ": unexpected keys other than rng_state");
  Status c = testing::CheckAgainstReference(ref, dst->state.tensors);
  if (!Check(c.ok(), what + ": " + to.ToString() + ": " + c.ToString())) return out;
  out.ok = true;
  // The needed bytes (by any rank) in what it read (bytes_read also counts
  // the rest of the checksummed blocks that cover them).
  out.read = r->bytes_needed;
  out.received = r->bytes_received;
  return out;
}

// Every rank's figures, gathered on every rank: [read, received] x ranks;
// *all_ok stays true only if every rank's load succeeded.
std::vector<uint64_t> AllFigures(Comm& world, const Outcome& o, bool* all_ok) {
  ByteWriter w;
  w.U64(o.read);
  w.U64(o.received);
  w.U64(o.ok ? 1 : 0);
  std::vector<std::string> all;
  std::vector<uint64_t> out;
  Status s = world.AllGather(w.str(), &all);
  if (!Check(s.ok(), "AllGather: " + s.ToString())) return out;
  for (int r = 0; r < world.size(); ++r) {
    ByteReader rd(all[r], "figures");
    uint64_t a = 0, b = 0, ok = 0;
    Check(rd.U64(&a).ok() && rd.U64(&b).ok() && rd.U64(&ok).ok(), "decoding figures");
    out.push_back(a);
    out.push_back(b);
    *all_ok = *all_ok && ok == 1;
  }
  return out;
}

int RunLoad(Comm& world, const std::string& dir, const ParallelConfig& to) {
  const int n = world.size(), me = world.rank();
  if (!Check(to.world() == n, "layout " + to.ToString() + " needs np " +
                                  std::to_string(to.world()) + ", got " + std::to_string(n))) {
    return 1;
  }
  const testing::RefModel ref = testing::MakeReference(kModel, kSeed);
  RankState on, off;
  const Outcome co = LoadOnce(world, dir, to, true, ref, &on);
  const Outcome alone = LoadOnce(world, dir, to, false, ref, &off);

  // The two results are identical, byte for byte.
  if (co.ok && alone.ok) {
    bool same = on.state.tensors.size() == off.state.tensors.size();
    for (size_t i = 0; same && i < on.state.tensors.size(); ++i) {
      const LocalTensor& a = on.state.tensors[i];
      const LocalTensor& b = off.state.tensors[i];
      const int64_t elems = a.flat ? a.flat->size() : Box::Whole(a.shape).num_elements();
      same = std::memcmp(a.data, b.data, static_cast<size_t>(elems) * DTypeSize(a.dtype)) == 0;
    }
    Check(same, "cooperative on and off loaded different bytes");
  }
  // Per rank: off reads exactly its own tensor bytes (as needed bytes: whole
  // blocks around them are read to verify them); on reads + receives them.
  const uint64_t own = on.bytes;
  if (co.ok && alone.ok) {
    Check(alone.read == own, "cooperative off read " + std::to_string(alone.read) +
                                 " bytes, its tensors hold " + std::to_string(own));
    Check(alone.received == 0, "cooperative off received bytes");
    // On, a rank reads whole blocks for all ranks that need them and
    // receives the rest of its bytes: never more than it holds.
    Check(co.received <= own, "cooperative on received " + std::to_string(co.received) +
                                  " bytes, its tensors hold " + std::to_string(own));
  }

  bool all_ok = true;
  const std::vector<uint64_t> fon = AllFigures(world, co, &all_ok);
  const std::vector<uint64_t> foff = AllFigures(world, alone, &all_ok);
  if (!all_ok || fon.size() != 2u * n || foff.size() != 2u * n) return 1;
  uint64_t sum_on = 0, sum_off = 0, sum_recv = 0;
  for (int r = 0; r < n; ++r) {
    sum_on += fon[2 * r];
    sum_recv += fon[2 * r + 1];
    sum_off += foff[2 * r];
  }
  const uint64_t stored = ReferenceBytes(ref);
  // Every tensor is requested by some rank, so the stored bytes requested are
  // all stored tensor bytes; cooperative load reads each of them once.
  Check(sum_on == stored, "cooperative on: ranks read " + std::to_string(sum_on) +
                              " bytes in all, the checkpoint stores " + std::to_string(stored));
  // Layer norms are replicated over TP and everything over DP unless flat-sharded.
  if (to.world() > 1 && (to.dp > 1 || to.tp > 1)) {
    Check(sum_on < sum_off, "cooperative on read " + std::to_string(sum_on) +
                                " bytes, not less than off (" + std::to_string(sum_off) + ")");
  }
  if (me == 0) {
    std::printf("load %s at np %d from %s (saved as %s at np %d)\n", to.ToString().c_str(), n,
                dir.c_str(), kSaveLayout.ToString().c_str(), kSaveLayout.world());
    std::printf("%6s %16s %16s %16s\n", "rank", "read (coop off)", "read (coop on)",
                "received (on)");
    for (int r = 0; r < n; ++r) {
      std::printf("%6d %16" PRIu64 " %16" PRIu64 " %16" PRIu64 "\n", r, foff[2 * r], fon[2 * r],
                  fon[2 * r + 1]);
    }
    std::printf("%6s %16" PRIu64 " %16" PRIu64 " %16" PRIu64 "\n", "sum", sum_off, sum_on,
                sum_recv);
    std::printf("stored tensor bytes %" PRIu64 "; cooperative reads %.3fx of off\n", stored,
                sum_off ? static_cast<double>(sum_on) / static_cast<double>(sum_off) : 0.0);
  }
  return 0;
}

int Usage() {
  if (g_rank == 0) {
    std::fprintf(stderr,
                 "usage: reshard_np_check save DIR\n"
                 "       reshard_np_check load DIR TP PP DP DISTOPT(0|1)\n");
  }
  return 1;
}

int Main(int argc, char** argv) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  if (!world) {
    Fail("MakeMpiComm");
    return 1;
  }
  const std::string mode = argc > 1 ? argv[1] : "";
  int rc = 1;
  if (mode == "save" && argc == 3) {
    rc = RunSave(*world, argv[2]);
  } else if (mode == "load" && argc == 7) {
    const ParallelConfig to{std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                            std::atoi(argv[6]) != 0};
    rc = RunLoad(*world, argv[2], to);
  } else {
    rc = Usage();
  }
  return rc != 0 || g_failures != 0 ? 1 : 0;
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &shardpoint::g_rank);
  int failed = shardpoint::Main(argc, argv);
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && shardpoint::g_rank == 0) std::fprintf(stderr, "reshard_np_check: FAILED\n");
  MPI_Finalize();
  return any_failed;
}
