#include "src/io/resources.h"

#include <algorithm>

namespace shardpoint::internal_io {

CallResources::CallResources(const Resources& r, int io_threads)
    : storage_(r.storage ? r.storage : DefaultStorage()),
      shared_(r.pool),
      io_threads_(std::max(1, io_threads > 0 ? io_threads : r.io_threads)),
      log_(&r.log) {}

ThreadPool* CallResources::pool(int threads) {
  if (shared_) return shared_;
  if (!owned_) owned_ = std::make_unique<ThreadPool>(threads > 0 ? threads : io_threads_);
  return owned_.get();
}

void CallResources::Log(const std::string& line) const {
  if (*log_) (*log_)(line);
}

void InheritUnset(const Resources& from, Resources* to) {
  if (!to->storage) to->storage = from.storage;
  if (!to->pool) to->pool = from.pool;
  if (!to->log) to->log = from.log;
}

}  // namespace shardpoint::internal_io
