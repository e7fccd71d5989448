// The local tier under mpirun, each rank in a mount namespace of its node
// (tests/local/local_mpi_check.sh runs it through tests/local/node_ns.sh):
// SP_LOCAL_ROOT is the node's directory bound at one path, SP_NODE the node
// id, SP_HIDDEN the directory that holds every node's directory, which the
// namespace covers with an empty tmpfs: a rank sees its own node's memory
// and nothing else, so no check passes by reading another node's files.
//
//   local_mpi_check save PERSISTENT IT                 (np 8: TP2 PP2 DP2)
//       local checkpoints IT and IT + 1 (reference seeds IT, IT + 1), and
//       IT as the persistent checkpoint PERSISTENT
//   local_mpi_check load PERSISTENT|- IT TP PP DP      (np TP*PP*DP)
//       loads with LocalLoad, checks every tensor against the reference bit
//       for bit, prints "local=L peer=P persistent=S" (sums over ranks)
//   local_mpi_check unit-bytes DIR FILE   (no mpirun: the bytes of the
//       verification units of data file FILE of checkpoint DIR)
//   local_mpi_check flip DIR FILE         (no mpirun: flips a bit in the
//       first unit of FILE of local checkpoint DIR)
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardpoint/local_tier.h"
#include "shardpoint/mpi_comm.h"
#include "src/checkpoint/commit.h"
#include "src/local/units.h"
#include "src/source/manifest_read.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using testing::ParallelConfig;

const testing::ModelConfig kModel{2, 48, 96, 240};  // every dim divisible by TP 2, 3, 4
const ParallelConfig kSaveLayout{2, 2, 2, true};
int g_rank = 0;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "[rank %d] FAILED: %s\n", g_rank, msg.c_str());
  return 1;
}

// The namespace's view: this node's root, and no other node's.
Result<LocalTierOptions> NodeOptions() {
  const char* root = std::getenv("SP_LOCAL_ROOT");
  const char* node = std::getenv("SP_NODE");
  const char* hidden = std::getenv("SP_HIDDEN");
  if (!root || !node || !hidden) {
    return FailedPreconditionError("SP_LOCAL_ROOT, SP_NODE, SP_HIDDEN unset: run under node_ns.sh");
  }
  SP_ASSIGN_OR_RETURN(std::vector<std::string> seen, DefaultStorage()->ListDir(hidden));
  if (!seen.empty()) {
    return FailedPreconditionError(std::string("this rank sees other nodes' roots under ") +
                                   hidden + ": not isolated");
  }
  LocalTierOptions o;
  o.local_root = root;
  o.node_id = node;
  o.round_bytes = 96 << 10;
  return o;
}

int RunSave(Comm& world, const std::string& persistent, int64_t it) {
  if (world.size() != kSaveLayout.world()) return Fail("save needs np 8");
  Result<LocalTierOptions> o = NodeOptions();
  if (!o.ok()) return Fail(o.status().ToString());
  const testing::RefModel ref = testing::MakeReference(kModel, it);
  Result<testing::RankState> rs = testing::BuildRankState(kModel, kSaveLayout, world.rank());
  if (!rs.ok()) return Fail(rs.status().ToString());
  Status s = testing::FillFromReference(ref, rs->state.tensors);
  if (s.ok()) s = LocalSave(rs->state, it, world, *o).status();
  SaveOptions so;
  so.overwrite = true;
  if (s.ok()) s = Save(rs->state, persistent, world, so).status();
  // A second local checkpoint, it + 1, of other values (seed it + 1).
  if (s.ok())
    s = testing::FillFromReference(testing::MakeReference(kModel, it + 1), rs->state.tensors);
  if (s.ok()) s = LocalSave(rs->state, it + 1, world, *o).status();
  return s.ok() ? 0 : Fail(s.ToString());
}

