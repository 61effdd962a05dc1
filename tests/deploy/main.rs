//! The server binary as operators and real clients meet it: the official `openai` package and a
//! vLLM-Omni-style `websockets` client (Python, from `.venv-clients`), and two instances behind
//! nginx, one drained mid-run. These tests fail, rather than skip, when their set-up is missing:
//! run `scripts/setup.sh` first.

mod clients;
mod haproxy;
mod image;
mod kubernetes;
mod nginx;
mod prometheus;
// Shared with the other test crates (their HTTP helper included).
#[allow(dead_code)]
mod process;
