#!/usr/bin/env python3
"""Drives ReportService with 64 concurrent clients (4 processes of 16 threads, keep-alive
connections) while another process revokes client-0's reports:read; prints requests per second,
latency p50/p99, and the time from the revocation to the first request the service denied.

  load.py --port 8080 --clients clients.json --seconds 20 -- keysmith token revoke … reports:read

Figures only: it asserts nothing but correctness (no other client denied, client-0 denied from
its first denial on)."""
import argparse, http.client, json, multiprocessing, subprocess, threading, time


def worker(args):
    port, callers, stop_at = args
    results = []
    lock = threading.Lock()

    def run(caller):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"X-Client": caller["client"], "Authorization": "Bearer " + caller["key"]}
        mine = []
        while time.monotonic() < stop_at:
            start = time.monotonic()
            try:
                connection.request("GET", "/reports/1", headers=headers)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0  # counted as a failure, never dropped
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            end = time.monotonic()
            mine.append((caller["client"], end, status, end - start))
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=run, args=(caller,)) for caller in callers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", required=True)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("revoke", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    callers = json.load(open(options.clients))[:64]
    revoke = [part for part in options.revoke if part != "--"]
    begin = time.monotonic()
    stop_at = begin + options.seconds
    groups = [(options.port, callers[index::4], stop_at) for index in range(4)]
    with multiprocessing.Pool(4) as pool:
        pending = pool.map_async(worker, groups)
        time.sleep(options.seconds / 2)
        revoke_start = time.monotonic()
        subprocess.run(revoke, check=True, stdout=subprocess.DEVNULL)
        revoke_end = time.monotonic()
        results = [result for group in pending.get() for result in group]
    latencies = sorted(result[3] for result in results)
    print(f"{len(callers)} clients, {options.seconds:.0f} s: {len(results) / options.seconds:.0f} requests/s, "
          f"p50 {latencies[len(latencies) // 2] * 1000:.2f} ms, p99 {latencies[int(len(latencies) * 0.99)] * 1000:.2f} ms")
    denied_others = [r for r in results if r[0] != "client-0" and r[2] != 200]
    failed = [r for r in results if r[2] == 0]
    silent = [c["client"] for c in callers if not any(r[0] == c["client"] and r[1] > revoke_end for r in results)]
    revoked = sorted(r for r in results if r[0] == "client-0")
    early = [r for r in revoked if r[2] != 200 and r[1] < revoke_start]
    first = next((r for r in revoked if r[2] == 403 and r[1] >= revoke_start), None)
    after = [r for r in revoked if first and r[1] > first[1] and r[2] != 403]
    print(f"revocation: the revoking process ran {(revoke_end - revoke_start) * 1000:.1f} ms; the first denied request ended "
          + (f"{(first[1] - revoke_start) * 1000:.1f} ms after it started, {(first[1] - revoke_end) * 1000:.1f} ms after it exited"
             if first else "never"))
    print(f"correctness: other clients denied {len(denied_others)}, client-0 denied before the revocation {len(early)}, "
          f"client-0 allowed after its first denial {len(after)}, failed requests {len(failed)}, "
          f"clients without a request after the revocation {len(silent)}")
    if denied_others or early or after or not first or failed or silent:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
