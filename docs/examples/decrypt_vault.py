#!/usr/bin/env python3
"""An independent decryptor and checker for Keysmith vaults, format versions 1 and 2, written
from docs/format.md.

    decrypt_vault.py VAULT_DIR (--passphrase-env VAR | --keyfile FILE)

Prints one JSON object per live record (secrets base64-encoded), sorted by kind and names. For
format 2 it checks everything the format authenticates (header MAC, KDF bounds, the commit chain,
the snapshot's directory and pages, every record) and exits non-zero naming the first problem.
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


def hmac256(key, data):
    return hmac.new(key, data, hashlib.sha256).digest()


def field(raw):
    return struct.pack(">I", len(raw)) + raw


def read_header_v2(vault):
    """The copy in force: the primary when its checksum holds, else the backup."""
    for name in ("header", "header.backup"):
        path = os.path.join(vault, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        data = open(path, "rb").read()
        covered, suffix = data[:-73], data[-73:]
        if suffix != b"\nsha256=" + hashlib.sha256(covered).hexdigest().encode() + b"\n":
            continue
        body, mac_line = covered[:-69], covered[-69:]
        assert mac_line[:5] == b"\nmac=", "format 2 header without a MAC line"
        return body, bytes.fromhex(mac_line[5:].decode())
    sys.exit("no intact header")


def check_kdf_v2(kdf):
    salt = base64.b64decode(kdf["salt"])
    assert len(salt) == 32, "salt is not 32 bytes"
    if kdf["type"] == "scrypt":
        n, r, p = kdf["n"], kdf["r"], kdf["p"]
        assert 2 ** 14 <= n <= 2 ** 20 and n & (n - 1) == 0 and r == 8 and 1 <= p <= 4, "scrypt parameters out of bounds"
    else:
        assert kdf["type"] == "keyfile" and not any(k in kdf for k in ("n", "r", "p")), "unknown KDF"
    return salt


def main_v2(args):
    body, mac = read_header_v2(args.vault)
    header = json.loads(body)
    assert header["format"] == "keysmith-vault" and header["version"] == 2
    vault_id = bytes.fromhex(header["vaultId"])
    kdf = header["kdf"]
    salt = check_kdf_v2(kdf)  # before any derivation
    if kdf["type"] == "scrypt":
        kek = hashlib.scrypt(os.environ[args.passphrase_env].encode(), salt=salt, n=kdf["n"], r=kdf["r"], p=kdf["p"],
                             dklen=32, maxmem=1100 * 1024 * 1024)
    else:
        key = bytes.fromhex(open(args.keyfile).read().strip())
        kek = hmac256(key, b"keysmith-vault-v2 keyfile-kek" + salt)
    assert hmac.compare_digest(hmac256(hmac256(kek, b"keysmith-vault-v2 header-mac"), body), mac), "wrong credential or altered header"
    descriptor = ("%s|%d|%d|%d|%s" % (kdf["type"], kdf.get("n") or 0, kdf.get("r") or 0, kdf.get("p") or 0, kdf["salt"])).encode()

    def unwrap2(wrapped, purpose):
        ad = b"keysmith-vault-v2 key-wrap" + vault_id + bytes([purpose]) + struct.pack(">I", wrapped["epoch"]) + field(descriptor)
        blob = base64.b64decode(wrapped["ciphertext"]) + base64.b64decode(wrapped["tag"])
        return AESGCM(kek).decrypt(base64.b64decode(wrapped["nonce"]), blob, ad)

    assert header["idKey"]["epoch"] == 0
    id_key = unwrap2(header["idKey"], 1)
    epochs = {}
    for wrapped in header["dataKeys"]:
        data_key = unwrap2(wrapped, 2)
        epochs[wrapped["epoch"]] = (hmac256(data_key, b"keysmith-vault-v2 record-key"),
                                    hmac256(data_key, b"keysmith-vault-v2 chain-key"))
    assert header["currentEpoch"] in epochs

    def open_record(data, offset, length, nonce, tag, epoch, version, op, record_id):
        body = data[offset:offset + length]
        assert len(body) == length, "record cut short"
        ad = b"keysmith-vault-v2 record" + vault_id + struct.pack(">IQ", epoch, version) + bytes([op]) + record_id
        return AESGCM(epochs[epoch][0]).decrypt(nonce, body + tag, ad)

    live = {}  # record id -> (version, record or None)
    data = open(os.path.join(args.vault, "data", "snapshot"), "rb").read()
    magic, snap_vault, through, epoch, count, pages, per_page, through_mac = struct.unpack(">8s16sQIQII32s", data[:84])
    assert magic == b"KSMVSNP2" and snap_vault == vault_id and epoch in epochs
    assert 1 <= per_page <= 4096 and pages == (count + per_page - 1) // per_page and pages <= 2 ** 20
    assert through < 2 ** 62 and count <= 2 ** 32 and 84 + 64 * pages + 32 + 84 * count <= len(data), "snapshot bounds"
    directory = data[84:84 + 64 * pages]
    assert hmac.compare_digest(hmac256(epochs[epoch][1], b"keysmith-vault-v2 snapshot" + data[:84] + directory),
                               data[84 + 64 * pages:84 + 64 * pages + 32]), "snapshot MAC"
    pages_start = 84 + 64 * pages + 32
    bodies_start = pages_start + 84 * count
    previous_id, total = b"", 0
    for page in range(pages):
        n = per_page if page < pages - 1 else count - page * per_page
        raw = data[pages_start + page * per_page * 84:pages_start + page * per_page * 84 + n * 84]
        first, page_mac = directory[64 * page:64 * page + 32], directory[64 * page + 32:64 * page + 64]
        expected = hmac256(epochs[epoch][1], b"keysmith-vault-v2 page" + vault_id + struct.pack(">QI", through, page) + raw)
        assert hmac.compare_digest(expected, page_mac), "page %d MAC" % page
        for index in range(n):
            record_id, version, rec_epoch, offset, length, nonce, tag = struct.unpack(">32sQIQI12s16s", raw[84 * index:84 * index + 84])
            assert record_id > previous_id and (index > 0 or record_id == first), "index order"
            assert 1 <= version <= through and offset >= bodies_start and rec_epoch in epochs
            assert length <= 64 * 2 ** 20 and offset + length <= len(data), "record bounds"
            previous_id = record_id
            total += length
            plain = open_record(data, offset, length, nonce, tag, rec_epoch, version, 1, record_id)
            record = decode(plain)
            assert hmac256(id_key, identity(record)) == record_id, "renamed record"
            live[record_id] = (version, record)
    assert bodies_start + total == len(data), "snapshot size"

    chain, sequence = through_mac, through + 1
    log_dir = os.path.join(args.vault, "data", "log")
    def log_number(name):
        if len(name) == 16 and all(c in "0123456789abcdef" for c in name) and 1 <= int(name, 16) < 2 ** 62:
            return int(name, 16)
        return None  # not a log: ignored

    numbers = sorted(n for n in (log_number(name) for name in os.listdir(log_dir) if not name.startswith(".")) if n is not None)
    later = [n for n in numbers if n > through]
    assert later == list(range(through + 1, through + 1 + len(later))), "a log is missing"
    for sequence in later:
        log = open(os.path.join(log_dir, "%016x" % sequence), "rb").read()
        magic, log_vault, log_sequence, log_epoch, frames_count, previous = struct.unpack(">8s16sQII32s", log[:72])
        assert magic == b"KSMVLOG2" and log_vault == vault_id and log_sequence == sequence and log_epoch in epochs
        assert 1 <= frames_count <= 2 ** 20 and 72 + 65 * frames_count + 32 <= len(log), "log bounds"
        table = log[72:72 + 65 * frames_count]
        commit_mac = log[72 + 65 * frames_count:72 + 65 * frames_count + 32]
        assert hmac.compare_digest(hmac256(epochs[log_epoch][1], b"keysmith-vault-v2 commit" + log[:72] + table), commit_mac), "commit MAC"
        assert previous == chain, "the chain is broken at log %d" % sequence
        chain = commit_mac
        offset = 72 + 65 * frames_count + 32
        for index in range(frames_count):
            record_id, op, length, nonce, tag = struct.unpack(">32sBI12s16s", table[65 * index:65 * index + 65])
            assert op in (1, 2) and length <= 64 * 2 ** 20 and (op == 1 or length == 0), "table entry"
            plain = open_record(log, offset, length, nonce, tag, log_epoch, sequence, op, record_id)
            offset += length
            if op == 2:
                assert plain == b""
                live[record_id] = (sequence, None)
            else:
                record = decode(plain)
                assert hmac256(id_key, identity(record)) == record_id, "renamed record"
                live[record_id] = (sequence, record)
        assert offset == len(log), "log size"
    return live


def identity(record):
    def field(value):
        raw = value.encode()
        return struct.pack(">I", len(raw)) + raw
    out = b"keysmith-vault-v1 identity"
    if record["kind"] == "keysmith-record":
        return out + b"\x03" + field(record["recordType"]) + field(record["service"]) + field(record["account"])
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
             7: "securityDomain", 8: "path", 9: "label", 10: "comment", 11: "description", 12: "creator", 13: "type",
             16: "recordType"}
    record = {"kind": {1: "generic-password", 2: "internet-password", 3: "keysmith-record"}[kind], "created": as_double(created),
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
    peek = open(os.path.join(args.vault, "header"), "rb").read()
    if b'"version" : 2' in peek:
        print_records(main_v2(args))
        return
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

    print_records(live)


def print_records(live):
    records = [r for _, r in live.values() if r is not None]
    records.sort(key=lambda r: json.dumps(r, sort_keys=True))
    for record in records:
        print(json.dumps(record, sort_keys=True, ensure_ascii=False))


if __name__ == "__main__":
    main()
