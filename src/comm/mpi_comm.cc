// Comm over MPI. Compiled only with SHARDPOINT_HAVE_MPI, so that the library
// builds where MPI is absent.
#ifdef SHARDPOINT_HAVE_MPI

#include "shardpoint/mpi_comm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace shardpoint {
namespace internal_comm {
namespace {

// MPI counts are ints; Broadcast goes in chunks, the gathers refuse.
constexpr uint64_t kMaxCount = INT_MAX;
constexpr uint64_t kBroadcastChunk = uint64_t{1} << 30;

Status MpiStatus(int err, const char* what) {
  if (err == MPI_SUCCESS) return OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = err;
  MPI_Error_class(err, &error_class);
  return IOError(std::string(what) + " failed: " + std::string(text, len) + " (MPI error class " +
                 std::to_string(error_class) + ")");
}

// MPI may reject a null buffer even with a count of zero.
const void* SendPtr(std::string_view s) {
  static const char kEmpty = 0;
  return s.empty() ? &kEmpty : s.data();
}

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~MpiComm() override {
    // Freeing after MPI_Finalize is erroneous; then the communicator is gone anyway.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    std::vector<int> counts, displs;
    SP_RETURN_IF_ERROR(ExchangeSizes(mine, "AllGather", &counts, &displs));
    std::string buffer(static_cast<size_t>(displs.back()) + counts.back(), '\0');
    SP_RETURN_IF_ERROR(
        MpiStatus(MPI_Allgatherv(SendPtr(mine), static_cast<int>(mine.size()), MPI_BYTE,
                                 buffer.data(), counts.data(), displs.data(), MPI_BYTE, comm_),
                  "MPI_Allgatherv"));
    if (all == nullptr) return InvalidArgumentError("AllGather: null output");
    Split(buffer, counts, displs, all);
    return OkStatus();
  }

  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    // Every rank learns every size, so all of them agree on a size error
    // instead of some going on into Gatherv.
    std::vector<int> counts, displs;
    SP_RETURN_IF_ERROR(ExchangeSizes(mine, "Gather", &counts, &displs));
    std::string buffer;
    if (rank_ == root) buffer.resize(static_cast<size_t>(displs.back()) + counts.back());
    SP_RETURN_IF_ERROR(MpiStatus(MPI_Gatherv(SendPtr(mine), static_cast<int>(mine.size()), MPI_BYTE,
                                             rank_ == root ? buffer.data() : nullptr, counts.data(),
                                             displs.data(), MPI_BYTE, root, comm_),
                                 "MPI_Gatherv"));
    if (rank_ != root) return OkStatus();
    if (all == nullptr) return InvalidArgumentError("Gather: null output on root");
    Split(buffer, counts, displs, all);
    return OkStatus();
  }

