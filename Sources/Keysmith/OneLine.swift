/// Text made to stay on its line: decisions are printed one reason per line, and a scope name, a
/// revocation's reason, a policy id or a database server's message is anybody's text, so a line
/// break in one must not start a line of its own (a forged `allow:` under a denial, say), nor a
/// terminal escape reach the terminal.
package enum OneLine {
    /// `text` with control characters, line and paragraph separators and bidirectional
    /// controls written as escapes (`\n`, `\r`, `\t`, `\u{202E}`).
    package static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if let escape = escape(scalar, uppercase: true) { out += escape } else { out.unicodeScalars.append(scalar) }
        }
        return out
    }

    /// `text` with every scalar ``needsEscape(_:)`` names written `\u{hex}` (lower-case hex),
    /// line breaks included (`\u{a}`): the command's text tables (`token show`, `token list`,
    /// `audit show`), whose documented escape this is.
    package static func unicodeEscaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if needsEscape(scalar) { out += unicodeEscape(scalar, uppercase: false) } else { out.unicodeScalars.append(scalar) }
        }
        return out
    }

    /// How `scalar` is written when it must not appear raw (``needsEscape(_:)``): `\n`, `\r`,
    /// `\t`, else `\u{hex}` (hex digits in `uppercase` or not); `nil` for any other scalar.
    package static func escape(_ scalar: Unicode.Scalar, uppercase: Bool) -> String? {
        switch scalar {
        case "\n": "\\n"
        case "\r": "\\r"
        case "\t": "\\t"
        case _ where needsEscape(scalar): unicodeEscape(scalar, uppercase: uppercase)
        default: nil
        }
    }

    /// `\u{hex}`, the policy language's escape of any scalar.
    package static func unicodeEscape(_ scalar: Unicode.Scalar, uppercase: Bool) -> String {
        "\\u{" + String(scalar.value, radix: 16, uppercase: uppercase) + "}"
    }

    /// Policy text on one line: each line break, with the indentation after it, is one space.
    package static func policyText(_ text: String) -> String {
        guard text.contains(where: \.isNewline) else { return escaped(text) }
        return escaped(text.split(whereSeparator: \.isNewline).map { $0.drop(while: \.isWhitespace) }.joined(separator: " "))
    }

    package static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F..<0xA0, 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
