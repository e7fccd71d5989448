#include "src/checkpoint/cooperative_exchange.h"

#include "src/comm/agreed.h"

namespace shardpoint::internal_checkpoint {

void SendBuffers::Init(int n, bool raw) {
  raw_ = raw;
  if (raw) {
    raws_.resize(static_cast<size_t>(n));
  } else {
    strings_.resize(static_cast<size_t>(n));
  }
}

char* SendBuffers::Resize(int r, uint64_t n) {
  if (raw_) return raws_[static_cast<size_t>(r)].Resize(n);
  std::string& s = strings_[static_cast<size_t>(r)];
  s.resize(n);
  return s.data();
}

Status SendBuffers::ExchangeViews(
    internal_comm::ViewAllToAll& comm, const Status& local,
    const std::function<Status(const std::vector<std::string_view>&)>& place, Status* placed) {
  std::string failure;
  std::vector<std::string_view> send(raws_.size());
  if (!local.ok()) failure = internal_comm::FailurePayload(local);
  for (size_t r = 0; r < raws_.size(); ++r) {
    if (!local.ok()) {
      send[r] = failure;
      continue;
    }
    internal_io::RawBuffer& b = raws_[r];
    if (b.size() == 0) b.Resize(1);
    b.data()[0] = '\0';
    send[r] = std::string_view(b.data(), b.size());
  }
  return comm.AllToAllViews(send, [&](const std::vector<std::string_view>& recv) {
    SP_RETURN_IF_ERROR(internal_comm::AgreedPayloads(recv));
    *placed = place(recv);
    return OkStatus();
  });
}

}  // namespace shardpoint::internal_checkpoint