int RunLoad(Comm& world, const std::string& persistent, int64_t it, const ParallelConfig& to) {
  if (world.size() != to.world()) return Fail("np must be TP*PP*DP");
  Result<LocalTierOptions> o = NodeOptions();
  if (!o.ok()) return Fail(o.status().ToString());
  Result<testing::RankState> rs = testing::BuildRankState(kModel, to, world.rank());
  if (!rs.ok()) return Fail(rs.status().ToString());
  if (to.world() != kSaveLayout.world()) rs->state.objects.clear();
  for (Object& ob : rs->state.objects) ob.bytes.clear();
  LoadOptions lo;
  lo.allow_unexpected_keys = true;
  Result<LoadResult> r =
      LocalLoad(rs->state, it, world, *o, persistent == "-" ? "" : persistent, lo);
  if (!r.ok()) return Fail(r.status().ToString());
  Status c = testing::CheckAgainstReference(testing::MakeReference(kModel, it), rs->state.tensors);
  if (!c.ok()) return Fail(c.ToString());
  for (const Object& ob : rs->state.objects) {
    if (ob.bytes != "rng-of-rank-" + std::to_string(world.rank())) return Fail("object " + ob.key);
  }
  uint64_t mine[3] = {r->bytes_local, r->bytes_peer, r->bytes_persistent}, sum[3] = {};
  MPI_Allreduce(mine, sum, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (world.rank() == 0) {
    std::printf("local=%" PRIu64 " peer=%" PRIu64 " persistent=%" PRIu64 "\n", sum[0], sum[1],
                sum[2]);
  }
  return 0;
}

// The units of data file `name` of checkpoint `dir`.
Result<std::vector<internal_local::Unit>> UnitsOfFile(const std::string& dir,
                                                      const std::string& name) {
  SP_ASSIGN_OR_RETURN(internal_format::Manifest m,
                      internal_source::ReadManifest(DefaultStorage(), dir));
  std::vector<internal_local::Unit> out;
  for (const internal_local::Unit& u : internal_local::UnitsOf(m).units) {
    if (m.files[u.file] == name) out.push_back(u);
  }
  if (out.empty()) return NotFoundError("no unit in " + name);
  return out;
}

int UnitBytes(const std::string& dir, const std::string& name) {
  Result<std::vector<internal_local::Unit>> us = UnitsOfFile(dir, name);
  if (!us.ok()) return Fail(us.status().ToString());
  uint64_t n = 0;
  for (const internal_local::Unit& u : *us) n += u.nbytes;
  std::printf("%" PRIu64 "\n", n);
  return 0;
}

int Flip(const std::string& dir, const std::string& name) {
  Result<std::vector<internal_local::Unit>> us = UnitsOfFile(dir, name);
  if (!us.ok()) return Fail(us.status().ToString());
  FILE* f = std::fopen((dir + "/" + name).c_str(), "r+b");
  if (f == nullptr) return Fail("cannot open " + dir + "/" + name);
  std::fseek(f, static_cast<long>(us->front().offset + 5), SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(us->front().offset + 5), SEEK_SET);
  std::fputc(c ^ 0x10, f);
  std::fclose(f);
  std::printf("%" PRIu64 "\n", us->front().nbytes);
  return 0;
}

int Main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unit-bytes" && argc == 4) return UnitBytes(argv[2], argv[3]);
  if (mode == "flip" && argc == 4) return Flip(argv[2], argv[3]);
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  if (!world) return Fail("MakeMpiComm");
  if (mode == "save" && argc == 4) return RunSave(*world, argv[2], std::atoll(argv[3]));
  if (mode == "load" && argc == 7) {
    const ParallelConfig to{std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]), false};
    return RunLoad(*world, argv[2], std::atoll(argv[3]), to);
  }
  return Fail("usage: see tests/local/local_mpi_check.cc");
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &shardpoint::g_rank);
  const int failed = shardpoint::Main(argc, argv);
  int any_failed = failed;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
