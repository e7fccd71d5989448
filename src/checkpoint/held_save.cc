#include "src/checkpoint/held_save.h"

#include <vector>

#include "src/base/guard.h"
#include "src/checkpoint/commit.h"
#include "src/comm/agreed.h"

namespace shardpoint::internal_checkpoint {

using internal_base::Guarded;
using internal_comm::GatherAgreed;

HeldSave::HeldSave(Storage* storage, const std::string& dir, bool overwrite, int rank)
    : held_(internal_io::FindHeldCompletes(storage, dir)),
      storage_(storage),
      dir_(dir),
      overwrite_(overwrite),
      rank_(rank) {}

HeldSave::~HeldSave() {
  if (holding_) held_->ReleaseCompletes(dir_, false).IgnoreError();
  if (prepared_.valid()) prepared_.wait();  // no removal runs on after the save
}

void HeldSave::Start() {
  held_->HoldCompletes(dir_);
  holding_ = true;
  if (rank_ != 0) return;
  prepared_ = std::async(std::launch::async, [storage = storage_, dir = dir_, o = overwrite_] {
    return Guarded("preparing '" + dir + "'", [&] { return PrepareDirectory(storage, dir, o); })
        .status();
  });
}

Status HeldSave::Settle(Comm& comm, Status* gathered, std::string* write_dir_out) {
  std::string complete = "0";
  if (rank_ == 0) {
    const Status verdict = prepared_.get();
    if (verdict.ok()) {
      *write_dir_out = dir_;
    } else {  // as AgreeOnWriteDir's broadcast named it
      *gathered = Status(verdict.code(), "rank 0: " + verdict.message());
    }
    if (gathered->ok()) complete = "1";
  }
  SP_RETURN_IF_ERROR(comm.Broadcast(&complete, 0));
  holding_ = false;
  const Status released = held_->ReleaseCompletes(dir_, complete == "1");
  if (complete != "1") return OkStatus();
  std::vector<std::string> none;
  const Status agreed = GatherAgreed(comm, released, "", 0, &none);
  if (rank_ != 0) return agreed;  // the exchange's status
  if (!agreed.ok()) *gathered = agreed;
  return OkStatus();
}

}  // namespace shardpoint::internal_checkpoint
