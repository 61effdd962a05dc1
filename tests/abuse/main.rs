//! One client trying to take the server down (issue 9): each test plays one abuse over real
//! sockets on loopback, then checks that the server let go of what it held (connections,
//! engine requests) and still serves a normal client. Assertions are on counts, not times. The
//! Wyoming door (issue 14) gets the same treatment in `wyoming`.

mod access;
mod framing;
mod handshake;
mod http;
mod memory;
mod peers;
mod sockets;
mod stalls;
mod wyoming;
// The server as a child process (tests/deploy's), for the descriptor-limit tests.
#[allow(dead_code)]
#[path = "../deploy/process.rs"]
mod process;
// The wire tests' server and clients; not every helper is used here.
#[allow(dead_code)]
#[path = "../wire/support.rs"]
mod support;
