#!/usr/bin/env python3
"""Reads peers.json and Keysmith's benchmark outputs, prints a Markdown table with ratios, and
draws docs/benchmarks-peers.png."""
import json, re, sys

peers = json.load(open(sys.argv[1]))
vault = open(sys.argv[2]).read()
secret_service = open(sys.argv[3]).read()
policy = open(sys.argv[4]).read()
png = sys.argv[5]

def number(pattern, text):
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None

vault_read_us = number(r"== 1000 items ==[\s\S]*?read one item: median ([0-9.]+) µs", vault)
vault_write_us = number(r"== 1000 items ==[\s\S]*?durable write of one item: median ([0-9.]+) µs", vault)
ks_ss_reads = number(r"Keysmith reads: ([0-9.]+)/s", secret_service)
ks_ss_writes = number(r"Keysmith writes \(update\): ([0-9.]+)/s", secret_service)
engine = number(r"policy language: ([0-9.]+) million", policy)

rows = []
def row(what, peer, peer_value, keysmith_value, unit):
    if peer_value and keysmith_value:
        rows.append((what, peer, peer_value, keysmith_value, keysmith_value / peer_value, unit))

cf = peers.get("cryptfile", {})
row("reads", "keyrings.cryptfile (default KDF)", cf.get("reads_per_s_default_kdf"), 1e6 / vault_read_us if vault_read_us else None, "/s")
row("reads", "keyrings.cryptfile (KDF turned down)", cf.get("reads_per_s_kdf_down"), 1e6 / vault_read_us if vault_read_us else None, "/s")
row("writes", "keyrings.cryptfile (KDF turned down)", cf.get("writes_per_s_kdf_down"), 1e6 / vault_write_us if vault_write_us else None, "/s")
ps = peers.get("pass", {})
row("reads", "pass (gpg)", ps.get("reads_per_s"), 1e6 / vault_read_us if vault_read_us else None, "/s")
row("writes", "pass (gpg)", ps.get("writes_per_s"), 1e6 / vault_write_us if vault_write_us else None, "/s")
kss = peers.get("keyring_secret_service", {})
row("Secret Service reads", "python keyring", kss.get("reads_per_s"), ks_ss_reads, "/s")
row("Secret Service writes", "python keyring", kss.get("writes_per_s"), ks_ss_writes, "/s")
st = peers.get("secret_tool", {})
row("Secret Service reads", "secret-tool", st.get("reads_per_s"), ks_ss_reads, "/s")
row("Secret Service writes", "secret-tool", st.get("writes_per_s"), ks_ss_writes, "/s")
cd = peers.get("cedarpy", {})
row("policy decisions", "cedarpy (batch)", cd.get("decisions_per_s"), engine * 1e6 if engine else None, "/s")
cb = peers.get("casbin", {})
row("policy decisions", "casbin", cb.get("decisions_per_s"), engine * 1e6 if engine else None, "/s")

print("| operation | peer | peer | Keysmith | Keysmith ÷ peer |")
print("|---|---|---|---|---|")
for what, peer, peer_value, keysmith_value, ratio, unit in rows:
    print(f"| {what} | {peer} | {peer_value:,.1f}{unit} | {keysmith_value:,.0f}{unit} | {ratio:,.1f}× |")
wrong = {name: value.get("wrong", value.get("wrong_on_exhaustive_cases")) for name, value in peers.items() if isinstance(value, dict)}
print(f"\nwrong values read back: {wrong}")
errors = {k: v for k, v in peers.items() if k.endswith("_error")}
if errors:
    print(f"peers that could not run: {errors}")

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
labels = [f"{what}\n{peer}" for what, peer, *_ in rows]
ratios = [ratio for *_, ratio, _ in rows]
figure, axis = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.2))
axis.barh(range(len(rows)), ratios, color="#3b7dd8")
axis.set_xscale("log")
axis.set_yticks(range(len(rows)))
axis.set_yticklabels(labels, fontsize=8)
axis.invert_yaxis()
axis.axvline(1, color="black", linewidth=0.8)
for index, ratio in enumerate(ratios):
    axis.text(ratio, index, f" {ratio:,.1f}×", va="center", fontsize=8)
axis.set_xlabel("Keysmith ÷ peer (higher is faster for Keysmith; log scale)")
axis.set_title("Keysmith beside its peers, same machine, same run")
figure.tight_layout()
figure.savefig(png, dpi=110)
