#include "src/checkpoint/cooperative_exchange.h"

#include <algorithm>

#include "src/comm/agreed.h"

namespace shardpoint::internal_checkpoint {

void SendBuffers::Init(int n, uint64_t raw_bytes) {
  raw_ = raw_bytes > 0;
  if (!raw_) {
    strings_.resize(static_cast<size_t>(n));
    return;
  }
  // Allocated once; Layout grows it only past raw_bytes.
  if (all_.capacity() < raw_bytes) all_.Resize(raw_bytes);
  at_.assign(static_cast<size_t>(n) + 1, 0);
}

void SendBuffers::Layout(const std::vector<uint64_t>& sizes) {
  if (!raw_) {
    for (size_t r = 0; r < sizes.size(); ++r) strings_[r].resize(sizes[r]);
    return;
  }
  at_.assign(sizes.size() + 1, 0);
  for (size_t r = 0; r < sizes.size(); ++r) at_[r + 1] = at_[r] + sizes[r];
  const size_t keep = all_.capacity();
  all_.Resize(std::max<size_t>(keep, at_.back()));
}

Status SendBuffers::ExchangeViews(
    internal_comm::ViewAllToAll& comm, const Status& local,
    const std::function<Status(const std::vector<std::string_view>&)>& place, Status* placed) {
  std::string failure;
  const size_t n = at_.size() - 1;
  // Every payload holds its status byte once Layout ran (the round was read).
  Status mine = local;
  for (size_t r = 0; r < n && mine.ok(); ++r) {
    if (at_[r + 1] == at_[r])
      mine = InternalError("cooperative load: a payload without its layout");
  }
  std::vector<std::string_view> send(n);
  if (!mine.ok()) failure = internal_comm::FailurePayload(mine);
  for (size_t r = 0; r < n; ++r) {
    if (!mine.ok()) {
      send[r] = failure;
      continue;
    }
    all_.data()[at_[r]] = '\0';
    send[r] = std::string_view(all_.data() + at_[r], at_[r + 1] - at_[r]);
  }
  return comm.AllToAllViews(send, [&](const std::vector<std::string_view>& recv) {
    SP_RETURN_IF_ERROR(internal_comm::AgreedPayloads(recv));
    *placed = place(recv);
    return OkStatus();
  });
}

}  // namespace shardpoint::internal_checkpoint
