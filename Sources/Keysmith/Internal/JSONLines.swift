/// Input read as JSON lines, one document per line, as `keysmith batch` and `token import
/// --batch` take it: the lines that are not blank (nothing but spaces and `\r`), each with its
/// number from 1 (blank lines count), for errors that name the line.
package enum JSONLines {
    /// The non-blank lines of `input`, numbered.
    package static func numbered(_ input: [UInt8]) -> [(number: Int, bytes: [UInt8])] {
        input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated().compactMap { index, line in
            line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") }) ? nil : (index + 1, Array(line))
        }
    }
}
