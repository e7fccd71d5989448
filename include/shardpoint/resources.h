// Resources: what a shardpoint call works with besides its arguments, passed
// in by the caller, never global: where files live (Storage), the threads
// that do parallel I/O (ThreadPool), and where log lines go.
//
// Every options struct of an entry point is a Resources (SaveOptions,
// LoadOptions, DescribeOptions, VerifyOptions, DiffOptions, ExportHfOptions,
// HfOptions, HfWriteOptions, ManagerOptions; HfLoadOptions through its
// LoadOptions `load`; ReadHfMapping takes one), so one Resources can be set
// up once and copied into each:
//
//   shardpoint::ThreadPool pool(8);
//   shardpoint::Resources res;
//   res.pool = &pool;                      // every call below shares 8 threads
//   shardpoint::SaveOptions so;
//   static_cast<shardpoint::Resources&>(so) = res;
//   shardpoint::VerifyOptions vo;
//   static_cast<shardpoint::Resources&>(vo) = res;
//
// The defaults, applied the same way by every entry point:
//   storage     nullptr = DefaultStorage() (POSIX files)
//   pool        nullptr = a pool of io_threads threads made for the call and
//               joined before it returns (diff, export and the conversions,
//               whose calling thread works too, make io_threads - 1)
//   io_threads  4; not used when `pool` is set (the pool's size bounds the
//               parallel work of every call that shares it)
//   log         empty = silent
// Storage, pool and log must outlive the call (for an AsyncSaver: the save).
#pragma once

#include <functional>
#include <string>

#include "shardpoint/storage.h"
#include "shardpoint/thread_pool.h"

namespace shardpoint {

struct Resources {
  // Where files are read and written. Default: nullptr = DefaultStorage().
  Storage* storage = nullptr;
  // Threads for parallel reads, writes and checksums, shareable by any number
  // of calls (thread_pool.h). Default: nullptr = a pool made for the call.
  ThreadPool* pool = nullptr;
  // The size of the pool a call makes when `pool` is not set. Default 4.
  int io_threads = 4;
  // One line per event worth a log (a save committed or failed, a load
  // finished, a verify or export done), without a trailing newline; called on
  // rank 0 only for collective calls, from the thread running the call.
  // Default: empty = silent.
  std::function<void(const std::string&)> log = nullptr;
};

}  // namespace shardpoint
