/// Entry points for the libFuzzer targets in Fuzz/ (not part of the supported API).
@_spi(Fuzzing)
public enum VaultFormatFuzzing {
    /// Runs every parser of the vault format over untrusted bytes: the header, a log or
    /// snapshot file and a record's plaintext. Must never trap, whatever the input.
    public static func parse(_ bytes: [UInt8]) {
        _ = try? VaultHeader.parse(bytes)
        for kind in [FrameFile.Kind.log, .snapshot] { _ = FrameFile.parseHeader(bytes, kind: kind) }
        let parsed = FrameFile.parseFrames(bytes)
        for (frame, _) in parsed.frames { _ = frame.associatedData(vaultID: [UInt8](repeating: 0, count: 16)) }
        _ = try? RecordCodec.decode(bytes, withSecret: true)
    }
}
