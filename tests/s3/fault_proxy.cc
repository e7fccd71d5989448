#include "tests/s3/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace shardpoint::testing {
namespace {

int ConnectLocal(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void Reset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

// Reads one request (headers, then Content-Length bytes of body); false at
// EOF or error.
bool ReadRequest(int fd) {
  std::string head;
  char c;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (::read(fd, &c, 1) != 1) return false;
    head.push_back(c);
  }
  size_t length = 0;
  for (const char* name : {"Content-Length:", "content-length:"}) {
    const size_t at = head.find(name);
    if (at != std::string::npos) length = std::strtoull(head.c_str() + at + 15, nullptr, 10);
  }
  char buf[65536];
  while (length > 0) {
    const ssize_t r = ::read(fd, buf, std::min(length, sizeof(buf)));
    if (r <= 0) return false;
    length -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

FaultProxy::FaultProxy(int upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  ::listen(listen_fd_, 64);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  for (std::thread& t : workers_) t.join();
}

void FaultProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    ++connections;
    if (reset_connections.fetch_sub(1) > 0) {
      Reset(fd);
      continue;
    }
    reset_connections.fetch_add(1);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FaultProxy::Serve(int fd) {
  if (fail_requests.fetch_sub(1) > 0) {
    if (ReadRequest(fd)) {
      const std::string body =
          "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>injected</Message></Error>";
      const std::string reply =
          "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
          "Connection: close\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] ssize_t w = ::write(fd, reply.data(), reply.size());
    }
    ::close(fd);
    return;
  }
  fail_requests.fetch_add(1);
  const int up = black_hole ? -1 : ConnectLocal(upstream_port_);
  pollfd fds[2] = {{fd, POLLIN, 0}, {up, POLLIN, 0}};
  char buf[65536];
  while (!stop_) {
    if (::poll(fds, up < 0 ? 1 : 2, 100) <= 0) continue;
    if (up < 0) {  // black hole: swallow, never answer
      if (::read(fd, buf, sizeof(buf)) <= 0) break;
      continue;
    }
    bool closed = false;
    for (int i = 0; i < 2 && !closed; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t r = ::read(fds[i].fd, buf, sizeof(buf));
      if (r <= 0) {
        closed = true;
        break;
      }
      for (ssize_t off = 0; off < r;) {
        const ssize_t w = ::write(fds[1 - i].fd, buf + off, static_cast<size_t>(r - off));
        if (w <= 0) {
          closed = true;
          break;
        }
        off += w;
      }
    }
    if (closed) break;
  }
  if (up >= 0) ::close(up);
  ::close(fd);
}

}  // namespace shardpoint::testing
