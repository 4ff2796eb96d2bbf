// SPDX-License-Identifier: Apache-2.0
// A UDP socket on 127.0.0.1 with a port the kernel picks, for tests that
// play a peer (an aggregator, a rank) by hand. Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tributary::testing {

// The socket (or -1), its address in *bound, and receives that give up
// after `timeout` (a missing datagram fails a test, never hangs it).
inline int LoopbackUdpSocket(sockaddr_in* bound, timeval timeout) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  *bound = sockaddr_in{};
  bound->sin_family = AF_INET;
  bound->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(*bound);
  if (bind(fd, reinterpret_cast<sockaddr*>(bound), sizeof(*bound)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(bound), &len) != 0) {
    close(fd);
    return -1;
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

}  // namespace tributary::testing
