#!/usr/bin/env python3
"""An independent decryptor for Keysmith vaults, format version 1, written from docs/format.md.

    decrypt_vault.py VAULT_DIR (--passphrase-env VAR | --keyfile FILE)

Prints one JSON object per live record (secrets base64-encoded), sorted by kind and names.
Needs the `cryptography` package for AES-GCM; scrypt and HMAC come from hashlib/hmac.
"""
import argparse, base64, hashlib, hmac, json, os, struct, sys, zlib

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PROTOCOLS = {"afp", "appletalk", "daap", "eppc", "ftp", "ftp-account", "ftp-proxy", "ftps", "http", "http-proxy",
             "https", "https-proxy", "imap", "imaps", "ipp", "irc", "ircs", "ldap", "ldaps", "nntp", "nntps", "pop3",
             "pop3s", "rtsp", "rtsp-proxy", "smb", "smtp", "socks", "ssh", "telnet", "telnets"}


def read_header(vault):
    for name in ("header", "header.backup"):
        try:
            data = open(os.path.join(vault, name), "rb").read()
        except FileNotFoundError:
            continue
        body, suffix = data[:-73], data[-73:]
        if suffix == b"\nsha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n":
            return json.loads(body)
    sys.exit("no intact header")


def kek_for(header, passphrase, keyfile):
    kdf = header["kdf"]
    salt = base64.b64decode(kdf["salt"])
    if kdf["type"] == "scrypt":
        return hashlib.scrypt(passphrase, salt=salt, n=kdf["n"], r=kdf["r"], p=kdf["p"], dklen=32,
                              maxmem=256 * 1024 * 1024)
    key = bytes.fromhex(open(keyfile).read().strip())
    return hmac.new(key, b"keysmith-vault-v1 keyfile-kek" + salt, hashlib.sha256).digest()


def unwrap(kek, vault_id, wrapped, purpose):
    ad = b"keysmith-vault-v1 key-wrap" + vault_id + bytes([purpose]) + struct.pack(">I", wrapped["epoch"])
    blob = base64.b64decode(wrapped["ciphertext"]) + base64.b64decode(wrapped["tag"])
    return AESGCM(kek).decrypt(base64.b64decode(wrapped["nonce"]), blob, ad)


def frames(data):
    magic, vault_id, sequence, count, crc = struct.unpack(">8s16sQII", data[:40])
    assert crc == zlib.crc32(data[:36]), "file header CRC"
    offset = 40
    for _ in range(count):
        head = data[offset:offset + 69]
        assert head[:4] == b"KSRF" and struct.unpack(">I", head[65:69])[0] == zlib.crc32(head[:65])
        op, epoch, version, record_id, nonce, length = struct.unpack(">BIQ32s12sI", head[4:65])
        body = data[offset + 69:offset + 69 + length + 16]
        yield op, epoch, version, record_id, nonce, body
        offset += 69 + length + 16 + 44
    assert offset == len(data), "trailing bytes"


def identity(record):
    def field(value):
        raw = value.encode()
        return struct.pack(">I", len(raw)) + raw
    out = b"keysmith-vault-v1 identity"
    if record["kind"] == "generic-password":
        return out + b"\x01" + field(record["service"]) + field(record["account"])
    return (out + b"\x02" + field(record["server"]) + field(str(record["port"])) + field(record["protocol"])
            + field(record["authenticationType"]) + field(record["securityDomain"]) + field(record["path"])
            + field(record["account"]))


def decode(plain):
    kind, created, modified, flags = struct.unpack(">BQQB", plain[:18])
    # Seconds since 2001-01-01T00:00:00Z; printed as seconds since the Unix epoch.
    as_double = lambda bits: struct.unpack(">d", struct.pack(">Q", bits))[0] + 978307200
    names = {1: "service", 2: "account", 3: "server", 5: "protocol", 6: "authenticationType",
             7: "securityDomain", 8: "path", 9: "label", 10: "comment", 11: "description", 12: "creator", 13: "type"}
    record = {"kind": {1: "generic-password", 2: "internet-password"}[kind], "created": as_double(created),
              "modified": as_double(modified), "invisible": bool(flags & 1), "negative": bool(flags & 2)}
    offset = 18
    while offset < len(plain):
        tag, length = struct.unpack(">BI", plain[offset:offset + 5])
        value = plain[offset + 5:offset + 5 + length]
        offset += 5 + length
        if tag == 4:
            record["port"] = struct.unpack(">H", value)[0]
        elif tag == 14:
            record["generic"] = base64.b64encode(value).decode()
        elif tag == 15:
            record["secret"] = base64.b64encode(value).decode()
        else:
            record[names[tag]] = value.decode()
    if record["kind"] == "internet-password":
        assert record["protocol"] in PROTOCOLS
    return record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("vault")
    parser.add_argument("--passphrase-env")
    parser.add_argument("--keyfile")
    args = parser.parse_args()
    header = read_header(args.vault)
    vault_id = bytes.fromhex(header["vaultId"])
    passphrase = os.environ[args.passphrase_env].encode() if args.passphrase_env else None
    kek = kek_for(header, passphrase, args.keyfile)
    id_key = unwrap(kek, vault_id, header["idKey"], 1)
    data_keys = {w["epoch"]: unwrap(kek, vault_id, w, 2) for w in header["dataKeys"]}

    live = {}  # record id -> (version, record or None)

    def apply(data, expected=None):
        for op, epoch, version, record_id, nonce, body in frames(data):
            if expected is not None:
                assert version == expected, "frame out of place"
            if record_id in live and live[record_id][0] >= version:
                continue
            ad = (b"keysmith-vault-v1 record" + struct.pack(">H", 1) + vault_id + bytes([op])
                  + struct.pack(">IQ", epoch, version) + record_id)
            plain = AESGCM(data_keys[epoch]).decrypt(nonce, body, ad)
            if op == 2:
                live[record_id] = (version, None)
                continue
            record = decode(plain)
            assert hmac.new(id_key, identity(record), hashlib.sha256).digest() == record_id, "renamed record"
            live[record_id] = (version, record)

    following = 1
    snapshot = os.path.join(args.vault, "snapshot")
    if os.path.exists(snapshot):
        data = open(snapshot, "rb").read()
        apply(data)
        following = struct.unpack(">Q", data[24:32])[0] + 1
    while os.path.exists(os.path.join(args.vault, "log", "%016x" % following)):
        apply(open(os.path.join(args.vault, "log", "%016x" % following), "rb").read(), expected=following)
        following += 1

    records = [r for _, r in live.values() if r is not None]
    records.sort(key=lambda r: json.dumps(r, sort_keys=True))
    for record in records:
        print(json.dumps(record, sort_keys=True, ensure_ascii=False))


if __name__ == "__main__":
    main()
