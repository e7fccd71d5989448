// A TCP proxy on 127.0.0.1 that stands between an S3 client and the server
// and misbehaves on request: resets new connections, answers requests with
// 503 SlowDown without forwarding them, or accepts and never answers. For
// the object-store tests' fault cases. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace shardpoint::testing {

class FaultProxy {
 public:
  // Forwards to upstream_port on 127.0.0.1. Listens on a free port.
  explicit FaultProxy(int upstream_port);
  ~FaultProxy();
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The next n new connections are reset (RST) as soon as accepted.
  std::atomic<int> reset_connections{0};
  // The next n requests get "503 SlowDown" (Connection: close), unforwarded.
  std::atomic<int> fail_requests{0};
  // Every connection is accepted and then never answered.
  std::atomic<bool> black_hole{false};
  std::atomic<int> connections{0};

 private:
  void AcceptLoop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  const int upstream_port_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace shardpoint::testing
