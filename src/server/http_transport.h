// cpp-httplib (Debian's libcpp-httplib, 0.11) with one addition the library lacks: a handler can
// ask whether its client has gone away (peer_closed()), so that a request is cancelled when its
// client disconnects, streaming or not. The server runs each connection on one pool thread; this
// subclass serves connections itself (the same keep-alive loop as the library's) so that the
// thread knows its socket. Owns nothing beyond httplib::Server.
#pragma once

#include <httplib.h>

namespace dsv41::server {

class HttpTransport : public httplib::Server {
 public:
  HttpTransport() = default;
  // On a handler's thread: true once the client closed its side (or the connection broke).
  // Bytes the client sent after its request (a pipelined request) do not count as closed.
  static bool peer_closed();

 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace dsv41::server
