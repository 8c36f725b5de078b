// Connection handling for HttpTransport (see http_transport.h): a Stream over the socket with the
// server's read/write timeouts, and the keep-alive loop, as the library does internally.
#include "server/http_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dsv41::server {
namespace {

thread_local socket_t current_socket = INVALID_SOCKET;

// Waits up to `ms` for `events`; > 0 when ready.
int wait_socket(socket_t sock, short events, int ms) {
  pollfd p{sock, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, ms);
  } while (r < 0 && errno == EINTR);
  return r;
}

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

class SocketStream final : public httplib::Stream {
 public:
  SocketStream(socket_t sock, int read_ms, int write_ms) : sock_(sock), read_ms_(read_ms), write_ms_(write_ms) {}

  bool is_readable() const override { return off_ < len_ || wait_socket(sock_, POLLIN, read_ms_) > 0; }
  bool is_writable() const override { return wait_socket(sock_, POLLOUT, write_ms_) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ < len_) {
      const size_t n = std::min(size, len_ - off_);
      std::memcpy(ptr, buf_ + off_, n);
      off_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!is_readable()) return -1;
    if (size < sizeof buf_) {
      ssize_t n;
      do {
        n = ::recv(sock_, buf_, sizeof buf_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
      return read(ptr, size);
    }
    ssize_t n;
    do {
      n = ::recv(sock_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  socket_t socket() const override { return sock_; }
  bool has_buffered() const { return off_ < len_; }

 private:
  void address(bool local, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int r = local ? ::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len)
                        : ::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len);
    if (r != 0) return;
    char host[NI_MAXHOST];
    char serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  socket_t sock_;
  int read_ms_, write_ms_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

}  // namespace

bool HttpTransport::peer_closed() {
  if (current_socket == INVALID_SOCKET) return false;
  pollfd p{current_socket, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(current_socket, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

bool HttpTransport::process_and_close_socket(socket_t sock) {
  current_socket = sock;
  SocketStream stream(sock, to_ms(read_timeout_sec_, read_timeout_usec_), to_ms(write_timeout_sec_, write_timeout_usec_));
  bool ok = false;
  // Keep-alive: serve requests while the server runs, the count lasts and the client sends
  // another request within the keep-alive timeout (checked in short slices so stop() is quick).
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    bool readable = stream.has_buffered();  // bytes of a pipelined request
    for (time_t waited = 0; !readable && waited < keep_alive_timeout_sec_ * 1000 && svr_sock_ != INVALID_SOCKET;
         waited += 100)
      readable = wait_socket(sock, POLLIN, 100) > 0;
    if (!readable) break;
    bool closed = false;
    ok = process_request(stream, left == 1, closed, nullptr);
    if (!ok || closed) break;
  }
  current_socket = INVALID_SOCKET;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace dsv41::server
