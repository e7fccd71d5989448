// A group of one: every collective is a local copy.
#include <string>

#include "shardpoint/comm.h"

namespace shardpoint {
namespace internal_comm {
namespace {

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    if (all == nullptr) return InvalidArgumentError("AllGather: null output");
    all->assign(1, std::string(mine));
    return OkStatus();
  }

  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    if (all == nullptr) return InvalidArgumentError("Gather: null output on root");
    all->assign(1, std::string(mine));
    return OkStatus();
  }

  Status Broadcast(std::string* data, int root) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    if (data == nullptr) return InvalidArgumentError("Broadcast: null data");
    return OkStatus();  // the root already holds the data
  }

  Status Barrier() override { return OkStatus(); }

 private:
  static Status CheckRoot(int root) {
    if (root != 0) {
      return InvalidArgumentError("root " + std::to_string(root) + " out of range for 1 rank");
    }
    return OkStatus();
  }
};

}  // namespace
}  // namespace internal_comm

std::unique_ptr<Comm> MakeSingleComm() { return std::make_unique<internal_comm::SingleComm>(); }

}  // namespace shardpoint
