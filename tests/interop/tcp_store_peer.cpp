// tests/interop/tcp_store_peer.cpp — lockstep's side of the PyTorch TCPStore
// interop check (tests/interop/check_torch_tcpstore.sh drives it with
// tests/interop/torch_tcpstore.py on the other side):
//   tcp_store_peer serve PORT_FILE   host a store (free port written to PORT_FILE),
//                                    set ls/hello, wait for py/done, check py/*
//   tcp_store_peer client HOST PORT  join a PyTorch-hosted store and run every
//                                    Store call against it, then set ls/done
// Each step prints one line; any mismatch is an ls::Error and exit 1.
// Read before: distributed/store/tcp_store.h (Note [TCPStore protocol]).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"
#include "distributed/store/tcp_store.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

void expect(bool ok, const std::string& what) {
  LS_CHECK(ok, "tcp_store_peer: ", what);
  std::printf("lockstep: %s: ok\n", what.c_str());
  std::fflush(stdout);
}

std::string str(const dist::Bytes& b) { return std::string(b.begin(), b.end()); }
dist::Bytes bytes(const std::string& s) { return dist::Bytes(s.begin(), s.end()); }

int serve(const std::string& port_file) {
  dist::TCPStore s("127.0.0.1", 0, /*is_master=*/true, 60s);
  std::ofstream out(port_file);
  out << s.port() << "\n";
  out.close();
  LS_CHECK(out.good(), "cannot write the port to '", port_file, "' (does its directory exist?)");
  s.set("ls/hello", std::string("from-lockstep"));
  s.wait({"py/done"});
  expect(s.get_string("py/key") == "from-python", "server: PyTorch's set('py/key') reads back");
  expect(s.get_string("shared/count") == "7", "server: PyTorch's add('shared/count') is a decimal counter");
  expect(!s.check({"py/cas"}), "server: PyTorch's delete_key('py/cas') removed it");
  return 0;
}

int client(const std::string& host, int port) {
  dist::TCPStore s(host, port, /*is_master=*/false, 30s);
  expect(s.get_string("py/key") == "from-python", "client: get of a key PyTorch set");
  s.set("ls/key", std::string("from-lockstep"));
  expect(s.add("shared/count", 5) == 5 && s.add("shared/count", 2) == 7, "client: add");
  expect(str(s.compare_set("ls/cas", {}, bytes("first"))) == "first", "client: compare_set on an absent key");
  expect(str(s.compare_set("ls/cas", bytes("wrong"), bytes("x"))) == "first", "client: compare_set mismatch");
  expect(s.check({"py/key"}) && !s.check({"py/absent"}), "client: check");
  std::string error;
  try {
    s.wait({"py/key", "py/absent"}, 300ms);
  } catch (const ls::Error& e) {
    error = e.what();
  }
  expect(error.find("'py/absent'") != std::string::npos && error.find("'py/key'") == std::string::npos,
         "client: wait timeout names only the missing key");
  s.wait({"py/go"});
  expect(s.get_string("py/go") == "go", "client: wait for a key PyTorch sets later");
  s.set("ls/tmp", std::string("t"));
  expect(s.delete_key("ls/tmp") && !s.delete_key("ls/tmp"), "client: delete_key");
  expect(s.num_keys() >= 5, "client: num_keys");
  s.set("ls/done", std::string("1"));
  return 0;
}

// PORT as a TCP port number; throws naming it when it is not one.
int parse_port(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 5 && text.find_first_not_of("0123456789") == std::string::npos;
  const int port = digits ? std::stoi(text) : 0;
  LS_CHECK(port >= 1 && port <= 65535, "PORT '", text, "' is not a TCP port (1..65535)");
  return port;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "serve" && argc == 3) return serve(argv[2]);
    if (mode == "client" && argc == 4) return client(argv[2], parse_port(argv[3]));
    std::fprintf(stderr, "usage: %s serve PORT_FILE | client HOST PORT\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tcp_store_peer: %s\n", e.what());
    return 1;
  }
}
