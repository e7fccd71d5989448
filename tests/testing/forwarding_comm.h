// A Comm that forwards every call to another one: tests derive from it and
// override only the calls they count or change (as StorageWrapper for a
// Storage). It is neither a MemoryTransport nor a ViewAllToAll, so a load
// over it moves its exchange payloads as strings through AllToAll.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint::testing {

class ForwardingComm : public Comm {
 public:
  explicit ForwardingComm(Comm& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    return inner_.AllGather(mine, all);
  }
  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    return inner_.Gather(mine, root, all);
  }
  Status Broadcast(std::string* data, int root) override { return inner_.Broadcast(data, root); }
  Status Barrier() override { return inner_.Barrier(); }
  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    return inner_.AllToAll(send, recv);
  }

 protected:
  Comm& inner() const { return inner_; }

 private:
  Comm& inner_;
};

}  // namespace shardpoint::testing
