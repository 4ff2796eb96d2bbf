// SPDX-License-Identifier: Apache-2.0
// Framed rank -> parent reports over a pipe; see report_channel.h.
#include "tools/tributary/report_channel.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tributary::cli {
namespace {

bool WriteAll(int fd, const void* data, size_t length) {
  const char* p = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t n = ::write(fd, p, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    length -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool WriteReport(int fd, ReportKind kind, const void* payload, size_t length) {
  ReportHeader header{static_cast<uint32_t>(kind), static_cast<uint32_t>(length)};
  // One buffer, one write when it fits: frames up to PIPE_BUF arrive whole.
  std::string frame(sizeof(header) + length, '\0');
  std::memcpy(frame.data(), &header, sizeof(header));
  if (length > 0) std::memcpy(frame.data() + sizeof(header), payload, length);
  return WriteAll(fd, frame.data(), frame.size());
}

bool ReportReader::ReadFrom(int fd) {
  char chunk[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(chunk)) return true;
      continue;
    }
    if (n == 0) return false;  // EOF: the rank closed its end or exited
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

bool ReportReader::Next(Frame* frame) {
  const size_t available = buffer_.size() - consumed_;
  if (available < sizeof(ReportHeader)) return false;
  ReportHeader header;
  std::memcpy(&header, buffer_.data() + consumed_, sizeof(header));
  if (available < sizeof(header) + header.length) return false;
  frame->kind = static_cast<ReportKind>(header.kind);
  frame->payload.assign(buffer_.data() + consumed_ + sizeof(header), header.length);
  consumed_ += sizeof(header) + header.length;
  // Compact once the consumed prefix dominates, so the buffer stays small.
  if (consumed_ > 64 * 1024 && consumed_ * 2 > buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return true;
}

}  // namespace tributary::cli