  Status Broadcast(std::string* data, int root) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    std::string scratch;  // take part even on a null `data`, so peers do not hang
    std::string* target = data != nullptr ? data : &scratch;
    uint64_t size = target->size();
    SP_RETURN_IF_ERROR(
        MpiStatus(MPI_Bcast(&size, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast (size)"));
    if (rank_ != root) target->resize(size);
    for (uint64_t pos = 0; pos < size; pos += kBroadcastChunk) {
      const int count = static_cast<int>(std::min(kBroadcastChunk, size - pos));
      SP_RETURN_IF_ERROR(
          MpiStatus(MPI_Bcast(target->data() + pos, count, MPI_BYTE, root, comm_), "MPI_Bcast"));
    }
    return data != nullptr ? OkStatus() : InvalidArgumentError("Broadcast: null data");
  }

  Status Barrier() override { return MpiStatus(MPI_Barrier(comm_), "MPI_Barrier"); }

  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    // Sizes first (every rank learns its incoming sizes), then one Alltoallv.
    // A rank with bad arguments still takes part, sending UINT64_MAX sizes so
    // that every rank fails the same way instead of hanging.
    const bool bad = static_cast<int>(send.size()) != size_ || recv == nullptr;
    std::vector<uint64_t> out_sizes(size_, bad ? UINT64_MAX : 0), in_sizes(size_);
    for (int r = 0; !bad && r < size_; ++r) out_sizes[r] = send[r].size();
    SP_RETURN_IF_ERROR(MpiStatus(
        MPI_Alltoall(out_sizes.data(), 1, MPI_UINT64_T, in_sizes.data(), 1, MPI_UINT64_T, comm_),
        "MPI_Alltoall (sizes)"));
    uint64_t out_total = 0, in_total = 0;
    bool any_bad = bad;
    for (int r = 0; r < size_; ++r) {
      any_bad = any_bad || in_sizes[r] == UINT64_MAX;
      if (!any_bad) out_total += out_sizes[r], in_total += in_sizes[r];
    }
    int local_err = any_bad ? 1 : (out_total > kMaxCount || in_total > kMaxCount) ? 2 : 0, err = 0;
    SP_RETURN_IF_ERROR(
        MpiStatus(MPI_Allreduce(&local_err, &err, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce"));
    if (err == 1) {
      return InvalidArgumentError(
          "AllToAll: a rank passed bad arguments (one payload per rank "
          "and an output)");
    }
    if (err == 2) {
      return InvalidArgumentError("AllToAll over MPI: a rank sends or receives over " +
                                  std::to_string(kMaxCount) + " bytes; MPI counts are 32-bit");
    }
    std::vector<int> scounts(size_), sdispls(size_), rcounts(size_), rdispls(size_);
    std::string out, in(in_total, '\0');
    out.reserve(out_total);
    for (int r = 0, sd = 0, rd = 0; r < size_; ++r) {
      scounts[r] = static_cast<int>(out_sizes[r]), sdispls[r] = sd, sd += scounts[r];
      rcounts[r] = static_cast<int>(in_sizes[r]), rdispls[r] = rd, rd += rcounts[r];
      out += send[r];
    }
    SP_RETURN_IF_ERROR(
        MpiStatus(MPI_Alltoallv(out.data(), scounts.data(), sdispls.data(), MPI_BYTE, in.data(),
                                rcounts.data(), rdispls.data(), MPI_BYTE, comm_),
                  "MPI_Alltoallv"));
    Split(in, rcounts, rdispls, recv);
    return OkStatus();
  }

 private:
  Status CheckRoot(int root) const {
    if (root < 0 || root >= size_) {
      return InvalidArgumentError("root " + std::to_string(root) + " out of range for " +
                                  std::to_string(size_) + " ranks");
    }
    return OkStatus();
  }

  // All-gathers the payload sizes and lays them out back to back.
  Status ExchangeSizes(std::string_view mine, const char* op, std::vector<int>* counts,
                       std::vector<int>* displs) {
    uint64_t my_size = mine.size();
    std::vector<uint64_t> sizes(size_);
    SP_RETURN_IF_ERROR(
        MpiStatus(MPI_Allgather(&my_size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, comm_),
                  "MPI_Allgather (sizes)"));
    counts->resize(size_);
    displs->resize(size_);
    uint64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      (*displs)[r] = static_cast<int>(total);
      (*counts)[r] = static_cast<int>(sizes[r]);
      total += sizes[r];
      if (sizes[r] > kMaxCount || total > kMaxCount) {
        return InvalidArgumentError(std::string(op) + " over MPI: payloads total over " +
                                    std::to_string(kMaxCount) + " bytes (rank " +
                                    std::to_string(r) + " sends " + std::to_string(sizes[r]) +
                                    "); MPI counts are 32-bit");
      }
    }
    return OkStatus();
  }

  void Split(const std::string& buffer, const std::vector<int>& counts,
             const std::vector<int>& displs, std::vector<std::string>* all) const {
    all->resize(size_);
    for (int r = 0; r < size_; ++r) (*all)[r].assign(buffer, displs[r], counts[r]);
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
};

}  // namespace
}  // namespace internal_comm

std::unique_ptr<Comm> MakeMpiComm(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return nullptr;
  MPI_Comm dup;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return nullptr;
  int rank = 0, size = 0;
  if (MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_rank(dup, &rank) != MPI_SUCCESS || MPI_Comm_size(dup, &size) != MPI_SUCCESS) {
    MPI_Comm_free(&dup);
    return nullptr;
  }
  return std::make_unique<internal_comm::MpiComm>(dup, rank, size);
}

}  // namespace shardpoint

#endif  // SHARDPOINT_HAVE_MPI
