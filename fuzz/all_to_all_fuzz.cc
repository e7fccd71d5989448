// libFuzzer target for the framing of Comm::AllToAll's default (the
// AllGather-based exchange every Comm without its own AllToAll uses): rank 0
// of a 3-rank group receives the input split at its first two bytes' offsets
// as the other ranks' gathered payloads, and must either get its parts or a
// typed error, never read past a payload.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/comm.h"

namespace {

class ScriptedComm : public shardpoint::Comm {
 public:
  explicit ScriptedComm(std::vector<std::string> others) : others_(std::move(others)) {}
  int rank() const override { return 0; }
  int size() const override { return 3; }
  shardpoint::Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    all->assign(1, std::string(mine));
    for (const std::string& o : others_) all->push_back(o);
    return shardpoint::OkStatus();
  }
  shardpoint::Status Gather(std::string_view, int, std::vector<std::string>*) override {
    return shardpoint::InternalError("not used");
  }
  shardpoint::Status Broadcast(std::string*, int) override {
    return shardpoint::InternalError("not used");
  }
  shardpoint::Status Barrier() override { return shardpoint::OkStatus(); }

 private:
  std::vector<std::string> others_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
  size_t cut = data[0] % (in.size() + 1);
  size_t cut2 = cut + data[1] % (in.size() - cut + 1);
  ScriptedComm comm({std::string(in.substr(0, cut)), std::string(in.substr(cut, cut2 - cut))});
  std::vector<std::string> recv;
  shardpoint::Status s = comm.AllToAll({"to0", "to1", "to2"}, &recv);
  if (s.ok() && (recv.size() != 3 || recv[0] != "to0")) std::abort();
  return 0;
}
