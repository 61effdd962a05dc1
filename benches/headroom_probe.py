"""Reads a server's headroom as a balancer does, every INTERVAL seconds for SECONDS: one
connection to the agent-check port (HAProxy's agent protocol) and one GET /metrics each time.
Prints the round trips' p50/p99 and the range of `speechstream_capacity_usage` and of the agent's
lines seen.

    python3 benches/headroom_probe.py HTTP_PORT AGENT_PORT SECONDS [INTERVAL]
"""
import socket
import sys
import time
import urllib.request

http_port, agent_port, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
agent_s, metrics_s, usages, lines = [], [], [], []
end = time.time() + seconds
while time.time() < end:
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", agent_port)) as s:
        line = s.recv(200).decode().strip()
    agent_s.append(time.perf_counter() - t)
    lines.append(line)
    t = time.perf_counter()
    body = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics").read().decode()
    metrics_s.append(time.perf_counter() - t)
    usages += [float(l.split()[1]) for l in body.splitlines() if l.startswith("speechstream_capacity_usage ")]
    time.sleep(interval)


def q(xs, p):
    return sorted(xs)[int(p * (len(xs) - 1))] * 1e3


weights = sorted({int(l.split()[-1].rstrip("%")) for l in lines if l.startswith("up ready")})
print(
    f"reads {len(agent_s)}; agent round trip p50 {q(agent_s, .5):.2f} ms p99 {q(agent_s, .99):.2f} ms; "
    f"/metrics p50 {q(metrics_s, .5):.2f} ms p99 {q(metrics_s, .99):.2f} ms; "
    f"usage {min(usages):.2f}-{max(usages):.2f} (median {sorted(usages)[len(usages) // 2]:.2f}); "
    f"agent weights {weights[0] if weights else '-'}-{weights[-1] if weights else '-'}%, "
    f"other lines {sorted(set(l for l in lines if not l.startswith('up ready')))}"
)
