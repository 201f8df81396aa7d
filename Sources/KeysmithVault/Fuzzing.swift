import Keysmith

/// Entry points for the libFuzzer targets in Fuzz/ (not part of the supported API).
@_spi(Fuzzing)
public enum VaultFormatFuzzing {
    /// Runs every parser of both vault formats over untrusted bytes: the header (both
    /// versions), a log or snapshot file, a format 2 log's head and table, a snapshot's head and
    /// index page, and a record's plaintext. Must never trap, whatever the input.
    public static func parse(_ bytes: [UInt8]) {
        _ = try? VaultHeader1.parse(bytes)
        _ = HeaderFormat.probe(bytes)
        for kind in [FrameFile.Kind.log, .snapshot] { _ = FrameFile.parseHeader(bytes, kind: kind) }
        let parsed = FrameFile.parseFrames(bytes)
        for (frame, _) in parsed.frames { _ = frame.associatedData(vaultID: [UInt8](repeating: 0, count: 16)) }
        _ = try? RecordCodec.decode(bytes, withSecret: true)

        // Format 2: the parsers run on the bytes as if they were a whole file, as the engine does.
        if let head = try? LogFile.parseHead(Array(bytes.prefix(Format.logHeaderSize)), fileSize: bytes.count) {
            let tableEnd = Format.logHeaderSize + head.count * Format.tableEntrySize
            if tableEnd <= bytes.count {
                _ = LogFile.parseTable(Array(bytes[Format.logHeaderSize..<tableEnd]), count: head.count,
                                        bodiesStart: tableEnd + Format.macSize, fileSize: bytes.count)
            }
        }
        if let head = try? SnapshotFile.parseHead(Array(bytes.prefix(Format.snapshotHeaderSize)), fileSize: bytes.count),
           head.pageCount > 0
        {
            let count = head.entryCount(ofPage: 0)
            let end = min(bytes.count, head.pagesStart + count * Format.indexEntrySize)
            if head.pagesStart <= end,
               let first = RecordID(Array(bytes[min(bytes.count, head.pagesStart)..<min(bytes.count, head.pagesStart + 32)]))
            {
                _ = SnapshotFile.parsePage(Array(bytes[head.pagesStart..<end]), count: count, head: head, fileSize: bytes.count,
                                            first: first)
            }
        }
    }
}
